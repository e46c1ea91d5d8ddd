"""Business days (SPEC §6), pure: a stored business-days calendar, which local dates it excludes and why,
a wall-clock schedule filtered by it (skip, or moved to the next or previous business day at the same local
time), and the Nth business day of each month.

Every rule reads the local date in the *task's* zone; a moved occurrence gets the DST rules of its new day
(it is a wall time of that day, resolved like any other). No I/O, no clock, no holiday data: the calendar's
holidays were resolved when it was applied.
"""

from __future__ import annotations

import calendar as _calendar
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import cached_property
from typing import Any, Literal

from reconciler.schedule.base import QUIET
from reconciler.schedule.walltime import WallClockSchedule
from reconciler.spec.calendar import WEEKDAYS
from reconciler.spec.values import MAX_YEAR, MIN_YEAR

Move = Literal["skip", "next", "previous"]
FIRST_DAY, LAST_DAY = date(MIN_YEAR, 1, 1), date(MAX_YEAR, 12, 31)
TICK = timedelta(microseconds=1)
DAY = timedelta(days=1)
# The longest run of days before (after) a business day whose occurrences move to it: a year, so a yearly
# cron in a calendar with months off still lands once.
MOVE_RUN = timedelta(days=366)


@dataclass(frozen=True)
class BusinessDays:
    """A business-days calendar as stored: a date is a business day iff it is an extra workday, or neither a
    weekend day, nor a holiday (resolved or extra)."""

    name: str
    weekend: frozenset[int]  # date.weekday() numbers
    holidays: Mapping[date, str]  # resolved holidays and the extra ones, with their names
    workdays: frozenset[date]

    @classmethod
    def stored(cls, name: str, data: Mapping[str, Any]) -> BusinessDays:
        """From a calendar's normalized spec with its resolved holidays (what apply stores)."""
        weekend = frozenset(WEEKDAYS.index(day) for day in data.get("weekend", ["sat", "sun"]))
        resolved = data.get("resolved", {}).get("holidays", {})
        holidays = {date.fromisoformat(day): str(label) for day, label in resolved.items()}
        for day in data.get("extra_holidays", []):
            holidays.setdefault(date.fromisoformat(day), "extra holiday")
        workdays = frozenset(date.fromisoformat(day) for day in data.get("extra_workdays", []))
        return cls(name, weekend, holidays, workdays)

    def reason(self, day: date) -> str | None:
        """Why `day` is not a business day (`holiday: Labor Day (us)`, `weekend (us)`), or None if it is one."""
        if day in self.workdays:
            return None
        label = self.holidays.get(day)
        if label is not None:
            return f"holiday: {label} ({self.name})"
        if day.weekday() in self.weekend:
            return f"weekend ({self.name})"
        return None

    def is_business(self, day: date) -> bool:
        return self.reason(day) is None

    @cached_property
    def last_listed(self) -> date:
        """The last date the calendar names: after it, business days repeat week by week."""
        return max((*self.holidays, *self.workdays), default=FIRST_DAY)

    @cached_property
    def first_listed(self) -> date:
        return min((*self.holidays, *self.workdays), default=LAST_DAY)

    @cached_property
    def _workdays(self) -> list[date]:
        return sorted(self.workdays)

    def step(self, day: date, direction: int) -> date | None:
        """The nearest business day strictly after (`direction` 1) or before (-1) `day`, or None."""
        if len(self.weekend) == 7:  # only extra workdays are business days: look them up
            index = bisect_right(self._workdays, day) if direction > 0 else bisect_left(self._workdays, day) - 1
            return self._workdays[index] if 0 <= index < len(self._workdays) else None
        try:  # a weekday is a business day unless listed: the walk passes at most the listed dates and a week
            while True:
                day += timedelta(days=direction)
                if self.is_business(day):
                    return day
        except OverflowError:
            return None

    def in_month(self, year: int, month: int, nth: int) -> date | None:
        """The `nth` business day of the month (from its end when negative), or None when it has fewer."""
        days = [date(year, month, d) for d in range(1, _calendar.monthrange(year, month)[1] + 1)]
        business = [day for day in days if self.is_business(day)]
        index = nth - 1 if nth > 0 else nth
        return business[index] if -len(business) <= index < len(business) else None


