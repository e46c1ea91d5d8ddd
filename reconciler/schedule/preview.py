"""What a schedule will do, for people: its next occurrences, the DST notes of the coming year, and
whether it can fire at all (a schedule that cannot is valid, so these are warnings).

No I/O and no clock: every function takes the instant it reasons from.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from reconciler.clock import when_text
from reconciler.schedule.base import DST_MARGIN, HORIZON, Fire, Schedule, require_aware
from reconciler.schedule.blackout import WithBlackouts
from reconciler.schedule.business import OnBusinessDays
from reconciler.schedule.catchup import TICK
from reconciler.schedule.cron import matches_every_year
from reconciler.schedule.triggers import trigger_instants
from reconciler.schedule.walltime import transition_between
from reconciler.spec.task import TaskSpec
from reconciler.spec.trigger import CronTrigger, OnceTrigger


def upcoming(schedule: Schedule, after: datetime, count: int) -> list[Fire]:
    """The next `count` occurrences strictly after `after`."""
    fires: list[Fire] = []
    cursor = after
    while len(fires) < count:
        fire = schedule.next_fire(cursor)
        if fire is None:
            break
        fires.append(fire)
        cursor = fire.at
    return fires


def fires_between(schedule: Schedule, start: datetime, end: datetime, limit: int) -> tuple[list[Fire], bool]:
    """The occurrences in (start, end], at most `limit` of them, and whether more fall in that span; it
    stops at the first one past `end` (a daily task costs two steps, not `limit`)."""
    fires: list[Fire] = []
    cursor = start
    while True:
        fire = schedule.next_fire(cursor)
        if fire is None or fire.at > end:
            return fires, False
        if len(fires) == limit:
            return fires, True
        fires.append(fire)
        cursor = fire.at


def fires_in(schedule: Schedule, start: datetime, end: datetime, limit: int) -> tuple[list[Fire], bool]:
    """The occurrences in [start, end) (a backfill's range), at most `limit`, and whether more fall in it."""
    return fires_between(schedule, start - TICK, end - TICK, limit)


@lru_cache(maxsize=256)
def transitions(zone: ZoneInfo, start: datetime, days: int) -> tuple[datetime, ...]:
    """Instants (UTC) in [start, start+days) where the zone's UTC offset changes, found hour by hour."""
    found: list[datetime] = []
    moment = start.replace(minute=0, second=0, microsecond=0)
    previous = moment.astimezone(zone).utcoffset()
    for _ in range(days * 24):
        moment += timedelta(hours=1)
        offset = moment.astimezone(zone).utcoffset()
        if offset != previous:
            found.append(transition_between(moment - timedelta(hours=1), moment, zone))
            previous = offset
    return tuple(found)


def dst_warnings(schedule: Schedule, zone_name: str, now: datetime, days: int = 366) -> list[str]:
    """Notes for occurrences in the next `days` that fall in a DST gap or overlap (one per transition)."""
    zone = ZoneInfo(zone_name)
    notes: list[str] = []
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    for transition in transitions(zone, day, days):
        cursor = transition - DST_MARGIN
        while True:
            fire = schedule.next_fire(cursor)
            if fire is None or fire.at > transition + DST_MARGIN:
                break
            if fire.note:
                notes.append(fire.note)
                break
            cursor = fire.at
    return notes


TEN_YEARS = timedelta(days=3653)
A_YEAR = timedelta(days=367)  # a date that comes every year comes within this


def never_fires(spec: TaskSpec, schedule: Schedule, now: datetime) -> tuple[str, str] | None:
    """(key path, message) when the schedule has no occurrence in the ten years after `now`, else None.

    At most one `next_fire_time` call, none for most crons: cheap enough for every file of a plan.
    """
    require_aware(now)
    limit = min(now, HORIZON) + TEN_YEARS
    trigger = spec.trigger
    zone = ZoneInfo(spec.timezone)
    instants, _ = trigger_instants(trigger, zone)
    if "at" in instants and instants["at"] <= now:
        when = _shown(instants["at"], zone)
        return "trigger.at", f"{when} is in the past, so this task will not fire (again); set a later time or remove it"
    if "end_at" in instants and instants["end_at"] <= now:
        when = _shown(instants["end_at"], zone)
        return (
            "trigger.end_at",
            f"the window ended at {when}, so this task will not fire again; move end_at or remove it",
        )
    start, end = instants.get("start_at"), instants.get("end_at")
    if matches_every_year(spec) and (start is None or start <= limit - A_YEAR) and (end is None or end > now + A_YEAR):
        return None  # the common case, decided without croniter: a plan checks 10,000 files
    upcoming_at = schedule.next_fire_time(now)
    if upcoming_at is not None and upcoming_at <= limit:
        return None
    excluding = _excluding(spec, schedule, now) if upcoming_at is None else None
    if excluding is not None:
        return excluding
    if "start_at" in instants and instants["start_at"] > limit:
        key = "trigger.start_at"
    elif upcoming_at is None and "end_at" in instants:
        key = "trigger.end_at"
    elif isinstance(trigger, CronTrigger):
        key = "trigger.expr"
    elif isinstance(trigger, OnceTrigger):
        key = "trigger.at"
    else:
        key = "trigger"
    if upcoming_at is not None:
        return key, f"the next occurrence, {_shown(upcoming_at, zone)}, is more than ten years away"
    if "end_at" in instants:
        return key, f"no occurrence before end_at ({_shown(instants['end_at'], zone)}), so this task will not fire"
    if isinstance(trigger, CronTrigger):
        lacking = "a day its months lack, such as 30 February?"
        return key, f"{trigger.expr!r} matches no date ({lacking}), so this task will not fire"
    return key, "no occurrence in the next ten years, so this task will not fire"


def _excluding(spec: TaskSpec, schedule: Schedule, now: datetime) -> tuple[str, str] | None:
    """When the trigger fires but the task's calendars take every occurrence away: which key and why."""
    bare = schedule
    while isinstance(bare, WithBlackouts | OnBusinessDays):
        bare = bare.inner
    if bare is schedule or bare.next_fire_time(now) is None:
        return None
    blackouts = list(spec.policy.blackouts or [])
    names = ", ".join(filter(None, [getattr(spec.trigger, "business_days", None), *blackouts]))
    key = "policy.blackouts" if blackouts else "trigger.business_days"
    fix = "`reconciler next` lists the occurrences they exclude and why"
    return key, f"its calendars ({names}) exclude every occurrence, so this task will not fire; {fix}"


def _shown(moment: datetime, zone: ZoneInfo) -> str:
    return when_text(moment, zone)
