"""Trigger models of a task file (`[trigger]`: cron, interval, calendar, business_day, once) and their own
checks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time
from functools import lru_cache
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator

from reconciler.spec.model import CrossCheck, Model, did_you_mean, suggestion
from reconciler.spec.values import DAY, MAX_NAME, CalendarName, ClockTimes, When, WhenValue

CRON_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
INTERVAL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Input bounds (docs/files.md, "Input bounds"), as spec.values says.
MAX_INTERVAL_SECONDS = 36_500 * DAY  # 100 years
MAX_CALENDAR_EVERY = 1000
MAX_CRON = 1024
NEEDS_ANCHOR = "a calendar trigger needs start_at = YYYY-MM-DD (the anchor date)"


class Window(Model):
    """The optional start/end window every trigger kind shares."""

    start_at: When | None = None
    end_at: When | None = None


OnNonBusinessDay = Literal["skip", "next", "previous"]
NEEDS_BUSINESS_DAYS = 'on_non_business_day needs business_days = "NAME" (a file of calendars.d)'


class BusinessDays(Window):
    """What the wall-clock kinds (cron, calendar) share: occurrences on days that are not business days of
    the calendar `business_days` are skipped, or moved to the next or previous business day."""

    business_days: CalendarName | None = None
    on_non_business_day: OnNonBusinessDay | None = None  # None: skip (absent from the stored spec)

    cross_checks: ClassVar[tuple[CrossCheck, ...]] = (
        (
            ("business_days", "on_non_business_day"),
            lambda v: NEEDS_BUSINESS_DAYS if v["on_non_business_day"] and not v["business_days"] else None,
        ),
    )


class CronTrigger(BusinessDays):
    kind: Literal["cron"]
    expr: str = Field(max_length=MAX_CRON)

    @field_validator("expr")
    @classmethod
    def _expr(cls, value: str) -> str:
        text = " ".join(value.split())
        problem = cron_problem(text)
        if problem:
            raise ValueError(problem)
        return text

    @property
    def fields(self) -> list[str]:
        """The five cron fields, macros expanded, single-value ranges collapsed.

        croniter 7 reads a range whose ends are equal (`5-5`, `1-1/2`) as `*`; Vixie
        cron reads it as the single value, and so do we.
        """
        raw = CRON_MACROS.get(self.expr.lower(), self.expr).split()
        return [",".join(_collapse_range(part) for part in item.split(",")) for item in raw]


@dataclass(frozen=True, slots=True)
class CronField:
    """One of the five fields: its name, its numeric range and the names it also accepts."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()

    @property
    def allowed(self) -> str:
        spelled = f" or {self.names[0].upper()}-{self.names[-1].upper()}" if self.names else ""
        return f"{self.low}-{self.high}{spelled}"


