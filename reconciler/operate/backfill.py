"""Backfill (`reconciler backfill`): re-run a past range of a task's occurrences, exactly and idempotently.

The occurrences are those the task's schedule gives in [from, to), compiled as an engine compiles it (the
stored spec with the calendars bound: trigger, zone, DST rules, business days, blackouts) and computed by the
same `next_fire`. A dry run and the real run call the same `listing`; the real run takes the task's row lock
first, so what it queues is exactly what it listed. Each queued run (kind `backfill`) keeps its occurrence's
`scheduled_for`, hence the occurrence's Idempotency-Key. Engines start backfill runs like manual ones (a free
slot, oldest first), only when a run is over before the task's next occurrence (runs.hold_seconds), and
queue again a backfill run found lost (see queries.sql: claim_queued, runs_mark_lost).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

from reconciler.clock import utc_iso, utc_text
from reconciler.db import backfill_queries
from reconciler.db.backfill_queries import BackfillTaskRow, OccurrenceRunRow, StallRow
from reconciler.db.rows import Conn
from reconciler.db.store import Store
from reconciler.errors import UserError, one_line
from reconciler.operate.audit import Operator, record
from reconciler.runs import PENDING, UNSUCCESSFUL
from reconciler.schedule.base import Fire, Schedule
from reconciler.schedule.catchup import TICK
from reconciler.schedule.excluded import Excluded, excluded_span
from reconciler.schedule.preview import fires_in, upcoming
from reconciler.schedule.triggers import compile_schedule
from reconciler.schedule.walltime import resolve_local
from reconciler.spec.task import TaskSpec
from reconciler.spec.values import year_problem

MAX_OCCURRENCES = 10_000  # queued by one backfill
REPROCESS = ("none", "failed", "all")
GAPS_LOOKED_AT = 50  # upcoming occurrences whose spacing says whether backfill runs fit between them


def resolve_instant(text: str, option: str, zone: ZoneInfo) -> datetime:
    """An ISO date or date-time; without an offset it is the task's wall-clock time (as in its file), and
    one that a DST change skips or repeats is a one-line error asking for an offset."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(
            f"{option}: {text!r} is not an ISO date or date-time; write e.g. 2026-10-23 or 2026-10-23T00:00:00+02:00"
        ) from None
    problem = year_problem(value)
    if problem:
        raise UserError(f"{option}: {problem}")
    if value.tzinfo is not None:
        return value
    resolved = resolve_local(value, zone)
    if resolved.kind == "normal":
        return resolved.instants[0]
    what = "does not exist (a DST gap)" if resolved.kind == "gap" else "happens twice (a DST overlap)"
    example = resolved.instants[0].astimezone(zone).isoformat()
    raise UserError(f"{option}: {text} {what} in {zone.key}; give an offset, e.g. {example}")


@dataclass
class Listing:
    """What a backfill of a task over [start, end) queues, and what it leaves out and why."""

    task_id: str
    source: str
    spec: TaskSpec
    start: datetime
    end: datetime
    now: datetime  # the database's clock
    reprocess: str
    queue: list[Fire] = field(default_factory=list)  # oldest first
    already_run: list[tuple[Fire, OccurrenceRunRow]] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)
    unlisted: int = 0  # excluded occurrences past those listed (the range can hold millions of them)
    counted: bool = True  # False: `excluded_count` is a lower bound (the count stopped, see excluded_span)
    notes: list[str] = field(default_factory=list)

    @property
    def excluded_count(self) -> int:
        """Every excluded occurrence of the range, listed or not."""
        return len(self.excluded) + self.unlisted

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.spec.timezone)

    def as_json(self) -> dict[str, object]:
        """`{"id", "occurrences", "already_run", "excluded"}` (ISO instants), with the range and notes."""
        return {
            "id": self.task_id,
            "from": utc_iso(self.start),
            "to": utc_iso(self.end),
            "reprocess": self.reprocess,
            "occurrences": [utc_iso(fire.at) for fire in self.queue],
            "already_run": [utc_iso(fire.at) for fire, _ in self.already_run],
            "excluded": [{"at": utc_iso(item.at), "reason": item.reason} for item in self.excluded],
            "excluded_count": self.excluded_count,
            "excluded_count_exact": self.counted,
            "notes": self.notes,
        }


def _compiled(row: BackfillTaskRow) -> tuple[TaskSpec, Schedule]:
    """The task's spec and schedule as an engine compiles them from its row; a one-line error when the
    stored spec no longer validates."""
    try:
        spec = TaskSpec.model_validate_json(row["spec_text"])
        return spec, compile_schedule(spec)
    except ValueError as exc:  # pydantic's ValidationError and TriggerError are ValueErrors
        raise UserError(
            f"task {row['id']!r}: the stored spec no longer validates ({one_line(exc)}); `reconciler apply` restores it"
        ) from None


