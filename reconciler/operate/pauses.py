"""Runtime pauses: `reconciler pause` and `resume` (not in git, not in the task spec).

A pause is a row of scheduler.pauses; the engine claims a paused task's due occurrences as usual but
records them `skipped` ("paused by ACTOR: REASON") instead of firing them, so next_run_at advances and
nothing piles up. A resume deletes the row and recomputes next_run_at from now, as an apply that
re-enables a task does: paused time is never caught up. A pause with an end (`--until`) ends by
itself: the engine skips what fell due before the end and fires from then on.

Each command is one transaction that locks the tasks it names (a claim holding one commits first),
writes the pauses and its audit row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.clock import utc_iso
from reconciler.db import operator_queries, queries
from reconciler.db.command_queries import database_now
from reconciler.db.operator_queries import OperatorTaskRow
from reconciler.db.rows import Conn
from reconciler.db.statements import execute
from reconciler.db.store import Store
from reconciler.errors import UserError, one_line
from reconciler.operate.audit import Operator, one_source, record
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.task import TaskSpec

UNKNOWN_SHOWN = 20  # unknown ids named in an error


@dataclass(frozen=True)
class Selection:
    """The tasks a command names: ids, or every task of a source; with ids, a source they must belong to."""

    ids: tuple[str, ...] = ()
    source: str | None = None

    def __post_init__(self) -> None:
        if not self.ids and self.source is None:
            raise UserError("name the tasks: give task IDs, or --source S for every task of a source")

    def describe(self) -> str:
        return f"source {self.source!r}" if not self.ids else ", ".join(self.ids)


@dataclass
class Outcome:
    """What a pause or resume did, for its messages and exit code."""

    tasks: list[OperatorTaskRow]
    now: datetime
    done: list[str] = field(default_factory=list)  # paused, or resumed
    before: dict[str, OperatorTaskRow] = field(default_factory=dict)  # pauses in force it replaced or ended
    ended: list[str] = field(default_factory=list)  # resume: pauses already past their end, cleared
    not_paused: list[str] = field(default_factory=list)  # resume: named, but not paused
    next_runs: dict[str, datetime | None] = field(default_factory=dict)  # resume: next_run_at from now
    unschedulable: dict[str, str] = field(default_factory=dict)  # resume: stored specs that no longer validate
    audit_id: int | None = None


async def _selected(conn: Conn, selection: Selection) -> list[OperatorTaskRow]:
    """The named tasks, locked; a one-line error for ids that are no task, or a source without tasks."""
    source = selection.source if not selection.ids else None
    rows = await operator_queries.operator_tasks(conn, ids=selection.ids, source=source)
    found = {row["id"]: row for row in rows}
    unknown = [task_id for task_id in dict.fromkeys(selection.ids) if task_id not in found]
    if unknown:
        named = ", ".join(repr(i) for i in unknown[:UNKNOWN_SHOWN])
        more = f" and {len(unknown) - UNKNOWN_SHOWN} more" if len(unknown) > UNKNOWN_SHOWN else ""
        raise UserError(f"unknown task(s) {named}{more}; see `reconciler status` for the ids")
    if selection.ids and selection.source is not None:
        other = [row for row in rows if row["source"] != selection.source]
        if other:
            raise UserError(
                f"task {other[0]['id']!r} is of source {other[0]['source']!r}, not {selection.source!r}; "
                "drop --source, or name only that source's tasks"
            )
    if not rows:
        raise UserError(f"source {selection.source!r} has no tasks; see `reconciler status` for the sources")
    return rows


async def pause_tasks(store: Store, selection: Selection, operator: Operator, until: datetime | None) -> Outcome:
    """Pause the selected tasks (a task already paused gets the new who, why and end; since when stays)."""
    if operator.reason is None:
        raise UserError("pause: --reason is required: say why, for whoever finds the task paused")
    async with store.transaction() as conn:
        rows = await _selected(conn, selection)
        now = await database_now(conn)
        if until is not None and until <= now:
            raise UserError(f"--until {utc_iso(until)} is not in the future (the database's clock: {utc_iso(now)})")
        outcome = Outcome(rows, now, done=[row["id"] for row in rows])
        outcome.before = {row["id"]: row for row in rows if row["in_force"]}
        await operator_queries.pause_upsert(
            conn, ids=outcome.done, actor=operator.actor, reason=operator.reason, until=until
        )
        details = {
            "until": utc_iso(until) if until else None,
            "selected": selection.describe() if not selection.ids else None,
            "already_paused": sorted(outcome.before),
        }
        source = one_source([row["source"] for row in rows])
        outcome.audit_id = await record(conn, operator, "pause", source, outcome.done, details)
    return outcome


def next_from(row: OperatorTaskRow, now: datetime) -> datetime | None:
    """The task's next occurrence after `now` (None while disabled or past its last), as an apply that
    re-enables a task computes it; a ValueError for a stored spec that no longer validates."""
    if not row["enabled"]:
        return None
    return compile_schedule(TaskSpec.model_validate(json.loads(row["spec_text"]))).next_fire_time(now)


async def resume_tasks(store: Store, selection: Selection, operator: Operator) -> Outcome:
    """Resume the selected tasks that are paused: from now, no catch-up of the paused time."""
    async with store.transaction() as conn:
        rows = await _selected(conn, selection)
        now = await database_now(conn)  # read after the row locks, as apply's retime
        outcome = Outcome(rows, now)
        for row in rows:
            if row["in_force"]:
                outcome.done.append(row["id"])
                outcome.before[row["id"]] = row
            elif row["paused_by"] is not None:
                outcome.ended.append(row["id"])
            elif selection.ids:
                outcome.not_paused.append(row["id"])
        cleared = outcome.done + outcome.ended
        if not cleared:
            return outcome
        await operator_queries.pauses_clear(conn, ids=cleared)
        for row in rows:
            if row["id"] in cleared:
                try:
                    outcome.next_runs[row["id"]] = next_from(row, now)
                except ValueError as exc:  # pydantic's ValidationError and TriggerError are ValueErrors
                    outcome.unschedulable[row["id"]] = one_line(exc)
        if outcome.next_runs:
            await execute(
                conn,
                queries.tasks_advance(
                    ids=list(outcome.next_runs),
                    nexts=list(outcome.next_runs.values()),
                    waits=[None] * len(outcome.next_runs),
                ),
            )
        details = {
            "selected": selection.describe() if not selection.ids else None,
            "ended_before": outcome.ended,
            "not_paused": outcome.not_paused,
        }
        source = one_source([row["source"] for row in rows if row["id"] in cleared])
        outcome.audit_id = await record(conn, operator, "resume", source, cleared, details)
        await Store.notify(conn, json.dumps({"source": "resume", "count": len(cleared), "ids": cleared[:100]}))
    return outcome
