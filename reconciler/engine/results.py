"""Writing run results: queued as runs finish, written in batches, kept while the database is away.

One refused row must not cost the others their results: a refused batch is written row by
row, and a refused row once more without its excerpt and error text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from reconciler.clock import DATABASE, Clock
from reconciler.db import queries
from reconciler.db.store import DB_FAULTS, Store
from reconciler.errors import DatabaseRefused, one_line
from reconciler.notify.events import record_ended
from reconciler.targets.http import Attempt
from reconciler.targets.secrets import storable

log = logging.getLogger("reconciler.engine")

Result = dict[str, Any]  # the parameters of one run's row


def attempt_params(run_id: int, scheduled_for: datetime, attempt: Attempt) -> Result:
    """One attempt as the columns of its run's row (scheduled_for: the row's partition)."""
    return {
        "run_id": run_id,
        "scheduled_for": scheduled_for,
        "attempt": attempt.attempt,
        "started_at": datetime.fromtimestamp(attempt.sent_at, UTC) if attempt.sent_at else None,
        "http_status": attempt.http_status,
        "error": storable(attempt.error),
        "duration_ms": attempt.duration_ms,
        "excerpt": storable(attempt.excerpt),
    }


class Results:
    """Finished runs' results, queued until `flush` writes them in one transaction."""

    def __init__(self, store: Store, clock: Clock = DATABASE) -> None:
        self.store = store
        self.clock = clock
        self.pending: list[Result] = []
        self._arrived = asyncio.Event()
        self._lock = asyncio.Lock()

    def add(self, result: Result) -> None:
        """Queue a result; the writer loop (or run_once's flush) writes it."""
        self.pending.append(result)
        self._arrived.set()

    def finished(self) -> list[int]:
        """The run ids of results not written yet (their leases are still in the table)."""
        return [result["run_id"] for result in self.pending]

    def wake(self) -> None:
        """Make the writer loop look again (at shutdown)."""
        self._arrived.set()

    async def flush(self) -> int:
        """Write queued results in one transaction; raises on a database fault (results stay queued)."""
        async with self._lock:  # two flushes of one snapshot would drop what arrived in between
            batch = list(self.pending)
            if not batch:
                return 0
            refused = await self._try_write(batch)
            if refused is not None:
                log.warning(
                    "writing %d result(s) together failed (%s); writing them one by one", len(batch), one_line(refused)
                )
                for item in batch:
                    await self._write_alone(item)
            del self.pending[: len(batch)]
            return len(self.pending)

    async def _write_alone(self, result: Result) -> None:
        """Write one result; if the database refuses it, write it without its excerpt and error text."""
        refused = await self._try_write([result])
        if refused is None:
            return
        reason = f"the run's result could not be stored ({type(refused).__name__}); excerpt and error text dropped"
        # Without its notifications too: no event may cost a run its result.
        refused = await self._try_write([{**result, "excerpt": None, "error": reason, "ended": None}])
        if refused is not None:
            log.error(
                "run %s: result could not be stored (%s); its lease will expire", result["run_id"], one_line(refused)
            )

    async def _try_write(self, rows: list[Result]) -> DatabaseRefused | None:
        """_write; the error if the database refused the rows. Database faults propagate."""
        try:
            await self._write(rows)
        except DB_FAULTS:
            raise
        except DatabaseRefused as exc:
            return exc
        return None

    async def _write(self, rows: list[Result]) -> None:
        ended = [r["ended"] for r in rows if r.get("ended") is not None]
        # One round trip; one more when tasks with subscriptions ended (their events go in the same transaction).
        async with self.store.pipelined_transaction() as conn:
            await queries.finish_runs(
                conn,
                run_ids=[r["run_id"] for r in rows],
                scheduled=queries.partitions_of([r.get("scheduled_for") for r in rows]),
                statuses=[r["status"] for r in rows],
                attempts=[r["attempt"] for r in rows],
                started=[r["started_at"] for r in rows],
                finished=[r["finished_at"] for r in rows],
                http=[r["http_status"] for r in rows],
                errors=[r["error"] for r in rows],
                durations=[r["duration_ms"] for r in rows],
                excerpts=[r["excerpt"] for r in rows],
            )
            await record_ended(conn, ended, self.clock.now())

    async def writer(self, done: Callable[[], bool]) -> None:
        """Background writer for serve(): small batches, retried while the database is away, until `done()`."""
        while not (done() and not self.pending):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout=0.5)
            self._arrived.clear()
            await asyncio.sleep(0.02)  # gather a batch
            try:
                await self.flush()
            except DB_FAULTS:
                await asyncio.sleep(0.5)
            except Exception as exc:  # a bug must not stop result writing for good
                log.error("writing results failed: %s; retrying", one_line(exc), exc_info=True)
                await asyncio.sleep(0.5)
