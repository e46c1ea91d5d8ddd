"""A task's trigger compiled into a schedule of its kind (cron, calendar, business_day, interval, once), with
the business days and blackouts of the calendars it names.

No I/O and no clock: every function takes the instant it reasons from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.schedule.base import Schedule, TriggerError
from reconciler.schedule.blackout import WithBlackouts, blackouts_of
from reconciler.schedule.business import BusinessDays, NthBusinessDay, OnBusinessDays
from reconciler.schedule.calendars import CalendarSchedule
from reconciler.schedule.cron import CronSchedule, default_overlap
from reconciler.schedule.elapsed import IntervalSchedule, OnceSchedule
from reconciler.schedule.walltime import WallClockSchedule, resolve_window_time
from reconciler.spec.task import TaskSpec
from reconciler.spec.trigger import (
    BusinessDayTrigger,
    CalendarTrigger,
    CronTrigger,
    IntervalTrigger,
    OnceTrigger,
    Trigger,
)


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


Calendars = Mapping[str, Mapping[str, Any]]  # calendar name → its stored spec, holidays resolved
UNBOUND = BusinessDays("unbound", frozenset({5, 6}), {}, frozenset())  # see compile_schedule


def schedule_key(spec: TaskSpec, calendars_text: str = "") -> str:
    """Everything compile_schedule reads (`calendars_text`: the task's calendars as stored): tasks that agree
    on it have the same schedule."""
    policy = spec.policy
    if not calendars_text and spec.calendars:
        calendars_text = json.dumps(spec.calendars, sort_keys=True)
    rules = f"{policy.blackouts}|{policy.on_blackout}|{calendars_text}" if calendars_text else ""
    return f"{spec.timezone}|{policy.dst_gap}|{policy.dst_overlap}|{spec.trigger.model_dump_json()}|{rules}"


def _calendar(calendars: Calendars, name: str, kind: str, key: str) -> Mapping[str, Any]:
    data = calendars.get(name)
    if data is None:
        raise TriggerError(key, f"calendar {name!r} is not applied; apply calendars.d/{name}.toml first")
    if data.get("kind") != kind:
        raise TriggerError(key, f"calendar {name!r} is a {data.get('kind')} calendar, not {kind}")
    return data


def compile_schedule(spec: TaskSpec, calendars: Calendars | None = None) -> Schedule:
    """Turn a validated task spec into a schedule, with the calendars it names taken from `calendars` (else
    those bound to the spec: `spec.calendars`; a missing one is a TriggerError). None of either: they are not
    bound yet (a file checked on its own): the trigger alone, Monday to Friday its business days, no blackouts.
    Raises TriggerError for bad window times (the first one)."""
    if calendars is None:
        calendars = spec.calendars
    schedule = _compile_trigger(spec, calendars)
    blackouts = spec.policy.blackouts
    if not blackouts or calendars is None:
        return schedule
    stored = [(name, _calendar(calendars, name, "blackout", "policy.blackouts")) for name in blackouts]
    return WithBlackouts(schedule, blackouts_of(stored), spec.policy.on_blackout == "defer")


def _business_days(
    trigger: CronTrigger | CalendarTrigger | BusinessDayTrigger, calendars: Calendars | None
) -> BusinessDays:
    assert trigger.business_days is not None
    if calendars is None:
        return UNBOUND
    data = _calendar(calendars, trigger.business_days, "business_days", "trigger.business_days")
    return BusinessDays.stored(trigger.business_days, data)


def _compile_trigger(spec: TaskSpec, calendars: Calendars | None) -> Schedule:
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
    if isinstance(trigger, BusinessDayTrigger):
        return NthBusinessDay(_business_days(trigger, calendars), trigger.day, trigger.times, **common)
    inner: WallClockSchedule
    if isinstance(trigger, CronTrigger):
        inner = CronSchedule(trigger.fields, **common)
    else:
        assert isinstance(trigger, CalendarTrigger) and isinstance(trigger.start_at, date)
        # The anchor date already bounds a calendar schedule from below.
        inner = CalendarSchedule(
            trigger.start_at, trigger.every, trigger.unit, trigger.times, **{**common, "start": None}
        )
    if trigger.business_days is None or calendars is None:
        return inner
    days = _business_days(trigger, calendars)
    return OnBusinessDays(inner, days, trigger.on_non_business_day or "skip", **common)
