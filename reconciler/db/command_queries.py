"""The read and run commands' queries, typed (status, history, runs, notifications, trigger, cancel,
explain): one function per named statement of queries.sql.

Rows that the commands pass on whole to their renderers (which take any row) stay plain `Row`s.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal, TypedDict, cast

from reconciler.db.store import Conn, Row, Store


class ClockRow(TypedDict):
    now: datetime


class TaskGetRow(TypedDict):
    id: str
    source: str
    spec_text: str
    spec_hash: str
    enabled: bool
    timezone: str
    next_run_at: datetime | None
    version: str
    tampered: bool | None
    created_at: datetime
    updated_at: datetime
    revision: str | None


class RunRow(TypedDict):
    id: int
    task_id: str
    scheduled_for: datetime
    kind: str
    status: str
    attempt: int
    engine_id: str | None
    claimed_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    http_status: int | None
    error: str | None
    duration_ms: int | None
    response_excerpt: str | None


class IdRow(TypedDict):
    id: int


class CancelledRow(TypedDict):
    id: int
    task_id: str


class ReadableRow(TypedDict):
    readable: bool


async def clock_now(conn: Conn, *, now: datetime | None) -> list[ClockRow]:
    """`now`, or the database's clock (the transaction's time) when None."""
    return cast(list[ClockRow], await Store.fetch(conn, "clock_now", {"now": now}))


async def status_rows(conn: Conn) -> list[Row]:
    """Each task (as tasks_all's columns) with its newest run's status and times."""
    return await Store.fetch(conn, "status_rows")


async def engines_live(conn: Conn, *, seconds: float) -> list[Row]:
    """Engines (engine_id, host, pid, started_at, last_seen) heard from in the last `seconds`."""
    return await Store.fetch(conn, "engines_live", {"seconds": seconds})


async def applies_live_sources(conn: Conn) -> list[Row]:
    """Each source's live revision (source, revision, applied_at, author)."""
    return await Store.fetch(conn, "applies_live_sources")


async def applies_list(conn: Conn, *, source: str | None, task_id: str | None, limit: int) -> list[Row]:
    """The applies, newest first (of `source`, that changed `task_id`, when given)."""
    return await Store.fetch(conn, "applies_list", {"source": source, "task_id": task_id, "limit": limit})


async def task_get(conn: Conn, *, id: str) -> list[TaskGetRow]:
    return cast(list[TaskGetRow], await Store.fetch(conn, "task_get", {"id": id}))


async def run_queue_manual(conn: Conn, *, task_id: str, now: datetime | None) -> list[IdRow]:
    """Queue a manual run of `task_id`; its id."""
    return cast(list[IdRow], await Store.fetch(conn, "run_queue_manual", {"task_id": task_id, "now": now}))


async def run_get(conn: Conn, *, run_id: int) -> list[RunRow]:
    return cast(list[RunRow], await Store.fetch(conn, "run_get", {"run_id": run_id}))


async def run_cancel(conn: Conn, *, run_id: int, now: datetime | None, error: str) -> list[CancelledRow]:
    """Cancel run `run_id` if it is a queued one (recorded skipped with `error`); a row when it was."""
    params = {"run_id": run_id, "now": now, "error": error}
    return cast(list[CancelledRow], await Store.fetch(conn, "run_cancel", params))


async def runs_between(conn: Conn, *, task_id: str, lo: datetime, hi: datetime) -> list[Row]:
    """The runs of `task_id` scheduled (or requested) in [lo, hi], as RunRow's columns but started_at,
    finished_at and duration_ms."""
    return await Store.fetch(conn, "runs_between", {"task_id": task_id, "lo": lo, "hi": hi})


History = Literal["runs", "notifications"]


async def history(conn: Conn, of: History, *, task_id: str | None, status: str | None, limit: int) -> list[Row]:
    """The rows of a history (the runs, or the notifications), newest first."""
    params = {"task_id": task_id, "status": status, "limit": limit}
    return await Store.fetch(conn, "runs_list" if of == "runs" else "notifications_list", params)


async def notifications_readable(conn: Conn) -> list[ReadableRow]:
    """Whether this role may read the outbox."""
    return cast(list[ReadableRow], await Store.fetch(conn, "notifications_readable"))


async def notifications_of_runs(conn: Conn, *, run_ids: Sequence[int]) -> list[Row]:
    """The notifications runs `run_ids` caused, by run and id."""
    return await Store.fetch(conn, "notifications_of_runs", {"run_ids": list(run_ids)})