def holidays_years(data: Mapping[str, Any]) -> tuple[int, int] | None:
    """The first and last year whose holidays apply resolved for a stored business-days calendar, or None when
    it takes no holidays from the `holidays` package."""
    years = data.get("resolved", {}).get("years")
    return (int(years[0]), int(years[1])) if data.get("holidays") and years else None


def holidays_note(name: str, data: Mapping[str, Any], dates: tuple[date, date] | None = None) -> str | None:
    """Where the holiday data of a stored business-days calendar ends, when the local dates `dates` (first, last)
    reach past it, or always when `dates` is None; None when they do not (or it names no holidays)."""
    years = holidays_years(data)
    if years is None or (dates is not None and years[0] <= dates[0].year and dates[1].year <= years[1]):
        return None
    first, last = years
    return (
        f"calendar {name}: its holidays are known for {first}–{last} only (apply resolves the years Y−1 … Y+10 "
        f"around its own); on other dates only its weekend and extra dates apply, so a holiday after {last} is a "
        "business day until an apply in a later year moves the years on"
    )


def _shift(day: date, by: timedelta) -> date:
    """`day` moved by `by`, or the first or last date there is."""
    try:
        return day + by
    except OverflowError:
        return date.min if by < timedelta() else date.max


def quiet(day: date, since: date, days: BusinessDays, descending: bool) -> bool:
    """A walk that reached `day` without an occurrence since `since` can stop: it is QUIET past both that
    and every date the calendar lists."""
    if descending:
        return min(since, days.first_listed) - day > QUIET
    return day - max(since, days.last_listed) > QUIET


