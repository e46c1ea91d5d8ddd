"""What a failover looks like from a connection, and the pool that follows it.

A primary that is demoted, or turned read-only (as a managed failover does before promoting its
standby), keeps its connections open: they still answer, and every write on them fails with
SQLSTATE 25006. A server shutting down answers 57P01/57P02/57P03. Such a connection, and every
other one of the pool (they reached the same server), is of no use any more: `Store` drops them all
at once (`AsyncConnectionPool.drain`), and libpq picks the writable host for the new ones, since every
DSN asks for `target_session_attrs=read-write` (added here unless the DSN says otherwise).

The pool's own reconnection waits 1, 2, 4, 8 … s between tries, without bound: after a 20 s outage
the next try came 30 s later. `FailoverPool` caps that wait at RECONNECT_CAP_SECONDS.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.base import AttemptWithBackoff

# Seconds: the longest wait between the pool's tries to reconnect.
RECONNECT_CAP_SECONDS = 2.0

# SQLSTATEs of a server that can no longer take this engine's writes: a read-only transaction (a
# demoted or read-only primary, a standby), an administrator's or a crash shutdown, a server starting
# or stopping.
WRONG_SERVER = frozenset({"25006", "57P01", "57P02", "57P03"})


def wrong_server(exc: BaseException) -> bool:
    """Whether `exc` says the connection reached a server that cannot take writes (any more)."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate in WRONG_SERVER


def reports_read_only(conn: AsyncConnection[Any]) -> bool:
    """Whether the server said, in the parameters it reports to every session (PostgreSQL 14 and
    later), that this session is on a standby or read-only by default: no round trip needed."""
    info = conn.info
    return "on" in (info.parameter_status("in_hot_standby"), info.parameter_status("default_transaction_read_only"))


def writable_dsn(dsn: str) -> str:
    """`dsn` asking libpq for a writable server (`target_session_attrs=read-write`) unless it names
    its own target_session_attrs: of a multi-host DSN, the host that is the primary now."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return dsn  # unparsable: connecting says why, with the DSN's origin (Store.open)
    if params.get("target_session_attrs"):
        return dsn
    return psycopg.conninfo.make_conninfo(dsn, target_session_attrs="read-write")


class _CappedAttempt(AttemptWithBackoff):
    """The pool's back-off between reconnection tries, at most RECONNECT_CAP_SECONDS."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_CAP_SECONDS)


class FailoverPool(AsyncConnectionPool[AsyncConnection[Any]]):
    """psycopg's pool, reconnecting at least every RECONNECT_CAP_SECONDS while the database is away
    (tests/integration/test_failover_pool.py holds it to that, on the installed psycopg_pool)."""

    async def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        await super()._add_connection(attempt or _CappedAttempt(timeout=self.reconnect_timeout), growing)
