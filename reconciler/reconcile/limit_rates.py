"""The plan's warning of a limit its tasks will crowd: for each limit with a rate, its tasks' occurrences over the
next day are counted per minute (UTC); when the busiest minute holds more than the limit serves in a minute (a
full bucket, then the rate), the plan says so. The occurrences are the engines' own: each task's schedule as
compiled from its file (or, for a file unchanged since it was applied, from its row), calendars bound."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from reconciler.files.kinds import Named
from reconciler.files.limits import LIMITS, Limit, Limits, limits_named
from reconciler.reconcile.plan import Change, Plan
from reconciler.schedule.base import Schedule, TriggerError
from reconciler.schedule.busiest import busiest_minute
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.task import TaskSpec

SPAN = timedelta(days=1)
# The cost is bounded, so a plan of any size stays quick (an occurrence costs 2 to 30 µs to compute):
# - tasks that share a schedule (trigger, zone, DST rules, calendars) are counted once, weighted by how many they
#   are: 10,000 tasks at 02:00 cost what one does;
# - one schedule is counted for at most PER_SCHEDULE occurrences: more than a day of a task every second
#   (86,400, the densest trigger), so the cap only guards against a schedule that is not one of ours;
# - at most BUDGET occurrences are counted per plan (a few seconds at worst), the schedules shared by most tasks
#   first, and at most TASKS tasks are looked at (the largest sources the reconciler is measured with).
# Whatever is left out is not counted: the warning may then miss a crowd, but never reports one that is not there.
PER_SCHEDULE = 100_000
BUDGET = 200_000
TASKS = 10_000
# What compile_schedule reads of a stored spec besides the trigger and the zone.
SCHEDULE_POLICY = ("dst_gap", "dst_overlap", "blackouts", "on_blackout")


def limit_warnings(plan: Plan, declared: Sequence[Named[Any]]) -> list[str]:
    """The rate warnings of the limits among the declared directories a plan was made of (none without them)."""
    return [line for loaded in declared if loaded.kind.name == LIMITS.name for line in rate_warnings(plan, loaded)]


def rate_warnings(plan: Plan, limits: Limits) -> list[str]:
    """A warning per limit with a rate whose tasks' busiest minute of the next day holds more occurrences than
    it serves in a minute (none for a plan without a `planned_at`)."""
    start = plan.planned_at
    rated = {name: limit for name, limit in limits.by_name.items() if limit.spec.rate_per_second is not None}
    if start is None or not rated:
        return []
    budget = BUDGET
    warnings: list[str] = []
    for name, (tasks, by_schedule) in sorted(_grouped(plan, rated).items()):
        ranked = sorted(by_schedule.values(), key=lambda group: -group[1])  # the most shared schedules first
        schedules = ((schedule, weight) for change, weight in ranked if (schedule := _schedule(change)) is not None)
        found = busiest_minute(schedules, start, start + SPAN, PER_SCHEDULE, budget)
        budget -= found.counted
        warning = _crowded(name, rated[name], tasks, found.minute, found.count)
        warnings += [warning] if warning else []
    return warnings


def _grouped(plan: Plan, rated: dict[str, Limit]) -> dict[str, tuple[int, dict[str, tuple[Change, int]]]]:
    """{limit: (its enabled tasks, {schedule key: (a change of a task with that schedule, how many share it)})}."""
    found: dict[str, tuple[int, dict[str, tuple[Change, int]]]] = {}
    for change, spec in _looked_at(plan):
        wanted = [name for name in limits_named(spec) if name in rated]
        if not wanted:
            continue
        key = _schedule_key(spec, change)
        for name in wanted:
            tasks, by_schedule = found.get(name, (0, {}))
            first, weight = by_schedule.get(key, (change, 0))
            by_schedule[key] = (first, weight + 1)
            found[name] = (tasks + 1, by_schedule)
    return found


def _looked_at(plan: Plan) -> Iterator[tuple[Change, dict[str, Any]]]:
    """The plan's enabled tasks as they are once it is applied (at most TASKS of them), with their specs: a
    parsed file's, or the row's of one unchanged since it was applied (the same spec, not parsed again)."""
    seen = 0
    for change in plan.changes:
        task = change.task
        if change.op == "delete" or task is None or not task.enabled:
            continue
        if seen == TASKS:
            return
        seen += 1
        if task.stored is None:
            yield change, task.normalized
        elif change.row is not None:
            yield change, change.row.spec


def _schedule_key(spec: dict[str, Any], change: Change) -> str:
    """What a task's schedule is compiled from: tasks that agree on it fire at the same instants."""
    found = spec.get("policy")
    policy: dict[str, Any] = found if isinstance(found, dict) else {}
    assert change.task is not None
    calendars = change.task.calendars if change.task.stored is None else change.row.calendars if change.row else None
    parts = [spec.get("timezone"), spec.get("trigger"), [policy.get(key) for key in SCHEDULE_POLICY], calendars]
    return json.dumps(parts, sort_keys=True, default=str)


def _schedule(change: Change) -> Schedule | None:
    """The task's schedule as the engines compute it; None when its stored spec no longer compiles (edited by
    hand: the plan shows it as drift, and the apply restores it)."""
    task = change.task
    assert task is not None
    if task.stored is None:
        return task.schedule
    row = change.row
    assert row is not None
    try:
        return compile_schedule(TaskSpec.model_validate_json(row.spec_text), row.calendars)
    except (ValueError, TriggerError):  # pydantic's ValidationError is a ValueError
        return None


def _crowded(name: str, limit: Limit, tasks: int, minute: datetime | None, count: int) -> str | None:
    """The warning of a limit whose busiest minute holds `count` occurrences, or None when it serves them all."""
    rate, bucket = limit.spec.rate_per_second, limit.spec.bucket
    assert rate is not None and bucket is not None
    served = bucket + rate * 60  # a full bucket, then the rate, for a minute
    if minute is None or count <= served:
        return None
    return (
        f"limit {name}: its {tasks:,} task(s) are due {count:,} times in the minute from {minute:%H:%M} UTC "
        f"(worst of the next day); at {rate:g}/s (burst {bucket:,}) it serves {math.floor(served):,} a minute: "
        "some will wait, and those past their misfire grace are missed; raise rate_per_second or spread the tasks"
    )
