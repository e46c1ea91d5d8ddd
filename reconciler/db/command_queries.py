"""The read and run commands' queries, typed (status, history, runs, notifications, trigger, cancel,
explain): one function per named statement of queries.sql, each row a TypedDict of its SELECT's columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypedDict, cast, overload

from reconciler.db.rows import Conn, RunHead
from reconciler.db.store import Store


class ClockRow(TypedDict):
    now: datetime


class TaskColumns(TypedDict):
    """A task's columns as tasks_all, task_get and status_rows select them first (TaskRow's fields)."""

    id: str
    source: str
    spec_text: str
    spec_hash: str
    enabled: bool
    timezone: str
    next_run_at: datetime | None
    version: str
    tampered: bool | None


class TaskGetRow(TaskColumns):
    created_at: datetime
    updated_at: datetime
    revision: str | None
    calendars: dict[str, dict[str, Any]] | None  # the calendars it names, as applied (None: none)
    limit_wait: str | None  # the limit its due occurrence waits for (None: none)


class JobColumns(TypedDict):
    """A job's columns of its run (completion = "callback", docs/jobs.md): when its target accepted it, its last
    heartbeat, its deadline, when it is retried (queued again), what it reported."""

    accepted_at: datetime | None
    heartbeat_at: datetime | None
    deadline_at: datetime | None
    retry_at: datetime | None
    progress: Any
    output: Any


class RunRow(RunHead, JobColumns):
    engine_id: str | None
    claimed_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    http_status: int | None
    error: str | None
    duration_ms: int | None
    response_excerpt: str | None
    backfill_id: int | None  # kind = 'backfill': the backfill it belongs to
    trace_id: str | None  # its W3C trace id (32 hex digits); None: a run from before traces were


class StatusRow(TaskColumns):
    """A task with its newest run's columns; the last_* are None before its first run."""

    last_status: str | None
    last_scheduled_for: datetime | None
    last_finished_at: datetime | None
    limit_wait: str | None  # the limit its due occurrence waits for (None: none)


class EngineRow(TypedDict):
    engine_id: str
    host: str
    pid: int
    started_at: datetime
    last_seen: datetime
    database: str | None  # host:port as the engine's libpq connected (a pooler's, behind one)
    server: str | None  # the server's own address:port (None over a Unix socket)
    is_primary: bool | None  # None: written by an older engine
    listen_connected: bool | None  # whether its LISTEN was up at that heartbeat; None: an older engine
    heartbeat_age_seconds: float  # by the database's clock


class LiveSourceRow(TypedDict):
    source: str
    revision: str | None
    applied_at: datetime
    author: str | None


class ApplyRow(TypedDict):
    id: int
    source: str
    revision: str | None
    author: str | None
    message: str | None
    reference: str | None
    applied_at: datetime
    counts: Any  # the stored `counts` JSON: {"create": 2, …} as apply writes it
    plan_digest: str | None
    op: str | None  # what the apply did to the task asked about; None when none was


class RunBetweenRow(RunHead, JobColumns):
    """A run as `explain` shows it: RunRow's columns but started_at, finished_at and duration_ms."""

    engine_id: str | None
    claimed_at: datetime
    http_status: int | None
    error: str | None
    response_excerpt: str | None
    backfill_id: int | None


class OutboxRow(TypedDict):
    """A notification as `reconciler notifications` lists it."""

    id: int
    created_at: datetime
    source: str
    task_id: str
    event: str
    notifier: str
    run_id: int | None
    scheduled_for: datetime | None
    status: str
    attempts: int
    next_attempt_at: datetime
    delivered_at: datetime | None
    http_status: int | None
    error: str | None
    engine_id: str | None


class RunNotificationRow(TypedDict):
    """A notification a run caused (under the run in `runs` and `explain`)."""

    id: int
    run_id: int  # never None here: the statement selects by it
    notifier: str
    event: str
    status: str
    attempts: int
    http_status: int | None
    error: str | None
    created_at: datetime
    delivered_at: datetime | None


class IdRow(TypedDict):
    id: int


class CancelledRow(TypedDict):
    id: int
    task_id: str


class ReadableRow(TypedDict):
    readable: bool


async def database_now(conn: Conn) -> datetime:
    """The database's clock now (clock_timestamp(), not the transaction's start), in UTC: "from now" for apply,
    pause and resume, read after the row locks they take."""
    now: datetime = (await Store.fetch(conn, "apply_clock"))[0]["now"]
    return now.astimezone(UTC)


async def clock_now(conn: Conn, *, now: datetime | None) -> list[ClockRow]:
    """`now`, or the database's clock (the transaction's time) when None."""
    return cast(list[ClockRow], await Store.fetch(conn, "clock_now", {"now": now}))


