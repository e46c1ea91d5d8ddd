"""What people are shown of the database's state, read and shaped once for the CLI and the dashboard.

`status`, `explain`, `runs` and `history` print these; the dashboard renders the same values (and
serves them as its JSON), so the two never disagree: one read, one set of rules (overdue, paused,
masked), two renderings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, overload
from zoneinfo import ZoneInfo

from reconciler.clock import local_text, utc_text, when_text
from reconciler.db import command_queries, operator_queries
from reconciler.db.command_queries import EngineRow, OutboxRow, RunRow
from reconciler.db.operator_queries import PauseRow
from reconciler.db.rows import Conn, Row, TaskRow
from reconciler.errors import UserError, one_line
from reconciler.output import text as render
from reconciler.output.explain import TaskState, explain, occurrences_around, span
from reconciler.output.masking import mask_text, masked_job
from reconciler.reconcile.plan import is_drifted
from reconciler.schedule.excluded import blackout_now
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.task import TaskSpec

ENGINE_LIVE_SECONDS = 30  # a heartbeat at most this old: the engine is live


def local(moment: datetime | None, zone: str, machine: bool = False) -> str | None:
    """The instant in the task's zone: text for people, ISO with the offset for json."""
    if moment is None:
        return None if machine else "-"
    try:
        where = ZoneInfo(zone)
    except (KeyError, ValueError, OSError):  # a zone edited by hand (ZoneInfoNotFoundError is a KeyError)
        return None if machine else "(unknown zone)"
    return moment.astimezone(where).isoformat() if machine else local_text(moment, where)


def paused_fields(pause: PauseRow | None) -> dict[str, Any] | None:
    """A task's pause in force (by, reason, since, until), None when it is not paused."""
    if pause is None:
        return None
    return {
        "paused_by": pause["paused_by"],
        "reason": pause["reason"],
        "paused_at": pause["paused_at"],
        "paused_until": pause["paused_until"],
    }


def status_item(row: Mapping[str, Any], pauses: Mapping[str, PauseRow], now: datetime, machine: bool) -> dict[str, Any]:
    """One task as `status` shows it: its next run (none while disabled), its last run, overdue, drift, pause.
    `row` has status_rows' columns (the dashboard's task query selects them too)."""
    task_row = TaskRow.from_row(row)
    # A disabled task has no next run, whatever a hand edit left in next_run_at.
    next_run_at = row["next_run_at"] if row["enabled"] else None
    return {
        "id": row["id"],
        "source": row["source"],
        "enabled": row["enabled"],
        "timezone": row["timezone"],
        "next_run_at": next_run_at,
        "next_run_local": local(next_run_at, row["timezone"], machine=machine),
        # a paused task fires nothing on purpose: no engine is failing to claim it
        "overdue": row["id"] not in pauses
        and render.is_overdue(row["enabled"], next_run_at, render.grace_seconds(task_row.spec), now),
        "last_run_at": row["last_scheduled_for"],
        "last_status": row["last_status"],
        "last_scheduled_for": row["last_scheduled_for"],
        "last_finished_at": row["last_finished_at"],
        "drift": is_drifted(task_row),
        "paused": paused_fields(pauses.get(row["id"])),
        # a due occurrence held back by a limit (limits.d): an engine claimed it and will start it when it has room
        "waiting_for": row.get("limit_wait") if row["enabled"] else None,
    }


def engine_item(row: EngineRow) -> dict[str, Any]:
    """One live engine as `status` and /engines show it."""
    return {
        "engine_id": row["engine_id"],
        "host": row["host"],
        "pid": row["pid"],
        "last_seen": row["last_seen"],
        "heartbeat_age_seconds": round(max(0.0, row["heartbeat_age_seconds"]), 1),
        "database": row["database"],
        "server": row["server"],
        "primary": row["is_primary"],
        "listen_connected": row["listen_connected"],
    }


def json_task(item: Mapping[str, Any]) -> dict[str, Any]:
    """A status item as json: instants as ISO text, the pause's too."""
    [task] = render.json_rows([item])
    return {**task, "paused": render.json_rows([item["paused"]])[0] if item["paused"] else None}


def masked(row: Mapping[str, Any], *keys: str) -> Row:
    """The row with the free text under `keys` masked (errors and excerpts may quote a credential)."""
    return {**row, **{key: mask_text(row[key]) if row.get(key) else row.get(key) for key in keys}}


