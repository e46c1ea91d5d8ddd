"""The queries of `reconciler backfill`, typed: one function per named statement of queries.sql."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TypedDict, cast

from reconciler.db.rows import Conn
from reconciler.db.store import Store


class BackfillTaskRow(TypedDict):
    """The task as an engine compiles it, its pause in force, and the database's clock."""

    id: str
    source: str
    enabled: bool
    next_run_at: datetime | None
    spec_text: str
    now: datetime
    paused_by: str | None  # a pause in force: it holds the backfill's runs until it ends
    paused_reason: str | None
    paused_until: datetime | None


class OccurrenceRunRow(TypedDict):
    """The newest run of an instant: what --reprocess decides by."""

    scheduled_for: datetime
    id: int
    kind: str
    status: str
    backfill_id: int | None


class BackfillRow(TypedDict):
    """A backfill with the counts of its occurrences by the status of each one's newest run."""

    id: int
    task_id: str
    source: str
    range_from: datetime
    range_to: datetime
    reprocess: str
    actor: str
    reason: str | None
    queued: int
    created_at: datetime
    cancelled_at: datetime | None
    cancelled_by: str | None
    waiting: int
    running: int
    succeeded: int
    unsuccessful: int
    dropped: int


class UnsuccessfulRow(TypedDict):
    scheduled_for: datetime
    id: int
    status: str
    http_status: int | None
    error: str | None


class CancelLockRow(TypedDict):
    id: int
    task_id: str
    source: str
    cancelled_at: datetime | None


class IdRow(TypedDict):
    id: int


class DroppedRow(TypedDict):
    dropped: int


class QueuedAtRow(TypedDict):
    scheduled_for: datetime


class StallRow(TypedDict):
    """What may hold a backfill's oldest queued run (else its oldest running one), by the database's clock."""

    now: datetime
    engines: int  # live engines: a heartbeat at most live_seconds old
    task_id: str
    enabled: bool
    next_run_at: datetime | None
    slots: int  # the task's max_running_instances
    in_flight: int  # the task's live leases
    ahead: int  # the task's queued runs that start before this one (manual runs, older backfill runs)
    paused_by: str | None  # a pause in force
    paused_reason: str | None
    paused_until: datetime | None
    run_id: int
    status: str  # queued, or running when none of the backfill's runs is queued any more
    scheduled_for: datetime
    hold_seconds: float  # the longest a run of the task may take
    running: int  # the backfill's runs in flight
    full_limits: list[str]  # the task's limits with no room now
    occurrence_run: int | None  # another run of the same occurrence, in flight


async def backfill_lock(conn: Conn, *, id: str) -> list[IdRow]:
    """Lock the task's row (nothing when there is no such task)."""
    return cast(list[IdRow], await Store.fetch(conn, "backfill_lock", {"id": id}))


async def backfill_task(conn: Conn, *, id: str) -> list[BackfillTaskRow]:
    return cast(list[BackfillTaskRow], await Store.fetch(conn, "backfill_task", {"id": id}))


async def backfill_runs(conn: Conn, *, task_id: str, lo: datetime, hi: datetime) -> list[OccurrenceRunRow]:
    """The newest run (but manual ones) of each instant of [lo, hi) that has any."""
    params = {"task_id": task_id, "lo": lo, "hi": hi}
    return cast(list[OccurrenceRunRow], await Store.fetch(conn, "backfill_runs", params))


async def backfill_insert(
    conn: Conn,
    *,
    task_id: str,
    source: str,
    range_from: datetime,
    range_to: datetime,
    reprocess: str,
    actor: str,
    reason: str | None,
    queued: int,
) -> int:
    """A backfill's row; its id."""
    params = {
        "task_id": task_id,
        "source": source,
        "range_from": range_from,
        "range_to": range_to,
        "reprocess": reprocess,
        "actor": actor,
        "reason": reason,
        "queued": queued,
    }
    [row] = cast(list[IdRow], await Store.fetch(conn, "backfill_insert", params))
    return row["id"]


async def backfill_queue(
    conn: Conn, *, task_id: str, backfill_id: int, scheduled: Sequence[datetime], hold_seconds: float
) -> list[QueuedAtRow]:
    """Queue the backfill's runs, oldest first; the instants queued."""
    params = {
        "task_id": task_id,
        "backfill_id": backfill_id,
        "scheduled": list(scheduled),
        "hold_seconds": hold_seconds,
    }
    return cast(list[QueuedAtRow], await Store.fetch(conn, "backfill_queue", params))


async def backfills_list(conn: Conn, *, task_id: str | None, id: int | None, limit: int) -> list[BackfillRow]:
    params = {"task_id": task_id, "id": id, "limit": limit}
    return cast(list[BackfillRow], await Store.fetch(conn, "backfills_list", params))


async def backfill_unsuccessful(conn: Conn, *, id: int, limit: int) -> list[UnsuccessfulRow]:
    return cast(list[UnsuccessfulRow], await Store.fetch(conn, "backfill_unsuccessful", {"id": id, "limit": limit}))


async def backfill_cancel_lock(conn: Conn, *, id: int) -> list[CancelLockRow]:
    return cast(list[CancelLockRow], await Store.fetch(conn, "backfill_cancel_lock", {"id": id}))


async def backfill_drop(conn: Conn, *, id: int, actor: str, error: str) -> int:
    """End the backfill's queued runs `skipped` with `error` and mark it cancelled; how many it dropped."""
    params = {"id": id, "actor": actor, "error": error}
    [row] = cast(list[DroppedRow], await Store.fetch(conn, "backfill_drop", params))
    return row["dropped"]


async def backfill_stall(conn: Conn, *, id: int, live_seconds: float, now: datetime | None = None) -> list[StallRow]:
    """What may hold the backfill's next run (nothing when none of its runs is queued or running)."""
    params = {"id": id, "live_seconds": live_seconds, "now": now}
    return cast(list[StallRow], await Store.fetch(conn, "backfill_stall", params))