def _chosen(fire: Fire, run: OccurrenceRunRow | None, reprocess: str) -> bool:
    """Whether the backfill queues this occurrence, given its newest run (None: it has none)."""
    if run is None:
        return True
    if run["kind"] == "backfill" and run["status"] in PENDING:
        return False  # a backfill run of it waits or runs already: never two at once
    return reprocess == "all" or (reprocess == "failed" and run["status"] in UNSUCCESSFUL)


def _notes(row: BackfillTaskRow, spec: TaskSpec, schedule: Schedule, now: datetime) -> list[str]:
    """What the operator should know before the runs start: a disabled task, and a task whose runs do not fit
    between its occurrences (backfill runs wait for a gap as long as a run may take)."""
    notes = []
    if not row["enabled"]:
        notes.append(f"{row['id']} is disabled: its backfill runs run all the same (an explicit request)")
    if row["paused_by"] is not None:
        until = f" until {utc_text(row['paused_until'])}" if row["paused_until"] else ""
        notes.append(
            f"{row['id']} is paused{until} by {row['paused_by']} ({row['paused_reason']}): its backfill runs wait "
            "until the pause ends (`reconciler resume`)"
        )
    fires = upcoming(schedule, now, GAPS_LOOKED_AT)
    gaps = [(b.at - a.at).total_seconds() for a, b in itertools.pairwise(fires)]
    if row["enabled"] and gaps and min(gaps) <= spec.run_seconds:
        notes.append(
            f"a run of {row['id']} may take {spec.run_seconds:g} s (timeout × attempts, backoff, jitter) and its "
            f"occurrences come {min(gaps):g} s apart: backfill runs start only when the next occurrence is at least "
            "that far away, so they may wait long; a shorter target.timeout_seconds lets them in"
        )
    return notes


async def listing(conn: Conn, task_id: str, start_text: str, end_text: str, reprocess: str) -> Listing:
    """The backfill's occurrences: a dry run prints this, the real run (under the task's lock) queues it."""
    rows = await backfill_queries.backfill_task(conn, id=task_id)
    if not rows:
        raise UserError(f"unknown task {task_id!r}: apply its file first; `reconciler status` lists the tasks")
    row = rows[0]
    spec, schedule = _compiled(row)
    zone = ZoneInfo(spec.timezone)
    start = resolve_instant(start_text, "--from", zone)
    end = resolve_instant(end_text, "--to", zone)
    now = row["now"]
    if start >= end:
        raise UserError(f"--from {utc_text(start)} is not before --to {utc_text(end)}: the range is [from, to)")
    if end > now:
        raise UserError(
            f"--to {utc_text(end)} is in the future (the database's clock: {utc_text(now)}); a backfill re-runs the "
            "past: give --to at most now, the schedule fires what comes after"
        )
    fires, more = fires_in(schedule, start, end, MAX_OCCURRENCES)
    if more:
        following = schedule.next_fire(fires[-1].at)  # the first occurrence left out: more says there is one
        split = utc_iso(following.at if following is not None else fires[-1].at + TICK)
        raise UserError(
            f"{task_id} has more than {MAX_OCCURRENCES:,} occurrences in [{utc_text(start)}, {utc_text(end)}); a "
            f"backfill queues at most {MAX_OCCURRENCES:,}: backfill up to --to {split} first, then from there"
        )
    found = Listing(task_id, row["source"], spec, start, end, now, reprocess)
    span = excluded_span(schedule, start - TICK, end - TICK, limit=MAX_OCCURRENCES)
    found.excluded, found.unlisted, found.counted = span.listed, span.unlisted, span.exact
    cut = row["next_run_at"] if row["enabled"] else None
    recorded = await backfill_queries.backfill_runs(conn, task_id=task_id, lo=start, hi=end)
    runs = {r["scheduled_for"]: r for r in recorded}
    for fire in fires:
        if cut is not None and fire.at >= cut:  # the engine's own catch-up fires it or records it missed
            reason = f"due, not claimed yet: an engine fires or records it (next_run_at {utc_text(cut)})"
            found.excluded.append(Excluded(fire.at, reason))
        elif _chosen(fire, runs.get(fire.at), reprocess):
            found.queue.append(fire)
        else:
            found.already_run.append((fire, runs[fire.at]))
    found.excluded.sort()
    found.notes = _notes(row, spec, schedule, now)
    return found


@dataclass(frozen=True)
class Queued:
    """What a backfill queued: its id (None when there was nothing to queue) and its audit row."""

    listing: Listing
    backfill_id: int | None = None
    audit_id: int | None = None


