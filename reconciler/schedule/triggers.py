"""A task's trigger compiled into a schedule of its kind (cron, calendar, interval, once).

No I/O and no clock: every function takes the instant it reasons from.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from reconciler.schedule.base import Schedule, TriggerError
from reconciler.schedule.calendars import CalendarSchedule
from reconciler.schedule.cron import CronSchedule, default_overlap
from reconciler.schedule.elapsed import IntervalSchedule, OnceSchedule
from reconciler.schedule.walltime import resolve_window_time
from reconciler.spec.task import TaskSpec
from reconciler.spec.trigger import CalendarTrigger, CronTrigger, IntervalTrigger, OnceTrigger, Trigger


def trigger_instants(trigger: Trigger, zone: ZoneInfo) -> tuple[dict[str, datetime], list[TriggerError]]:
    """The trigger's `at`/`start_at`/`end_at` as instants, and every problem with them (not just the first)."""
    names = ("at",) if isinstance(trigger, OnceTrigger) else ("start_at", "end_at")
    instants: dict[str, datetime] = {}
    problems: list[TriggerError] = []
    for name in names:
        value = getattr(trigger, name)
        if value is None:
            continue
        try:
            instants[name] = resolve_window_time(value, zone, f"trigger.{name}")
        except TriggerError as exc:
            problems.append(exc)
    start, end = instants.get("start_at"), instants.get("end_at")
    if start is not None and end is not None and end <= start:
        assert not isinstance(trigger, OnceTrigger)
        problems.append(
            TriggerError("trigger.end_at", f"end_at ({trigger.end_at}) must be after start_at ({trigger.start_at})")
        )
    return instants, problems


def schedule_key(spec: TaskSpec) -> str:
    """Everything compile_schedule reads: tasks that agree on it have the same schedule."""
    policy = spec.policy
    return f"{spec.timezone}|{policy.dst_gap}|{policy.dst_overlap}|{spec.trigger.model_dump_json()}"


def compile_schedule(spec: TaskSpec) -> Schedule:
    """Turn a validated task spec into a schedule; raises TriggerError for bad window times (the first one)."""
    zone = ZoneInfo(spec.timezone)
    trigger = spec.trigger
    instants, problems = trigger_instants(trigger, zone)
    if problems:
        raise problems[0]
    if isinstance(trigger, OnceTrigger):
        return OnceSchedule(instants["at"])
    start, end = instants.get("start_at"), instants.get("end_at")
    if isinstance(trigger, IntervalTrigger):
        return IntervalSchedule(timedelta(seconds=trigger.period_seconds), start, end)
    common: dict[str, object] = {
        "zone": zone,
        "gap": spec.policy.dst_gap,
        "overlap": default_overlap(spec),
        "start": start,
        "end": end,
    }
    if isinstance(trigger, CronTrigger):
        return CronSchedule(trigger.fields, **common)
    assert isinstance(trigger, CalendarTrigger) and isinstance(trigger.start_at, date)
    # The anchor date already bounds a calendar schedule from below.
    common["start"] = None
    return CalendarSchedule(trigger.start_at, trigger.every, trigger.unit, trigger.times, **common)