class OnBusinessDays(WallClockSchedule):
    """A wall-clock schedule (cron, calendar) whose occurrences on days that are not business days are
    skipped, or moved to the next or previous business day at the same local time. Two occurrences that
    land on the same wall time are one.

    It walks target days (business days with an occurrence), each day's wall times computed once and kept
    (`GROUPS` days): the engine asks for one occurrence after another, a minute's cron 1,440 times a day."""

    GROUPS = 64

    def __init__(self, inner: WallClockSchedule, days: BusinessDays, move: Move, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inner = inner
        self.days = days
        self.move = move
        self._groups: dict[date, tuple[datetime, ...]] = {}
        self._every = inner.day_times()

    def target(self, day: date) -> date | None:
        """The business day whose occurrences those of `day` are (None: they are skipped, or the business day
        they would move to is MOVE_RUN or further away)."""
        if self.days.is_business(day):
            return day
        if self.move == "skip":
            return None
        found = self.days.step(day, 1 if self.move == "next" else -1)
        return found if found is not None and abs(found - day) < MOVE_RUN else None

    def _sources(self, target: date) -> tuple[date, date]:
        """The first and last day whose wall times land on the business day `target`."""
        if self.move == "next":
            before = self.days.step(target, -1)
            return max(before or date.min, _shift(target, -MOVE_RUN)) + DAY, target
        if self.move == "previous":
            after = self.days.step(target, 1)
            return target, min(after or date.max, _shift(target, MOVE_RUN)) - DAY
        return target, target

    def _group(self, target: date) -> tuple[datetime, ...]:
        """The wall times of the business day `target`: its own and those moved to it, sorted, once each."""
        found = self._groups.get(target)
        if found is None:
            first, last = self._sources(target)
            times: set[time] = set()
            for local in self.inner.local_candidates(datetime.combine(first, time()) - TICK):
                if local.date() > last:
                    break
                times.add(local.time())
                if self._every is not None and len(times) >= len(self._every):  # later days add none
                    break
            if len(self._groups) >= self.GROUPS:
                self._groups.clear()
            found = self._groups[target] = tuple(datetime.combine(target, moment) for moment in sorted(times))
        return found

    def _following(self, target: date) -> date | None:
        """The next business day after `target` that may have wall times: the target of the inner schedule's
        next occurrence, or else the next business day it could reach."""
        after = self._sources(target)[1]
        while (probe := next(self.inner.local_candidates(datetime.combine(after, time.max)), None)) is not None:
            day = probe.date()
            found = self.target(day)
            if found is not None and found > target:
                return found
            # `day`'s occurrences are skipped or land on `target` or earlier: look from the next business day's
            # first source day on
            later = self.days.step(day, 1)
            if later is None or quiet(later, target, self.days, False):
                return None
            after = max(day, _shift(later, -MOVE_RUN) if self.move == "next" else later - DAY)
        return None

    def _preceding(self, target: date) -> date | None:
        """The last business day before `target` that may have wall times."""
        before = self._sources(target)[0]
        while (probe := next(self.inner.local_candidates_before(datetime.combine(before, time())), None)) is not None:
            day = probe.date()
            found = self.target(day)
            if found is not None and found < target:
                return found
            earlier = self.days.step(day, -1)
            if earlier is None or quiet(earlier, target, self.days, True):
                return None
            before = min(day, _shift(earlier, MOVE_RUN) if self.move == "previous" else earlier + DAY)
        return None

    def local_candidates(self, after_local: datetime) -> Iterator[datetime]:
        day = after_local.date()
        target = day if self.days.is_business(day) else self.days.step(day, 1)
        while target is not None and not quiet(target, day, self.days, False):
            for local in self._group(target):
                if local > after_local:
                    day = target
                    yield local
            target = self._following(target)

    def local_candidates_before(self, before_local: datetime) -> Iterator[datetime]:
        day = before_local.date()
        target = day if self.days.is_business(day) else self.days.step(day, -1)
        while target is not None and not quiet(target, day, self.days, True):
            for local in reversed(self._group(target)):
                if local < before_local:
                    day = target
                    yield local
            target = self._preceding(target)


def months_without(days: BusinessDays, nth: int, start: date, months: int = 24) -> list[str]:
    """The months (`2027-02`) among the `months` from `start`'s that have no `nth` business day."""
    found = []
    year, month = start.year, start.month
    for _ in range(months):
        if days.in_month(year, month, nth) is None:
            found.append(f"{year:04d}-{month:02d}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return found


class NthBusinessDay(WallClockSchedule):
    """The `nth` business day of each month (from its end when negative), at wall-clock times."""

    def __init__(self, days: BusinessDays, nth: int, times: list[time], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.days = days
        self.nth = nth
        self.times = times

    def _months(self, year: int, month: int, direction: int) -> Iterator[date]:
        since = date(year, month, 1)
        while MIN_YEAR - 1 <= year <= MAX_YEAR + 1:
            found = self.days.in_month(year, month, self.nth) if MIN_YEAR <= year <= MAX_YEAR else None
            if found is not None:
                since = found
                yield found
            elif quiet(date(year, month, 1), since, self.days, direction < 0):
                return
            month += direction
            if month in (0, 13):
                year, month = year + direction, 1 if month == 13 else 12

    def local_candidates(self, after_local: datetime) -> Iterator[datetime]:
        for day in self._months(after_local.year, after_local.month, 1):
            for moment in self.times:
                local = datetime.combine(day, moment)
                if local > after_local:
                    yield local

    def local_candidates_before(self, before_local: datetime) -> Iterator[datetime]:
        for day in self._months(before_local.year, before_local.month, -1):
            for moment in reversed(self.times):
                local = datetime.combine(day, moment)
                if local < before_local:
                    yield local
