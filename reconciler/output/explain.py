"""`reconciler explain ID --at T`: why a task did or did not fire around T (pure; the command reads the rows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.clock import utc_text, when_text
from reconciler.output.jobs import job_lines
from reconciler.output.masking import masked_job
from reconciler.schedule.base import Fire, Schedule
from reconciler.schedule.describe import describe_trigger, fire_line
from reconciler.schedule.excluded import blackout_now, excluded_between
from reconciler.schedule.triggers import compile_schedule
from reconciler.schedule.walltime import resolve_window_time
from reconciler.spec.task import TaskSpec

AROUND = 3  # occurrences shown on each side of T
LOOKBACK = (timedelta(hours=1), timedelta(days=1), timedelta(days=8), timedelta(days=32), timedelta(days=367))
MAX_STEPS = 20_000


@dataclass(frozen=True)
class TaskState:
    """The task row as the engine sees it."""

    id: str
    spec: TaskSpec
    enabled: bool
    next_run_at: datetime | None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    pause: Mapping[str, Any] | None = None  # its pause in force (`reconciler pause`), None when it has none
    limit_wait: str | None = None  # the limit its due occurrence waits for
    limits: Sequence[Mapping[str, Any]] = ()  # the limits it names, as they stand (limits_named)

    @property
    def full(self) -> str | None:
        """The first limit it names that has no room now (a queued run of it waits for that one)."""
        for limit in self.limits:
            if limit_full(limit):
                return str(limit["name"])
        return None


def limit_full(limit: Mapping[str, Any]) -> bool:
    """Whether a limit (limits_named's row) has no room now: max_in_flight running, or less than a token."""
    if limit["max_in_flight"] is not None and limit["in_flight"] >= limit["max_in_flight"]:
        return True
    return limit["rate_per_second"] is not None and (limit["tokens"] or 0) < 1


def limit_line(limit: Mapping[str, Any]) -> str:
    """One limit a task names, as it stands: `billing-api: max_in_flight = 4 (4 running), … — full`."""
    parts = []
    if limit["max_in_flight"] is not None:
        parts.append(f"max_in_flight = {limit['max_in_flight']} ({limit['in_flight']} running)")
    if limit["rate_per_second"] is not None:
        parts.append(
            f"rate_per_second = {limit['rate_per_second']:g}, burst = {limit['burst']:g} "
            f"({limit['tokens'] or 0:.1f} token(s) now)"
        )
    state = "full: runs wait for room" if limit_full(limit) else "has room"
    return f"{limit['name']}: {', '.join(parts)} — {state}"


def occurrences_around(schedule: Schedule, at: datetime, count: int = AROUND) -> list[Fire]:
    """Up to `count` occurrences at or before `at` and `count` after it, ascending."""
    before: list[Fire] = []
    for back in LOOKBACK:
        before = _walk(schedule, at - back, at, limit=None)
        if len(before) >= count:
            break
    after = _walk(schedule, at, None, limit=count)
    return before[-count:] + after


def span(shown: list[Fire], at: datetime) -> tuple[datetime, datetime]:
    """The instants whose runs an explanation needs: the shown occurrences and T, or a day around T."""
    if not shown:
        return at - timedelta(days=1), at + timedelta(days=1)
    return min(shown[0].at, at) - timedelta(seconds=1), max(shown[-1].at, at) + timedelta(seconds=1)


def _walk(schedule: Schedule, start: datetime, stop: datetime | None, limit: int | None) -> list[Fire]:
    """Occurrences after `start` (and at or before `stop`), at most `limit` of them."""
    found: list[Fire] = []
    cursor = start
    for _ in range(MAX_STEPS):
        fire = schedule.next_fire(cursor)
        if fire is None or (stop is not None and fire.at > stop):
            break
        found.append(fire)
        if limit is not None and len(found) >= limit:
            break
        cursor = fire.at
    return found


def _skipped_by_gap_policy(spec: TaskSpec, shown: list[Fire]) -> list[Fire]:
    """Occurrences that `policy.dst_gap = "skip"` removed from the span shown."""
    if spec.policy.dst_gap != "skip" or spec.trigger.kind not in ("cron", "calendar") or not shown:
        return []
    policy = spec.policy.model_copy(update={"dst_gap": "shift"})
    shifted = compile_schedule(spec.model_copy(update={"policy": policy}))
    kept = {f.at for f in shown}
    unskipped = _walk(shifted, shown[0].at - timedelta(seconds=1), shown[-1].at, limit=None)
    return [f for f in unskipped if f.at not in kept and f.note]


def _excluded_lines(
    calendared: Schedule | None, shown: list[Fire], at: datetime, zone: ZoneInfo
) -> list[tuple[datetime, str]]:
    """What the task's calendars took away in the span shown (no run rows: SPEC §6), each at its instant;
    `calendared` its schedule when it names calendars, else None."""
    if calendared is None or not shown:
        return []
    start, end = min(shown[0].at, at) - timedelta(seconds=1), max(shown[-1].at, at)
    found = excluded_between(calendared, start, end)
    return [(e.at, f"  {when_text(e.at, zone)}  → no run: {e.reason}") for e in found]


def _blackout_line(calendared: Schedule | None, at: datetime, zone: ZoneInfo) -> list[str]:
    """The blackout that holds T, if any."""
    holding = blackout_now(calendared, at) if calendared is not None else None
    return [] if holding is None else [f"  blackout at T: {holding[0]} until {when_text(holding[1], zone)}"]


def _run_text(run: Mapping[str, Any], full: str | None = None) -> str:
    """A run's outcome; `full`: a limit of its task with no room now (a queued run waits for it)."""
    late = (run["claimed_at"] - run["scheduled_for"]).total_seconds() if run.get("claimed_at") else None
    parts = [str(run["status"])]
    if run["status"] == "queued" and full is not None:
        parts.append(f"waiting for limit {full}")
    if run.get("http_status") is not None:
        parts.append(f"HTTP {run['http_status']}")
    if run.get("attempt"):
        parts.append(f"attempt {run['attempt']}")
    if late is not None and run["status"] != "queued":
        # a backfill run is late by design: when it was claimed says more than by how much
        claimed = (
            f"claimed {utc_text(run['claimed_at'])}"
            if run.get("kind") == "backfill"
            else f"claimed {late:.1f} s after due"
        )
        parts.append(claimed + (f" by {run['engine_id']}" if run.get("engine_id") else ""))
    text = ", ".join(parts)
    return f"{text}: {run['error']}" if run.get("error") else text


def _limit_lines(task: TaskState) -> list[str]:
    """The limits a task names, as they stand, and the one its due occurrence waits for."""
    named = task.spec.policy.limits or []
    found = {str(limit["name"]): limit for limit in task.limits}
    lines = [
        f"  limit {limit_line(found[name])}"
        if name in found
        else f"  limit {name}: not in the database (apply limits.d)"
        for name in named
    ]
    if task.limit_wait is not None:
        lines.append(
            f"  waiting for limit {task.limit_wait}: its due occurrence starts when the limit has room, "
            "oldest first and in turn with the limit's other tasks; past misfire_grace_seconds it is recorded missed"
        )
    return lines


def _missing_text(task: TaskState, fire: Fire, now: datetime) -> str:
    if not task.enabled:
        return "no run: the task is disabled (disabled time is not caught up)"
    if fire.at > now:
        return "upcoming" + (" (next_run_at)" if task.next_run_at == fire.at else "")
    if task.limit_wait is not None and task.next_run_at is not None and fire.at >= task.next_run_at:
        return f"due, waiting for limit {task.limit_wait}"
    if task.next_run_at is not None and fire.at >= task.next_run_at:
        return "due, not claimed yet: is an engine running? (`reconciler status` lists live engines)"
    if task.created_at is not None and fire.at < task.created_at:
        return f"no run: the task did not exist yet (created {utc_text(task.created_at)})"
    changed = f"; last changed {utc_text(task.updated_at)}" if task.updated_at else ""
    return (
        "no run recorded: next_run_at had already moved past it (a retiming or re-enabling recomputes "
        f"from then{changed}; or more than 100 occurrences fell due in one claim)"
    )


def explain(
    task: TaskState, shown: list[Fire], runs: Sequence[Mapping[str, Any]], at: datetime, now: datetime
) -> list[str]:
    """The explanation, one line per fact; `shown` is occurrences_around(T), `runs` those in span(shown, T)."""
    spec = task.spec
    zone = ZoneInfo(spec.timezone)
    policy = spec.policy
    lines = [f"{task.id} — {describe_trigger(spec)}"]
    lines.append(
        "  enabled: yes"
        if task.enabled
        else "  enabled: no — a disabled task never fires; enabling it recomputes next_run_at from then"
    )
    if task.pause is not None:
        pause = task.pause
        until = f"until {_when(pause['paused_until'], zone)}" if pause["paused_until"] else "until resumed"
        lines.append(
            f"  paused: by {pause['paused_by']} since {_when(pause['paused_at'], zone)}, {until}: {pause['reason']}"
            f" — its occurrences are recorded skipped, and not caught up (`reconciler resume {task.id}` ends it)"
        )
    lines.append(f"  next_run_at: {_when(task.next_run_at, zone)}")
    lines.append(
        f"  policy: misfire_grace_seconds = {policy.misfire_grace_seconds}, coalesce = {str(policy.coalesce).lower()}, "
        f"max_running_instances = {policy.max_running_instances}, retries = {policy.retries}"
    )
    window = _window_note(spec, at)
    if window:
        lines.append(f"  window: {window}")
    lines += _limit_lines(task)
    lines.append(f"around {_when(at, zone)}:")
    by_time = {r["scheduled_for"]: r for r in runs if r["kind"] not in ("manual", "backfill")}
    backfilled: dict[datetime, list[Mapping[str, Any]]] = {}
    for r in runs:
        if r["kind"] == "backfill":
            backfilled.setdefault(r["scheduled_for"], []).append(r)
    # Every occurrence in time order, whether it ran, was skipped by the DST rule or taken away by a calendar.
    entries: list[tuple[datetime, list[str]]] = []
    for fire in shown:
        run = by_time.get(fire.at)
        outcome = _run_text(run, task.full) if run else _missing_text(task, fire, now)
        block = [f"  {fire_line(fire, zone)}  → {outcome}", *_under(run)]
        for other in backfilled.get(fire.at, []):
            block.append(f"    backfill #{other['backfill_id']} run {other['id']} → {_run_text(other, task.full)}")
            block += _under(other)
        entries.append((fire.at, block))
    for fire in _skipped_by_gap_policy(spec, shown):
        entries.append((fire.at, [f'  {fire_line(fire, zone)}  → no run: policy.dst_gap = "skip"']))
    calendared = compile_schedule(spec) if spec.calendars is not None else None  # compiled once for both
    entries += [(instant, [line]) for instant, line in _excluded_lines(calendared, shown, at, zone)]
    marked = False
    for instant, block in sorted(entries, key=lambda entry: entry[0]):
        if shown and not marked and instant > at:
            lines.append(f"  ---- {utc_text(at)} (T)")
            marked = True
        lines += block
    if not shown:
        lines.append("  no occurrences: the schedule is exhausted (a fired `once`, or past end_at)")
    lines += _blackout_line(calendared, at, zone)
    manual = [r for r in runs if r["kind"] == "manual"]
    for run in manual:
        lines.append(
            f"  manual run {run['id']} requested {_when(run['scheduled_for'], zone)} → {_run_text(run, task.full)}"
        )
        lines += _under(run)
    return lines


def _under(run: Mapping[str, Any] | None) -> list[str]:
    """Under a run's line: its stored response excerpt and the notifications it caused (the command
    masks and escapes every line)."""
    if run is None:
        return []
    excerpt = run.get("response_excerpt")
    lines = [f"      response: {excerpt}"] if excerpt else []
    lines += [f"      {line}" for line in job_lines(masked_job(run))]
    return lines + [f"      {notified_line(note)}" for note in run.get("notifications", [])]


def notified_line(note: Mapping[str, Any]) -> str:
    """A notification a run caused: `notified oncall: delivered`, `… pending (attempt 2, HTTP 500: timed out)`;
    a delivered one names its attempt only when it took more than one, and no earlier attempt's error."""
    attempts = note["attempts"] or 0
    if note["status"] == "delivered":
        detail = f"attempt {attempts}" if attempts > 1 else ""
    else:
        facts = [f"attempt {attempts}"] if attempts else []
        facts += [f"HTTP {note['http_status']}"] if note.get("http_status") is not None else []
        detail = ": ".join(part for part in (", ".join(facts), note.get("error") or "") if part)
    return f"notified {note['notifier']}: {note['status']}" + (f" ({detail})" if detail else "")


def _when(moment: datetime | None, zone: ZoneInfo) -> str:
    return "none (disabled, or no further occurrence)" if moment is None else when_text(moment, zone)


def _window_note(spec: TaskSpec, at: datetime) -> str | None:
    trigger = spec.trigger
    if trigger.kind == "once" or (trigger.start_at is None and trigger.end_at is None):
        return None
    zone = ZoneInfo(spec.timezone)
    start = resolve_window_time(trigger.start_at, zone, "trigger.start_at") if trigger.start_at else None
    end = resolve_window_time(trigger.end_at, zone, "trigger.end_at") if trigger.end_at else None
    text = f"from {_when(start, zone) if start else 'the beginning'} until {_when(end, zone) if end else 'forever'}"
    if start is not None and at < start:
        return text + " — T is before the window opens"
    if end is not None and at >= end:
        return text + " — T is after the window closed (end_at is exclusive)"
    return text
