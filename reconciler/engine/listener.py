"""The engine's LISTEN connection, kept beside the claims: a NOTIFY (an apply, a manual run, a freed
slot) wakes the claim loop at once instead of at its next poll.

It runs on a connection of its own (`engine --listen-dsn`, else the engine's DSN), made again when it
drops, with a line in the log when it drops and when it is back, and the gauge
`reconciler_listen_connected`. Without it the engine polls every POLL_SECONDS: slower to see a
change, never wrong. At its first connection it checks that a NOTIFY reaches it: behind a pooler
in transaction mode (PgBouncer's `pool_mode = transaction`) LISTEN registers on a server connection
that other clients take over at the next transaction, and no notification comes back; the engine
then says so once and polls for its whole life.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time

from reconciler.db.errors import redact
from reconciler.db.listening import Listening
from reconciler.db.store import DB_FAULTS, Store
from reconciler.errors import one_line
from reconciler.spec.backoff import backoff_delay

log = logging.getLogger("reconciler.engine")

POLL_SECONDS = 1.0  # the longest sleep between claims while no LISTEN connection is up
PROBE_SECONDS = 5.0  # how long the first connection waits for its own test NOTIFY
CHECK_SECONDS = 5.0  # how often the listener checks that its server still answers and still takes writes
RETRY_CAP_SECONDS = 5.0  # the longest wait between tries to make the connection again


class Listener:
    """The LISTEN connection's life: `run` keeps it up until stopped; `woken` is set by each NOTIFY."""

    def __init__(self, store: Store, dsn: str | None = None) -> None:
        self.store = store
        self.dsn = dsn  # None: the store's
        self.woken = asyncio.Event()
        self.connected = False
        self.polling_only = False  # the first connection received no NOTIFY: polling for good
        self._lost_at: float | None = None  # monotonic time it dropped; None: up, or never up yet
        self._checked = False  # a test NOTIFY has come through

    @property
    def where(self) -> str:
        return redact(self.dsn or self.store.dsn)

    def sleep_cap(self, seconds: float) -> float:
        """How long the claim loop may sleep when it would sleep `seconds`: at most POLL_SECONDS without
        a LISTEN connection."""
        return seconds if self.connected else min(seconds, POLL_SECONDS)

    async def run(self, stop: asyncio.Event) -> None:
        """Keep the connection up until `stop`; never raises but for cancellation."""
        delay = 0.5
        while not stop.is_set() and not self.polling_only:
            conn: Listening | None = None
            try:
                conn = await self.store.listen(self.dsn)
                if not self._checked:
                    if not await self._delivers(conn):
                        return
                    self._checked = True
                self._up()
                delay = 0.5
                await self._hear(conn, stop)
            except Exception as exc:  # the connection dropped, or could not be made: polled meanwhile
                self._down(exc)
            finally:
                if self.connected:  # the claim loop may be in a long sleep: it sleeps POLL_SECONDS at most now
                    self.connected = False
                    self.woken.set()
                if conn is not None:
                    await conn.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
            delay = backoff_delay(delay, 2, cap=RETRY_CAP_SECONDS)

    async def _delivers(self, conn: Listening) -> bool:
        """Whether a NOTIFY sent on the engine's pool reaches `conn`; if not, say so once and poll for good."""
        probe = f"probe {secrets.token_hex(8)}"
        async with self.store.connection() as pooled:
            await Store.notify(pooled, probe)
        async for payload in conn.notifications(PROBE_SECONDS):
            if payload == probe:
                return True
        self.polling_only = True
        log.warning(
            "LISTEN on %s did not receive this engine's test NOTIFY within %g s: a pooler in transaction mode "
            "(PgBouncer pool_mode = transaction) does not pass notifications on; polling every %g s instead. "
            "Give LISTEN a direct or session-mode connection with --listen-dsn",
            self.where,
            PROBE_SECONDS,
            POLL_SECONDS,
            extra={"fields": {"listen": "unavailable"}},
        )
        return False

    async def _hear(self, conn: Listening, stop: asyncio.Event) -> None:
        """Set `woken` at each NOTIFY until `stop`; every CHECK_SECONDS check the connection: a connection
        cut without a word would wait forever, and a server that turned read-only or into a standby (a
        failover: the writes, and so the NOTIFYs, go to another server now) still takes LISTEN but hears
        nothing more. Raises when it drops or its server does not take writes any more."""
        while not stop.is_set():
            async for _ in conn.notifications(CHECK_SECONDS):
                self.woken.set()
            await conn.check()

    def _up(self) -> None:
        self.connected = True
        if self._lost_at is not None:
            down, self._lost_at = time.monotonic() - self._lost_at, None
            log.info(
                "LISTEN connection to %s back after %.1f s",
                self.where,
                down,
                extra={"fields": {"listen": "connected", "down_seconds": round(down, 1)}},
            )

    def _down(self, exc: BaseException) -> None:
        if self._lost_at is not None:
            return  # said already: tries to make it again log nothing
        self._lost_at = time.monotonic()
        # INFO: polling is correct, only slower to see a change; a database away says so itself (outage.py).
        level = logging.INFO if isinstance(exc, DB_FAULTS) else logging.ERROR
        log.log(
            level,
            "LISTEN connection to %s lost (%s); polling every %g s until it is back",
            self.where,
            one_line(exc),
            POLL_SECONDS,
            extra={"fields": {"listen": "lost"}},
            exc_info=not isinstance(exc, DB_FAULTS),
        )
