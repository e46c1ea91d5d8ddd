"""Pure schedule arithmetic: next fire time per trigger kind, with the DST rules of SPEC §1.

No I/O and no clock: every function takes the instant it reasons from.
"""

from __future__ import annotations

import calendar as _calendar
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from functools import lru_cache
from typing import Literal, Protocol
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from reconciler.clock import when_text
from reconciler.spec.task import TaskSpec
from reconciler.spec.trigger import CRON_MACROS, CalendarTrigger, CronTrigger, IntervalTrigger, OnceTrigger, Trigger
from reconciler.spec.values import MAX_YEAR, MIN_YEAR, WhenValue

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Occurrences exist only in [FLOOR, HORIZON): the years a task file may name (models.MIN_YEAR to
# MAX_YEAR), widened by two days for zone offsets, so no computation nears datetime's limits.
FLOOR = datetime(MIN_YEAR, 1, 1, tzinfo=UTC) - timedelta(days=2)
HORIZON = datetime(MAX_YEAR + 1, 1, 1, tzinfo=UTC) + timedelta(days=2)
HORIZON_WALL = HORIZON.replace(tzinfo=None) + timedelta(days=2)  # a wall time past it fires past HORIZON
FLOOR_WALL = FLOOR.replace(tzinfo=None) - timedelta(days=2)  # a wall time before it fires before FLOOR
# Wider than any DST shift in the tz database (2 h), so a walk started this far back
# sees the second pass of every repeated wall time.
DST_MARGIN = timedelta(hours=3)
# A schedule with no occurrence in this many local candidates is treated as exhausted
# (e.g. "0 0 30 2 *" never matches).
MAX_CANDIDATES = 200_000

Overlap = Literal["first", "last", "both"]
Gap = Literal["shift", "skip"]


@dataclass(frozen=True, slots=True)
class Fire:
    """One occurrence: the instant (UTC) and, when a DST rule moved or chose it, why."""

    at: datetime
    note: str | None = None


class Schedule(Protocol):
    """A compiled trigger: the occurrence after an instant, and the one before it, each computed directly."""

    def next_fire(self, after: datetime) -> Fire | None: ...

    def next_fire_time(self, after: datetime) -> datetime | None: ...

    def previous_fire_time(self, before: datetime) -> datetime | None: ...


class TriggerError(ValueError):
    """A trigger that cannot be compiled; `key` is the dotted path in the task file."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def _require_aware(after: datetime) -> None:
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("next_fire_time needs an aware datetime")


def _start_from(after: datetime) -> datetime | None:
    """`after` in UTC and at least FLOOR; None when it is past HORIZON (nothing can follow)."""
    _require_aware(after)
    if after >= HORIZON:  # compared before converting: astimezone could overflow out there
        return None
    return max(after, FLOOR).astimezone(UTC)


def _within_horizon(fire: Fire | None) -> Fire | None:
    return fire if fire is not None and fire.at < HORIZON else None


def _end_from(before: datetime, end: datetime | None) -> datetime | None:
    """`before` in UTC, at most HORIZON and the window's (exclusive) end; None when it is at or before
    FLOOR (nothing can precede it)."""
    _require_aware(before)
    if before <= FLOOR:  # compared before converting: astimezone could overflow out there
        return None
    bounded = min(before, HORIZON).astimezone(UTC)
    return bounded if end is None else min(bounded, end)


# ---------------------------------------------------------------- local ↔ instant


@dataclass(frozen=True, slots=True)
class Resolved:
    """How a local wall time maps to instants: one, none (gap) or two (overlap)."""

    kind: Literal["normal", "gap", "overlap"]
    instants: tuple[datetime, ...]  # normal: 1; overlap: (first pass, second pass); gap: (instant after gap,)


def resolve_local(local: datetime, zone: ZoneInfo) -> Resolved:
    """Classify the naive wall time `local` in `zone`."""
    first = local.replace(tzinfo=zone, fold=0)
    second = local.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return Resolved("normal", (first.astimezone(UTC),))
    first_utc = first.astimezone(UTC)
    second_utc = second.astimezone(UTC)
    if first_utc.astimezone(zone).replace(tzinfo=None) == local:
        return Resolved("overlap", (min(first_utc, second_utc), max(first_utc, second_utc)))
    return Resolved("gap", (_transition_between(min(first_utc, second_utc), max(first_utc, second_utc), zone),))


@lru_cache(maxsize=4096)
def _transition_between(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """The first instant in (low, high] whose offset differs from low's (bisection to the second)."""
    before = low.astimezone(zone).utcoffset()
    lo, hi = low, high
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        mid = mid.replace(microsecond=0)
        if mid <= lo:
            mid = lo + timedelta(seconds=1)
        if mid.astimezone(zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi


def resolve_window_time(value: WhenValue, zone: ZoneInfo, key: str) -> datetime:
    """A task-file date-time (naive = local to the task's zone) as an aware instant.

    A nonexistent or ambiguous local time without an explicit offset is an error
    naming both candidate instants.
    """
    if not isinstance(value, datetime):
        value = datetime.combine(value, time())
    if value.tzinfo is not None:
        return value.astimezone(UTC)
    resolved = resolve_local(value, zone)
    if resolved.kind == "normal":
        return resolved.instants[0]
    options = []
    for fold in (0, 1):
        offset = value.replace(tzinfo=zone, fold=fold).utcoffset()
        assert offset is not None
        aware = value.replace(tzinfo=timezone(offset))
        options.append(f"{aware.isoformat()} ({aware.astimezone(UTC).strftime('%H:%M')} UTC)")
    shown = " or ".join(sorted(set(options)))
    what = "happens twice (DST overlap)" if resolved.kind == "overlap" else "does not exist (DST gap)"
    return_hint = f"write one of them with its offset, e.g. {options[0].split(' ')[0]}"
    raise TriggerError(key, f"{value.isoformat()} in {zone.key} {what}: it could mean {shown}; {return_hint}")


# ---------------------------------------------------------------- wall-clock walker


class WallClockSchedule:
    """Shared machinery of the wall-clock kinds (cron, calendar): DST gap/overlap rules."""

    def __init__(
        self,
        zone: ZoneInfo,
        gap: Gap,
        overlap: Overlap,
        start: datetime | None,
        end: datetime | None,
    ) -> None:
        self.zone = zone
        self.gap = gap
        self.overlap = overlap
        self.start = start
        self.end = end

    def local_candidates(self, after_local: datetime) -> Iterator[datetime]:
        """Naive local wall times matching the schedule, ascending, strictly after `after_local`."""
        raise NotImplementedError

    def local_candidates_before(self, before_local: datetime) -> Iterator[datetime]:
        """Naive local wall times matching the schedule, descending, strictly before `before_local`."""
        raise NotImplementedError

    def _fires(self, local: datetime) -> list[Fire]:
        resolved = resolve_local(local, self.zone)
        if resolved.kind == "normal":
            return [Fire(resolved.instants[0])]
        wall = local.strftime("%Y-%m-%d %H:%M")
        if resolved.kind == "gap":
            if self.gap == "skip":
                return []
            shifted = resolved.instants[0].astimezone(self.zone)
            return [
                Fire(resolved.instants[0], f"{wall} does not exist (DST gap); fires at {shifted.strftime('%H:%M %Z')}")
            ]
        first, second = resolved.instants
        if self.overlap == "first":
            return [Fire(first, f"{wall} happens twice (DST overlap); fires on the first pass only")]
        if self.overlap == "last":
            return [Fire(second, f"{wall} happens twice (DST overlap); fires on the second pass only")]
        return [
            Fire(first, f"{wall} happens twice (DST overlap); fires on both passes, this is the first"),
            Fire(second, f"{wall} happens twice (DST overlap); fires on both passes, this is the second"),
        ]

    def _offsets(self, moment: datetime) -> tuple[timedelta, timedelta]:
        """The smallest and largest UTC offset of the zone within DST_MARGIN of `moment`."""
        before = (moment - DST_MARGIN).astimezone(self.zone).utcoffset()
        after = (moment + DST_MARGIN).astimezone(self.zone).utcoffset()
        assert before is not None and after is not None
        return (before, after) if before <= after else (after, before)

    def next_fire(self, after: datetime) -> Fire | None:
        """The first occurrence strictly after `after`, within the window."""
        bounded = _start_from(after)
        if bounded is None:
            return None
        after = bounded
        if self.start is not None and after < self.start:
            after = self.start - timedelta(microseconds=1)
        # A wall time L fires at L - offset (or, in a gap, at the transition, which lies between
        # its two readings), so only L > after + the smallest nearby offset can fire after `after`.
        low, _ = self._offsets(after)
        origin = after.replace(tzinfo=None) + low
        best: Fire | None = None
        best_wall_bound: datetime | None = None
        for count, local in enumerate(self.local_candidates(origin)):
            if best_wall_bound is not None and local > best_wall_bound:
                break  # this and every later wall time fires after `best`
            if local > HORIZON_WALL:
                break  # fires past HORIZON; mapping it to an instant could overflow
            for fire in self._fires(local):
                if fire.at > after and (best is None or fire.at < best.at):
                    best = fire
            if best is not None and best_wall_bound is None:
                low, high = self._offsets(best.at)
                if low == high:
                    break  # no DST shift nearby: wall order is instant order
                # Later wall times can map earlier than this one by at most the DST shift.
                best_wall_bound = best.at.replace(tzinfo=None) + high
            if self.end is not None and local.replace(tzinfo=self.zone).astimezone(UTC) > self.end + DST_MARGIN:
                break
            if count >= MAX_CANDIDATES:
                break
        if best is None or (self.end is not None and best.at >= self.end):
            return None
        return _within_horizon(best)

    def next_fire_time(self, after: datetime) -> datetime | None:
        """The first fire instant strictly after `after` (UTC), or None when exhausted."""
        fire = self.next_fire(after)
        return fire.at if fire else None

    def previous_fire(self, before: datetime) -> Fire | None:
        """The last occurrence strictly before `before`, within the window: next_fire's mirror, stepping
        back over matching wall times (a catch-up after any downtime costs a few steps, not one per
        missed occurrence)."""
        bounded = _end_from(before, self.end)
        if bounded is None or (self.start is not None and bounded <= self.start):
            return None
        before = bounded
        # A wall time L fires at L - offset (or, in a gap, at the transition, which lies between its
        # two readings), so only L < before + the largest nearby offset can fire before `before`.
        _, high = self._offsets(before)
        origin = before.replace(tzinfo=None) + high
        best: Fire | None = None
        best_wall_bound: datetime | None = None
        for count, local in enumerate(self.local_candidates_before(origin)):
            if best_wall_bound is not None and local < best_wall_bound:
                break  # this and every earlier wall time fires before `best`
            if local < FLOOR_WALL:
                break
            for fire in self._fires(local):
                if fire.at < before and (best is None or fire.at > best.at):
                    best = fire
            if best is not None and best_wall_bound is None:
                low, high = self._offsets(best.at)
                if low == high:
                    break  # no DST shift nearby: wall order is instant order
                # Earlier wall times can map later than this one by at most the DST shift.
                best_wall_bound = best.at.replace(tzinfo=None) + low
            if self.start is not None and local.replace(tzinfo=self.zone).astimezone(UTC) < self.start - DST_MARGIN:
                break
            if count >= MAX_CANDIDATES:
                break
        if best is None or (self.start is not None and best.at < self.start) or best.at < FLOOR:
            return None
        return best

    def previous_fire_time(self, before: datetime) -> datetime | None:
        """The last fire instant strictly before `before` (UTC), or None."""
        fire = self.previous_fire(before)
        return fire.at if fire else None


class CronSchedule(WallClockSchedule):
    """A 5-field cron expression in a zone; croniter steps naive wall time, we apply the DST rules."""

    def __init__(self, fields: list[str], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.expr = " ".join(fields)
        self._walker: croniter | None = None
        self._back: croniter | None = None

    def local_candidates(self, after_local: datetime) -> Iterator[datetime]:
        # croniter on naive datetimes walks pure wall-clock time (no DST handling to distrust).
        # One walker per schedule, made on first use and rewound per call: parsing costs as much as a step.
        if self._walker is None:
            self._walker = croniter(self.expr, datetime(2000, 1, 1), day_or=True)
        walker = self._walker
        walker.set_current(after_local.replace(microsecond=0), force=True)
        while True:
            try:
                yield walker.get_next(datetime)
            except CroniterBadDateError:  # no date ever matches (e.g. "0 0 30 2 *")
                return

    def local_candidates_before(self, before_local: datetime) -> Iterator[datetime]:
        # A walker of its own (next_fire's may be mid-walk), made once and rewound like next_fire's.
        if self._back is None:
            self._back = croniter(self.expr, datetime(2000, 1, 1), day_or=True)
        walker = self._back
        walker.set_current(before_local, force=True)
        while True:
            try:
                yield walker.get_prev(datetime)
            except (CroniterBadDateError, OverflowError, ValueError):  # none left (or before year 1)
                return


def _add_months(anchor: date, months: int) -> date:
    total = anchor.month - 1 + months
    year, month = anchor.year + total // 12, total % 12 + 1
    return date(year, month, min(anchor.day, _calendar.monthrange(year, month)[1]))


class CalendarSchedule(WallClockSchedule):
    """Every N days/weeks/months/years at wall-clock times, anchored at a date."""

    def __init__(self, anchor: date, every: int, unit: str, times: list[time], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.anchor = anchor
        self.every = every
        self.unit = unit
        self.times = times

    def _date(self, k: int) -> date:
        if self.unit == "days":
            return self.anchor + timedelta(days=k * self.every)
        if self.unit == "weeks":
            return self.anchor + timedelta(weeks=k * self.every)
        months = k * self.every * (12 if self.unit == "years" else 1)
        return _add_months(self.anchor, months)

    def _index_before(self, day: date) -> int:
        if self.unit in ("days", "weeks"):
            step = self.every * (7 if self.unit == "weeks" else 1)
            return (day - self.anchor).days // step - 1
        months = (day.year - self.anchor.year) * 12 + day.month - self.anchor.month
        return months // (self.every * (12 if self.unit == "years" else 1)) - 1

    def local_candidates(self, after_local: datetime) -> Iterator[datetime]:
        k = max(0, self._index_before(after_local.date()))
        while True:
            try:
                day = self._date(k)
            except (OverflowError, ValueError):  # past year 9999: long after HORIZON
                return
            for moment in self.times:
                local = datetime.combine(day, moment)
                if local > after_local:
                    yield local
            k += 1

    def local_candidates_before(self, before_local: datetime) -> Iterator[datetime]:
        k = max(0, self._index_before(before_local.date()) + 2)
        while k >= 0:
            try:
                day = self._date(k)
            except (OverflowError, ValueError):  # past year 9999
                k -= 1
                continue
            for moment in reversed(self.times):
                local = datetime.combine(day, moment)
                if local < before_local:
                    yield local
            k -= 1


class IntervalSchedule:
    """Elapsed time: anchor + k·every; DST does not shift it."""

    def __init__(self, period: timedelta, anchor: datetime | None, end: datetime | None) -> None:
        self.period = period
        self.anchor = anchor
        self.end = end

    def next_fire(self, after: datetime) -> Fire | None:
        bounded = _start_from(after)
        if bounded is None:
            return None
        anchor = self.anchor or EPOCH
        at = anchor if bounded < anchor else anchor + ((bounded - anchor) // self.period + 1) * self.period
        if self.end is not None and at >= self.end:
            return None
        return _within_horizon(Fire(at.astimezone(UTC)))

    def next_fire_time(self, after: datetime) -> datetime | None:
        fire = self.next_fire(after)
        return fire.at if fire else None

    def previous_fire_time(self, before: datetime) -> datetime | None:
        """anchor + k·every for the largest k with that instant strictly before `before` (arithmetic)."""
        bounded = _end_from(before, self.end)
        anchor = self.anchor or EPOCH
        if bounded is None or bounded <= anchor:
            return None
        steps = -((anchor - bounded) // self.period)  # ceil((before - anchor) / every)
        return (anchor + (steps - 1) * self.period).astimezone(UTC)


class OnceSchedule:
    """A single instant."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def next_fire(self, after: datetime) -> Fire | None:
        _require_aware(after)
        return _within_horizon(Fire(self.at)) if self.at > after else None

    def next_fire_time(self, after: datetime) -> datetime | None:
        fire = self.next_fire(after)
        return fire.at if fire else None

    def previous_fire_time(self, before: datetime) -> datetime | None:
        _require_aware(before)
        return self.at if self.at < before and self.at < HORIZON else None


def default_overlap(spec: TaskSpec) -> Overlap:
    """SPEC default: first pass, except a cron that runs hourly or more often (both passes).

    That is an hour field of `*` or `*/1`, or a minute field beginning with `*` (`*`, `*/N`):
    the two passes of a repeated hour are distinct elapsed times, and a job that runs every
    few minutes must not fall silent for an hour. Debian cron also runs an hour step such
    as `*/3` twice; here that stays a fixed-time job (README, DST).
    """
    if spec.policy.dst_overlap is not None:
        return spec.policy.dst_overlap
    trigger = spec.trigger
    if isinstance(trigger, CronTrigger) and (trigger.fields[1] in ("*", "*/1") or trigger.fields[0].startswith("*")):
        return "both"
    return "first"


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
            found.append(_transition_between(moment - timedelta(hours=1), moment, zone))
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


# ---------------------------------------------------------------- schedules that cannot fire

TEN_YEARS = timedelta(days=3653)
A_YEAR = timedelta(days=367)  # a date that comes every year comes within this


def _matches_every_year(spec: TaskSpec) -> bool:
    """Whether a cron surely fires within a year, decided from its text alone (croniter costs ~0.2 ms a task).

    True when the day fields are plain (no `L`, `W`, `#` or `?`, which some months or years
    lack) and name a day 1-28 or leave the day of month `*`: every month it names has such a
    day. DST can only move such a time (`dst_gap = "shift"`), never drop every one of them.
    """
    trigger = spec.trigger
    if not isinstance(trigger, CronTrigger) or spec.policy.dst_gap != "shift":
        return False
    _, _, day, _, weekday = CRON_MACROS.get(trigger.expr.lower(), trigger.expr).split()
    if any(mark in (day + weekday).upper() for mark in "LW#?"):
        return False
    return day == "*" or min(_first_day(item) for item in day.split(",")) <= 28


def _first_day(item: str) -> int:
    """The lowest day of month of one list item (`5`, `5-9`, `*/2`, `10-20/3`; a reversed range wraps past 1)."""
    base = item.split("/")[0]
    if base == "*":
        return 1
    low, _, high = base.partition("-")
    return int(low) if not high or int(low) <= int(high) else 1


def never_fires(spec: TaskSpec, schedule: Schedule, now: datetime) -> tuple[str, str] | None:
    """(key path, message) when the schedule has no occurrence in the ten years after `now`, else None.

    At most one `next_fire_time` call, none for most crons: cheap enough for every file of a plan.
    """
    _require_aware(now)
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
    if _matches_every_year(spec) and (start is None or start <= limit - A_YEAR) and (end is None or end > now + A_YEAR):
        return None  # the common case, decided without croniter: a plan checks 10,000 files
    upcoming_at = schedule.next_fire_time(now)
    if upcoming_at is not None and upcoming_at <= limit:
        return None
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


def _shown(moment: datetime, zone: ZoneInfo) -> str:
    return when_text(moment, zone)