CRON_FIELDS = (
    CronField("minute", 0, 59),
    CronField("hour", 0, 23),
    CronField("day of month", 1, 31),
    CronField("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    CronField("day of week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
CRON_FORMAT = ", ".join(f"{field.name} {field.allowed}" for field in CRON_FIELDS)
# croniter's "R" is a random value drawn anew by every process that parses the expression.
_RANDOM = re.compile(r"[Rr](?:\(.*\))?(?:/.*)?")


def cron_problem(text: str) -> str | None:
    """Why a cron expression (or @macro) is not valid, naming the field and its allowed range; None if valid."""
    expanded = CRON_MACROS.get(text.lower(), text)
    if text.startswith("@") and text.lower() not in CRON_MACROS:
        hint = suggestion(text, CRON_MACROS)
        return f"unknown macro {text!r}{hint} (macros: {', '.join(sorted(CRON_MACROS))})"
    fields = expanded.split()
    if len(fields) != 5:
        return (
            f"{text!r} has {len(fields)} field{'s' * (len(fields) != 1)}; cron needs 5 fields: "
            "minute hour day-of-month month day-of-week"
        )
    for field, part in zip(CRON_FIELDS, fields, strict=True):
        if "r" in part.lower() and any(_RANDOM.fullmatch(item) for item in part.split(",")):
            return (
                f"cron field {field.name}: R (a random value) is not supported, every engine would pick "
                f"another one; write a value in {field.allowed}"
            )
    if _cron_valid(expanded):
        return None
    for field, part in zip(CRON_FIELDS, fields, strict=True):
        problem = _cron_field_problem(field, part)
        if problem:
            return f"cron field {field.name}: {problem}"
    return f"{text!r} is not a valid cron expression ({CRON_FORMAT})"


@lru_cache(maxsize=4096)
def _cron_valid(expr: str) -> bool:
    from croniter import croniter

    return bool(croniter.is_valid(expr))


def _cron_field_problem(field: CronField, text: str) -> str | None:
    """The first problem found in one field that croniter refused; None when not understood here.

    Only explains a refusal: what croniter accepts is accepted (its extensions such as
    `L`, `5#3` and `15W` too), and reversed ranges wrap (`22-2` hours is 22, 23, 0, 1, 2).
    """
    for item in text.split(","):
        if not item:
            return f"{text!r} has an empty list item; separate values with single commas"
        base, slash, step = item.partition("/")
        if slash:
            if not (step.isascii() and step.isdigit()):
                return f"step {step!r} in {item!r} is not a whole number; write e.g. */5"
            if int(step) == 0:
                return f"step 0 in {item!r} never advances; a step is at least 1"
        if base == "*":
            continue
        if not base:
            return f"{item!r} has no value before /; write e.g. */5 or 0-30/5"
        ends = base.split("-")
        if len(ends) > 2 or not all(ends):
            return f"{base!r} is not a value or a range A-B (allowed: {field.allowed})"
        for end in ends:
            problem = _cron_value_problem(field, end)
            if problem:
                return problem
    return None


def _cron_value_problem(field: CronField, text: str) -> str | None:
    if text.isascii() and text.isdigit():
        if not field.low <= int(text) <= field.high:
            return f"{int(text)} is out of range {field.low}-{field.high}"
        return None
    if text.lower() in field.names:
        return None
    if field.names and text.isascii() and text.isalpha():
        found = did_you_mean(text, field.names)
        hint = f"; did you mean {found.upper()}?" if found else ""
        return f"{text!r} is not a {field.name} name{hint} (allowed: {field.allowed})"
    if field.name == "day of week" and "#" in text:
        day, _, nth = text.partition("#")
        if not (nth.isascii() and nth.isdigit() and 1 <= int(nth) <= 5):
            return f"{text!r}: the week of the month after # is 1-5 (5#3 is the third Friday)"
        return _cron_value_problem(field, day) if day else f"{text!r} needs a weekday before #"
    if field.name in ("day of month", "day of week") and any(mark in text.upper() for mark in "LW"):
        return None  # croniter's extensions: its own refusal is reported generically
    return f"{text!r} is not a number (allowed: {field.allowed})"


def _collapse_range(part: str) -> str:
    match = re.fullmatch(r"(\w+)-(\w+)(?:/\d+)?", part)
    return match.group(1) if match and match.group(1).lower() == match.group(2).lower() else part


class IntervalTrigger(Window):
    kind: Literal["interval"]
    every: str | None = Field(default=None, max_length=64)
    seconds: int | None = Field(default=None, gt=0, le=MAX_INTERVAL_SECONDS)

    @field_validator("every")
    @classmethod
    def _every(cls, value: str | None) -> str | None:
        if value is None:
            return value
        return checked_duration(value, MAX_INTERVAL_SECONDS, f"{MAX_INTERVAL_SECONDS // DAY}d (100 years)")

    cross_checks = ((("every", "seconds"), lambda v: _one_period(**v)),)

    @property
    def period_seconds(self) -> int:
        """The interval length in seconds."""
        if self.seconds is not None:
            return self.seconds
        parsed = parse_every(self.every or "")
        assert parsed is not None
        return parsed


EVERY_FORMAT = 'write whole numbers with units d, h, m, s, largest first, e.g. "90s", "15m", "1h30m" or "2d12h"'
_EVERY = re.compile(r"(?:\s*[0-9]+\s*[^\s0-9]+)+\s*")
_EVERY_PART = re.compile(r"([0-9]+)\s*([^\s0-9]+)")


def every_seconds(text: str) -> int | str:
    """`"90s"` → 90, `"1h30m"` → 5400; or, when the text is not a positive duration, why not."""
    if any(mark in text for mark in ".,"):
        return "whole numbers only: 1h30m, not 1.5h"
    if not _EVERY.fullmatch(text):
        return "no number with a unit" if not text.strip() else "a number and a unit are expected"
    total, previous = 0, None
    for number, unit in _EVERY_PART.findall(text):
        if unit not in INTERVAL_UNITS:
            lower = f"; units are lower-case ({unit.lower()})" if unit.lower() in INTERVAL_UNITS else ""
            return f"unknown unit {unit!r}{lower}"
        if previous is not None and INTERVAL_UNITS[unit] >= INTERVAL_UNITS[previous]:
            return f"{unit} after {previous}: units go largest first, each once"
        # At most 15 digits: int() of a very long digit string is slow, then refused (4300 digits).
        if len(number) > 15:
            return f"{number[:20]}{'…' * (len(number) > 20)} has more than 15 digits"
        total += int(number) * INTERVAL_UNITS[unit]
        previous = unit
    return total if total > 0 else "it is zero"


def duration_seconds(text: str) -> int:
    """A validated duration's seconds (checked_duration passed it: a window's `duration`, a job's `deadline`)."""
    seconds = every_seconds(text)
    assert isinstance(seconds, int)
    return seconds


def checked_duration(value: str, most: int, too_long: str) -> str:
    """A duration text (`"90s"`, `"1h30m"`) whose seconds are at most `most`, else a ValueError: why it is not a
    duration, or `too_long` (what the longest allowed is, and the fix)."""
    seconds = every_seconds(value)
    if isinstance(seconds, str):
        raise ValueError(f"{value[:MAX_NAME]!r} is not a positive duration ({seconds}); {EVERY_FORMAT}")
    if seconds > most:
        raise ValueError(f"{value[:MAX_NAME]!r} is longer than {too_long}")
    return value


def _one_period(every: str | None, seconds: int | None) -> str | None:
    if (every is None) == (seconds is None):
        return 'give exactly one of every = "15m" or seconds = N'
    return None


def parse_every(text: str) -> int | None:
    """`"90s"` → 90, `"1h30m"` → 5400; None if the text is not a positive duration."""
    seconds = every_seconds(text)
    return seconds if isinstance(seconds, int) else None


class CalendarTrigger(BusinessDays):
    kind: Literal["calendar"]
    every: int = Field(default=1, gt=0, le=MAX_CALENDAR_EVERY)
    unit: Literal["days", "weeks", "months", "years"]
    at: ClockTimes
    start_at: When | None = None

    @field_validator("start_at")
    @classmethod
    def _anchor(cls, value: WhenValue | None) -> WhenValue | None:
        if value is None:
            raise ValueError(NEEDS_ANCHOR)
        if isinstance(value, datetime):
            raise ValueError("the calendar anchor is a date: write start_at = YYYY-MM-DD, times go in `at`")
        return value

    cross_checks: ClassVar[tuple[CrossCheck, ...]] = (
        *BusinessDays.cross_checks,
        (("start_at",), lambda v: NEEDS_ANCHOR if v["start_at"] is None else None),
    )

    @property
    def times(self) -> list[time]:
        """The wall-clock times of day, sorted, without duplicates."""
        return list(self.at)


MAX_BUSINESS_DAY = 23  # no month has more business days than weekdays (at most 23)


def _nth(value: int) -> int:
    if value == 0 or abs(value) > MAX_BUSINESS_DAY:
        raise ValueError(
            f"day = {value} is out of range: 1..{MAX_BUSINESS_DAY} counts business days from the start of the "
            f"month, -1..-{MAX_BUSINESS_DAY} from its end (-1 is the last)"
        )
    return value


class BusinessDayTrigger(Window):
    """The Nth business day of each month (from the end when negative), at wall-clock times."""

    kind: Literal["business_day"]
    business_days: CalendarName
    day: Annotated[int, AfterValidator(_nth)]
    at: ClockTimes

    @property
    def times(self) -> list[time]:
        return list(self.at)


class OnceTrigger(Model):
    kind: Literal["once"]
    at: When


Trigger = Annotated[
    CronTrigger | IntervalTrigger | CalendarTrigger | BusinessDayTrigger | OnceTrigger, Field(discriminator="kind")
]