async def queue(
    store: Store, task_id: str, start_text: str, end_text: str, reprocess: str, operator: Operator
) -> Queued:
    """List and queue in one transaction under the task's row lock: two backfills of a task serialize, and the
    second queues nothing the first did. Nothing to queue writes nothing (no backfill, no audit row)."""
    async with store.transaction() as conn:
        await backfill_queries.backfill_lock(conn, id=task_id)
        found = await listing(conn, task_id, start_text, end_text, reprocess)
        if not found.queue:
            return Queued(found)
        backfill_id = await backfill_queries.backfill_insert(
            conn,
            task_id=task_id,
            source=found.source,
            range_from=found.start,
            range_to=found.end,
            reprocess=reprocess,
            actor=operator.actor,
            reason=operator.reason,
            queued=len(found.queue),
        )
        queued = await backfill_queries.backfill_queue(
            conn,
            task_id=task_id,
            backfill_id=backfill_id,
            scheduled=[fire.at for fire in found.queue],
            hold_seconds=found.spec.run_seconds,
        )
        if len(queued) != len(found.queue):  # under the lock nothing else queues runs of this task: a bug
            raise RuntimeError(f"backfill listed {len(found.queue)} occurrences but queued {len(queued)}")
        details = {
            "backfill_id": backfill_id,
            "from": utc_iso(found.start),
            "to": utc_iso(found.end),
            "reprocess": reprocess,
            "queued": len(queued),
        }
        audit_id = await record(conn, operator, "backfill", found.source, [task_id], details)
        await Store.notify(conn, json.dumps({"source": "backfill", "count": len(queued), "ids": [task_id]}))
    return Queued(found, backfill_id, audit_id)


@dataclass(frozen=True)
class Cancelled:
    """What a cancel did: the backfill, its task, how many queued runs it dropped, its audit row."""

    backfill_id: int
    task_id: str
    dropped: int
    audit_id: int


async def cancel(store: Store, backfill_id: int, operator: Operator) -> Cancelled:
    """Drop what the backfill still has queued; runs in flight finish. Cancelling twice is an error."""
    async with store.transaction() as conn:
        rows = await backfill_queries.backfill_cancel_lock(conn, id=backfill_id)
        if not rows:
            raise UserError(f"no backfill {backfill_id}; `reconciler backfill --list` shows them")
        row = rows[0]
        if row["cancelled_at"] is not None:
            raise UserError(f"backfill {backfill_id} was already cancelled at {utc_text(row['cancelled_at'])}")
        error = f"dropped: backfill {backfill_id} cancelled by {operator.actor}"
        dropped = await backfill_queries.backfill_drop(conn, id=backfill_id, actor=operator.actor, error=error)
        details = {"backfill_id": backfill_id, "dropped": dropped}
        audit_id = await record(conn, operator, "cancel", row["source"], [row["task_id"]], details)
    return Cancelled(backfill_id, row["task_id"], dropped, audit_id)


def held_by(row: StallRow, live_seconds: float) -> list[str]:
    """Why the backfill's next run has not started (or, none queued, not ended): each reason that holds now, as
    claim_queued and backfill_may_start decide, the most fundamental first; [] when none the code knows of holds."""
    task, now, hold = row["task_id"], row["now"], row["hold_seconds"]
    reasons = []
    if row["engines"] == 0:
        reasons.append(
            f"no engine is live (none sent a heartbeat in the last {live_seconds:g} s): start `reconciler engine`"
        )
    if row["paused_by"] is not None:
        until = f" until {utc_text(row['paused_until'])}" if row["paused_until"] else ""
        reasons.append(
            f"{task} is paused{until} by {row['paused_by']} ({row['paused_reason']}): its backfill runs wait until "
            f"the pause ends (`reconciler resume {task}`)"
        )
    if row["status"] == "running":  # nothing of it is queued any more: its last runs take their time
        return [*reasons, f"its last {row['running']} run(s) are in flight; a run of {task} may take {hold:g} s"]
    if row["full_limits"]:
        names = ", ".join(row["full_limits"])
        reasons.append(f"{task}'s limit {names} has no room now; its runs take turns with the limit's other tasks")
    if row["in_flight"] + row["ahead"] >= row["slots"]:
        ahead = f" and {row['ahead']} queued run(s) go first" if row["ahead"] else ""
        reasons.append(
            f"{task}'s {row['slots']} slot(s) (policy.max_running_instances) are taken: {row['in_flight']} run(s) "
            f"in flight{ahead}; a run of {task} may take {hold:g} s"
        )
    cut = row["next_run_at"] if row["enabled"] else None
    if cut is not None and cut <= now:
        reasons.append(
            f"{task}'s occurrence {utc_text(cut)} is due and not fired yet: backfill runs start once an engine has "
            "fired it and there is room before the next"
        )
    elif cut is not None and (away := (cut - now).total_seconds()) < hold:
        reasons.append(
            f"{task}'s next occurrence is {utc_text(cut)}, {away:.0f} s away, and a run may take {hold:g} s: a "
            "backfill run starts only when it is over before the task's next occurrence"
        )
    if row["occurrence_run"] is not None:
        reasons.append(
            f"run {row['occurrence_run']} of the same occurrence ({utc_text(row['scheduled_for'])}) is in flight: "
            "its backfill run waits until it ends"
        )
    return reasons


async def waits_for(store: Store, backfill_id: int, live_seconds: float, now: datetime | None = None) -> list[str]:
    """What holds the backfill's runs now (see held_by); [] when nothing of it is queued or running, or nothing
    known holds it."""
    async with store.connection() as conn:
        rows = await backfill_queries.backfill_stall(conn, id=backfill_id, live_seconds=live_seconds, now=now)
    return held_by(rows[0], live_seconds) if rows else []