async def status_rows(conn: Conn) -> list[StatusRow]:
    """Each task (as tasks_all's columns) with its newest run's status and times."""
    return cast(list[StatusRow], await Store.fetch(conn, "status_rows"))


async def engines_live(conn: Conn, *, seconds: float) -> list[EngineRow]:
    """Engines (engine_id, host, pid, started_at, last_seen, the database they reached) heard from in the last
    `seconds`."""
    return cast(list[EngineRow], await Store.fetch(conn, "engines_live", {"seconds": seconds}))


async def applies_live_sources(conn: Conn) -> list[LiveSourceRow]:
    """Each source's live revision (source, revision, applied_at, author)."""
    return cast(list[LiveSourceRow], await Store.fetch(conn, "applies_live_sources"))


async def applies_list(conn: Conn, *, source: str | None, task_id: str | None, limit: int) -> list[ApplyRow]:
    """The applies, newest first (of `source`, that changed `task_id`, when given)."""
    params = {"source": source, "task_id": task_id, "limit": limit}
    return cast(list[ApplyRow], await Store.fetch(conn, "applies_list", params))


class LimitNamedRow(TypedDict):
    name: str
    max_in_flight: int | None
    rate_per_second: float | None
    burst: float | None
    in_flight: int  # its tasks' runs running now
    tokens: float | None  # in its bucket now (None: no rate)


async def limits_named(conn: Conn, *, source: str, names: Sequence[str]) -> list[LimitNamedRow]:
    """The limits `names` of `source` as they stand (those in the database)."""
    params = {"source": source, "names": list(names), "now": None}
    return cast(list[LimitNamedRow], await Store.fetch(conn, "limits_named", params))


async def task_get(conn: Conn, *, id: str) -> list[TaskGetRow]:
    return cast(list[TaskGetRow], await Store.fetch(conn, "task_get", {"id": id}))


async def run_queue_manual(
    conn: Conn, *, task_id: str, now: datetime | None, traceparent: str | None = None
) -> list[IdRow]:
    """Queue a manual run of `task_id` (in the trace of `traceparent`, a valid one, when given; else a new trace);
    its id."""
    params = {"task_id": task_id, "now": now, "traceparent": traceparent}
    return cast(list[IdRow], await Store.fetch(conn, "run_queue_manual", params))


async def run_get(conn: Conn, *, run_id: int) -> list[RunRow]:
    return cast(list[RunRow], await Store.fetch(conn, "run_get", {"run_id": run_id}))


async def run_cancel(conn: Conn, *, run_id: int, now: datetime | None, error: str) -> list[CancelledRow]:
    """Cancel run `run_id` if it is a queued one (recorded skipped with `error`); a row when it was."""
    params = {"run_id": run_id, "now": now, "error": error}
    return cast(list[CancelledRow], await Store.fetch(conn, "run_cancel", params))


async def runs_between(conn: Conn, *, task_id: str, lo: datetime, hi: datetime) -> list[RunBetweenRow]:
    """The runs of `task_id` scheduled (or requested) in [lo, hi], as RunRow's columns but started_at,
    finished_at and duration_ms."""
    return cast(list[RunBetweenRow], await Store.fetch(conn, "runs_between", {"task_id": task_id, "lo": lo, "hi": hi}))


History = Literal["runs", "notifications"]  # two row shapes: the overloads name each one's


@overload
async def history(
    conn: Conn, of: Literal["runs"], *, task_id: str | None, status: str | None, limit: int
) -> list[RunRow]: ...


@overload
async def history(
    conn: Conn, of: Literal["notifications"], *, task_id: str | None, status: str | None, limit: int
) -> list[OutboxRow]: ...


async def history(
    conn: Conn, of: History, *, task_id: str | None, status: str | None, limit: int
) -> list[RunRow] | list[OutboxRow]:
    """The rows of a history (the runs, or the notifications), newest first."""
    params = {"task_id": task_id, "status": status, "limit": limit}
    if of == "runs":
        return cast(list[RunRow], await Store.fetch(conn, "runs_list", params))
    return cast(list[OutboxRow], await Store.fetch(conn, "notifications_list", params))


async def notifications_readable(conn: Conn) -> list[ReadableRow]:
    """Whether this role may read the outbox."""
    return cast(list[ReadableRow], await Store.fetch(conn, "notifications_readable"))


async def notifications_of_runs(conn: Conn, *, run_ids: Sequence[int]) -> list[RunNotificationRow]:
    """The notifications runs `run_ids` caused, by run and id."""
    return cast(list[RunNotificationRow], await Store.fetch(conn, "notifications_of_runs", {"run_ids": list(run_ids)}))