async def with_notifications(conn: Conn, runs: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Each run with the notifications it caused (errors masked) under `notifications`, in one query for
    all; none where the outbox is missing or unreadable (a database, or a role's grants, from before it)."""
    notes: dict[int, list[Row]] = {}
    if runs and (await command_queries.notifications_readable(conn))[0]["readable"]:
        run_ids = [run["id"] for run in runs]
        for note in await command_queries.notifications_of_runs(conn, run_ids=run_ids):
            notes.setdefault(note["run_id"], []).append(masked(note, "error"))
    return [{**run, "notifications": notes.get(run["id"], [])} for run in runs]


def json_runs(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Runs (with their notifications) as `runs --format json` prints them."""
    return [{**run, "notifications": render.json_rows(run.get("notifications", []))} for run in render.json_rows(rows)]


def masked_runs(rows: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Runs with their free text and what their jobs reported (progress, output) masked."""
    return [masked_job(masked(row, "error", "response_excerpt")) for row in rows]


@overload
async def listing(
    conn: Conn, of: Literal["runs"], task_id: str | None, status: str | None, limit: int
) -> tuple[list[RunRow], bool]: ...


@overload
async def listing(
    conn: Conn, of: Literal["notifications"], task_id: str | None, status: str | None, limit: int
) -> tuple[list[OutboxRow], bool]: ...


async def listing(
    conn: Conn, of: command_queries.History, task_id: str | None, status: str | None, limit: int
) -> tuple[list[RunRow] | list[OutboxRow], bool]:
    """The rows of a history (the runs, or the notifications), and whether `task_id` is known:
    a deleted task's history stays, so an id is known if a task or any row of that history has it."""
    rows = await command_queries.history(conn, of, task_id=task_id, status=status, limit=limit)
    if rows or task_id is None:
        return rows, True
    known = bool(await command_queries.task_get(conn, id=task_id)) or bool(
        await command_queries.history(conn, of, task_id=task_id, status=None, limit=1)
    )
    return rows, known


def stored_spec(task_id: str, spec_text: str) -> TaskSpec:
    """The stored spec as a model; a spec edited by hand that no longer validates is a one-line UserError."""
    try:
        return TaskSpec.model_validate(json.loads(spec_text))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError, and so is bad JSON
        raise UserError(
            f"task {task_id!r}: the stored spec no longer validates ({one_line(exc)}); `reconciler apply` restores it"
        ) from None


def blackout_holding(row: command_queries.TaskGetRow, now: datetime) -> str | None:
    """`year-end-freeze (until …)` when a blackout the task names holds `now`; None otherwise (or when its stored
    spec no longer validates: `explain` says why)."""
    try:
        spec = stored_spec(row["id"], row["spec_text"]).model_copy(update={"calendars": row["calendars"]})
        holding = blackout_now(compile_schedule(spec), now)
    except ValueError:  # UserError, TriggerError
        return None
    if holding is None:
        return None
    return f"{holding[0]} (until {when_text(holding[1], ZoneInfo(spec.timezone))})"


async def explain_lines(conn: Conn, task_id: str, asked: datetime | None) -> list[str]:
    """`explain ID [--at T]`: why the task did or did not fire around T (default: the database's now),
    unmasked and unescaped (the caller renders them); an unknown task is a UserError."""
    [clock] = await command_queries.clock_now(conn, now=None)  # "due" by the database's clock
    now: datetime = clock["now"]
    at = asked or now
    found = await command_queries.task_get(conn, id=task_id)
    if not found:
        raise UserError(f"task {task_id!r} is not in the database; apply its file first (`reconciler plan` shows it)")
    row = found[0]
    spec = stored_spec(task_id, row["spec_text"]).model_copy(update={"calendars": row["calendars"]})
    try:
        shown = occurrences_around(compile_schedule(spec), at)
    except ValueError as exc:  # a TriggerError
        raise UserError(f"task {task_id!r}: {one_line(exc)}; `reconciler apply` restores it") from None
    lo, hi = span(shown, at)
    between = await command_queries.runs_between(conn, task_id=task_id, lo=lo, hi=hi)
    runs = await with_notifications(conn, between)
    pause = (await operator_queries.pauses_readable(conn, ids=[task_id])).get(task_id)
    named = spec.policy.limits or []
    limits = await command_queries.limits_named(conn, source=row["source"], names=named) if named else []
    task = TaskState(
        row["id"],
        spec,
        row["enabled"],
        row["next_run_at"],
        row["created_at"],
        row["updated_at"],
        pause,
        row["limit_wait"],
        limits,
    )
    lines = explain(task, shown, runs, at, now)
    changed = row["revision"] or "unknown (applied without a revision)"
    return [*lines[:1], f"last changed by revision {changed} at {utc_text(row['updated_at'])}", *lines[1:]]
