"""An engine's upkeep beside its claims: the heartbeat (and this machine's clock against the database's),
retention of the run history and the outbox, the fleet's partitions and late scan (on the engine leading each).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from reconciler.clock import Clock, DatabaseClock, statement_now, utcnow
from reconciler.db import queries
from reconciler.db.initialize import Initialized, maintain
from reconciler.db.rows import Conn
from reconciler.db.store import DB_FAULTS, Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.jobs import Jobs
from reconciler.engine.leader import leader_only
from reconciler.errors import one_line
from reconciler.notify.events import late_scan

log = logging.getLogger("reconciler.engine")

# How often an engine that may not maintain the partitions says so, at most.
MAINTAIN_WARN_SECONDS = 3600.0

# How often every engine looks for jobs past their deadline or heartbeat timeout (an index read of the few job
# leases that expired): a job times out within this of its deadline, whichever engine started it.
JOBS_SCAN_SECONDS = 1.0


class Upkeep:
    """The heartbeat, the pruner and the late scan of one engine; `clock` gives the engine's clock
    (read at each use: a test may set another)."""

    def __init__(
        self,
        store: Store,
        config: EngineConfig,
        clock: Callable[[], Clock],
        jobs: Jobs,
        listening: Callable[[], bool | None] = lambda: None,
    ) -> None:
        self.store = store
        self.config = config
        self._clock = clock
        self.listening = listening
        self.jobs = jobs  # any engine ends overdue jobs
        self.clock_off = False  # the last heartbeat found this machine's clock past max_clock_offset
        self.warned = -MAINTAIN_WARN_SECONDS  # time.monotonic() of the last "may not maintain the partitions"

    @property
    def clock(self) -> Clock:
        return self._clock()

    def start(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """The upkeep tasks, running until `stop` (or cancelled)."""
        return [
            asyncio.create_task(self.every(stop, self.config.heartbeat_seconds, self.heartbeat, "heartbeat")),
            asyncio.create_task(
                self.every(
                    stop,
                    self.config.prune_seconds,
                    lambda: self.prune_runs(self.clock.now()),
                    "pruning the run history",
                )
            ),
            asyncio.create_task(
                self.every(
                    stop,
                    self.config.prune_seconds,
                    leader_only(
                        self.store,
                        self.config.engine_id,
                        "partitions",
                        lambda: self.maintain_partitions(self.clock.now()),
                        3 * self.config.prune_seconds,
                    ),
                    "maintaining the partitions",
                )
            ),
            asyncio.create_task(
                self.every(
                    stop,
                    self.config.heartbeat_seconds,
                    leader_only(
                        self.store,
                        self.config.engine_id,
                        "late scan",
                        lambda: late_scan(self.store, statement_now(self.clock)),
                        3 * self.config.heartbeat_seconds,
                    ),
                    "late scan",
                )
            ),
            asyncio.create_task(
                self.every(
                    stop, JOBS_SCAN_SECONDS, lambda: self.jobs.end_overdue(statement_now(self.clock)), "ending jobs"
                )
            ),
        ]

    async def maintain_partitions(self, now: datetime) -> Initialized:
        """One pass over the partitioned tables (on the engine leading "partitions"): partitions made a few days
        ahead of `now`, and whole days of history retired once they are older than the longest --keep-runs-days of
        the live engines (a partition holding a run in flight, or one that finished since, stays). An engine whose
        role may not (it does not own the tables) says so once an hour: `reconciler db maintain` does it then."""
        days = self.config.keep_runs_days
        async with self.store.connection() as conn:
            others = await queries.engines_keep_runs_days(conn, engine_id=self.config.engine_id)
        keep = None if days is None or None in others else max([days, *(d for d in others if d is not None)])
        done = Initialized()
        await maintain(self.store, now, keep, done)
        if not done.maintained and time.monotonic() - self.warned >= MAINTAIN_WARN_SECONDS:
            self.warned = time.monotonic()
            log.warning(
                "this engine's role may not create or drop partitions (it does not own schema scheduler's tables): "
                "run `reconciler db maintain --keep-runs-days N` as the owner daily, or inserts fail once the "
                "partitions made ahead run out (docs/operations.md#partitions)"
            )
        return done

    async def prune_runs(self, now: datetime, max_batches: int | None = None) -> int:
        """One pass over what retention deletes row by row: finished runs beyond `policy.keep_runs` per task, and
        delivered and given-up notifications and audit rows older than `keep_runs_days`, `prune_batch` rows at a
        time until none is left (or `max_batches`). Runs older than `keep_runs_days` go by whole partitions
        (maintain_partitions).

        Only the runs of the engine's sources (`engine --source`; every source when none is given).
        Sized to the backlog, so retention keeps up with any rate of runs, and gentle: each batch is
        a short transaction locking only the rows it deletes (replicas pruning by age at once skip
        each other's), and the pass rests as long as each batch took, so it takes at most half of
        one database backend beside the claims."""
        batch, sources = self.config.prune_batch, self.config.sources
        rules: list[Callable[[Conn], Awaitable[int]]] = [
            lambda conn: queries.runs_prune_keep(conn, batch=batch, sources=sources)
        ]
        if self.config.keep_runs_days is not None:
            before = now - timedelta(days=self.config.keep_runs_days)
            rules += [
                lambda conn: queries.notifications_prune_age(conn, before=before, batch=batch, sources=sources),
                lambda conn: queries.audit_prune_age(conn, before=before, batch=batch, sources=sources),
            ]
        deleted = 0
        for rule in rules:
            for _ in itertools.count() if max_batches is None else range(max_batches):
                started = time.monotonic()
                async with self.store.connection() as conn:
                    count = await rule(conn)
                deleted += count
                if count < batch:
                    break
                await asyncio.sleep(time.monotonic() - started)
        if deleted:
            log.info(
                "pruned %d finished run(s), notification(s) and audit row(s)",
                deleted,
                extra={"fields": {"pruned": deleted}},
            )
        return deleted

    async def every(
        self, stop: asyncio.Event, seconds: float, work: Callable[[], Awaitable[object]], what: str
    ) -> None:
        """`work` now and then every `seconds` until `stop`, beside serve()'s claims (the heartbeat,
        the pruner): what fails is tried again next time; a database away is the claim loop's to report."""
        while not stop.is_set():
            try:
                await work()
            except DB_FAULTS:
                pass
            except Exception as exc:  # not the database: a bug, logged with its stack
                log.warning("%s failed (%s); next try in %g s", what, one_line(exc), seconds, exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=seconds)

    async def heartbeat(self) -> None:
        """Say this engine is alive (by the database's clock), and measure this machine's clock against it."""
        host, pid, now = socket.gethostname(), os.getpid(), statement_now(self.clock)
        async with self.store.connection() as conn:
            sent = utcnow()
            database = f"{conn.info.host}:{conn.info.port}"  # of a multi-host DSN, the host libpq chose
            [row] = await queries.engine_heartbeat(
                conn,
                engine_id=self.config.engine_id,
                host=host,
                pid=pid,
                now=now,
                database=database,
                listening=self.listening(),
                keep_runs_days=self.config.keep_runs_days,
            )
            received = utcnow()
        if isinstance(self.clock, DatabaseClock):
            self.check_offset(self.clock.measure(sent, row["database_now"], received))

    def check_offset(self, offset: float) -> None:
        """A warning when this machine's clock goes further off the database's than max_clock_offset (and a
        line when it is back): nothing fires early or late for it, but this host's own timestamps are off."""
        bound = self.config.max_clock_offset
        off = abs(offset) > bound
        if off and not self.clock_off:
            log.warning(
                "this machine's clock is %.1f s %s the database's (more than --max-clock-offset %g s): the "
                "database's clock decides what is due, so nothing fires early or late, but timestamps this host "
                "writes outside reconciler (and its logs' times) are off by as much; check its time sync (NTP)",
                abs(offset),
                "behind" if offset > 0 else "ahead of",
                bound,
                extra={"fields": {"clock_offset_seconds": round(offset, 3)}},
            )
        elif self.clock_off and not off:
            log.info("this machine's clock is back within %g s of the database's (%+.3f s)", bound, offset)
        self.clock_off = off
