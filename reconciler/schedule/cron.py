"""The cron kind: a 5-field expression walked in wall time by croniter, and what its text alone tells
(the DST overlap default of a frequent cron; whether it surely fires every year).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, time

from croniter import CroniterBadDateError, croniter

from reconciler.schedule.base import Overlap
from reconciler.schedule.walltime import WallClockSchedule
from reconciler.spec.task import TaskSpec
from reconciler.spec.trigger import CRON_MACROS, CronTrigger


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

    def day_times(self) -> frozenset[time]:
        # A cron's time fields do not depend on its date fields: each day it fires has every combination.
        minutes, hours = croniter(self.expr, datetime(2000, 1, 1), day_or=True).expanded[:2]
        return frozenset(
            time(int(hour), int(minute))
            for hour in (range(24) if hours == ["*"] else hours)
            for minute in (range(60) if minutes == ["*"] else minutes)
        )

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


def default_overlap(spec: TaskSpec) -> Overlap:
    """SPEC default: first pass, except a cron that runs hourly or more often (both passes).

    That is an hour field of `*` or `*/1`, or a minute field beginning with `*` (`*`, `*/N`):
    the two passes of a repeated hour are distinct elapsed times, and a job that runs every
    few minutes must not fall silent for an hour. Debian cron also runs an hour step such
    as `*/3` twice; here that stays a fixed-time job (docs/files.md, "Daylight saving time").
    """
    if spec.policy.dst_overlap is not None:
        return spec.policy.dst_overlap
    return cron_overlap(spec.trigger.fields) if isinstance(spec.trigger, CronTrigger) else "first"


def cron_overlap(fields: list[str]) -> Overlap:
    """The default DST overlap rule of a cron's fields (see default_overlap): both passes when it is frequent."""
    return "both" if fields[1] in ("*", "*/1") or fields[0].startswith("*") else "first"


def matches_every_year(spec: TaskSpec) -> bool:
    """Whether a cron surely fires within a year, decided from its text alone (croniter costs ~0.2 ms a task).

    True when the day fields are plain (no `L`, `W`, `#` or `?`, which some months or years
    lack) and name a day 1-28 or leave the day of month `*`: every month it names has such a
    day. DST can only move such a time (`dst_gap = "shift"`), never drop every one of them.
    """
    trigger = spec.trigger
    if not isinstance(trigger, CronTrigger) or spec.policy.dst_gap != "shift":
        return False
    if trigger.business_days is not None or spec.policy.blackouts:
        return False  # a calendar can take every day the cron names
    _, _, day, _, weekday = CRON_MACROS.get(trigger.expr.lower(), trigger.expr).split()
    if any(mark in (day + weekday).upper() for mark in "LW#?"):
        return False
    return day == "*" or min(first_day(item) for item in day.split(",")) <= 28


def first_day(item: str) -> int:
    """The lowest day of month of one list item (`5`, `5-9`, `*/2`, `10-20/3`; a reversed range wraps past 1)."""
    base = item.split("/")[0]
    if base == "*":
        return 1
    low, _, high = base.partition("-")
    return int(low) if not high or int(low) <= int(high) else 1
