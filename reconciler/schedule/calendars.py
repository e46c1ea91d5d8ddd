"""The calendar kind: every N days, weeks, months or years at wall-clock times, anchored at a date."""

from __future__ import annotations

import calendar as _calendar
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta

from reconciler.schedule.walltime import WallClockSchedule


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

    def day_times(self) -> frozenset[time]:
        return frozenset(self.times)

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
