"""What a calendar file (`calendars.d/NAME.toml`) may say: business days (a weekend, holidays of the
`holidays` package, extra holidays and workdays) or blackout windows (a cron and a duration, or a fixed
local range, in a zone); and the names a task's trigger and policy give them."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PlainSerializer, PlainValidator, RootModel, field_validator

from reconciler.spec.model import Model, did_you_mean
from reconciler.spec.trigger import MAX_CRON, checked_duration, cron_problem
from reconciler.spec.values import DAY, MAX_NAME, When, year_problem, zone_problem

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # date.weekday() order
# Input bounds (docs/files.md, "Input bounds").
MAX_DATES = 1000  # extra holidays, extra workdays
MAX_WINDOWS = 100
MAX_WINDOW_SECONDS = 3660 * DAY  # a window lasts at most ten years


def _local_date(value: Any) -> date:
    if isinstance(value, str):
        try:
            value = date.fromisoformat(value)
        except ValueError:
            value = None
    if isinstance(value, datetime):
        raise ValueError(f"{value.isoformat()} has a time of day; write the date alone, e.g. 2026-12-24")
    if isinstance(value, date):
        problem = year_problem(value)
        if problem:
            raise ValueError(problem)
        return value
    raise ValueError("expected a TOML date, e.g. 2026-12-24")


LocalDate = Annotated[date, PlainValidator(_local_date), PlainSerializer(lambda value: value.isoformat())]
Dates = Annotated[list[LocalDate], Field(max_length=MAX_DATES)]


def _weekday(value: Any) -> str:
    if isinstance(value, str) and value.lower() in WEEKDAYS:
        return value.lower()
    shown = str(value)[:MAX_NAME]
    near = did_you_mean(shown.lower()[:3], WEEKDAYS) if isinstance(value, str) else None
    hint = f"; did you mean {near!r}?" if near else ""
    raise ValueError(f"{shown!r} is not a weekday{hint} (write one of {', '.join(WEEKDAYS)})")


Weekday = Annotated[str, PlainValidator(_weekday)]


class HolidaySource(Model):
    """Public holidays of a country (and one of its subdivisions), from the `holidays` package."""

    country: str = Field(max_length=16)
    subdivision: str | None = Field(default=None, max_length=16)
    observed: bool = True  # a holiday on a weekend is also observed on a weekday, where the country does so

    cross_checks = ((("country", "subdivision"), lambda v: region_problem(**v)),)


def region_problem(country: str, subdivision: str | None) -> str | None:
    """Why the `holidays` package has no such country or subdivision (with the nearest one), or None."""
    import holidays

    supported: dict[str, list[str]] = holidays.list_supported_countries()
    if country not in supported:
        near = did_you_mean(country, supported)
        hint = f"; did you mean {near!r}?" if near else " (ISO 3166-1 codes such as US, DE, GB)"
        return f"unknown country {country[:MAX_NAME]!r} in the holidays package{hint}"
    if subdivision is None or subdivision in supported[country]:
        return None
    subdivisions = supported[country]
    near = did_you_mean(subdivision, subdivisions)
    if near:
        hint = f"; did you mean {near!r}?"
    else:
        shown = ", ".join(subdivisions[:12]) + (" …" if len(subdivisions) > 12 else "")
        hint = f" (its subdivisions: {shown})" if subdivisions else f"; {country} has no subdivisions, remove it"
    return f"unknown subdivision {subdivision[:MAX_NAME]!r} of {country}{hint}"


class BusinessDaysCalendar(Model):
    """`kind = "business_days"`: a local date is a business day iff it is an extra workday, or neither a
    weekend day, nor a holiday, nor an extra holiday."""

    kind: Literal["business_days"]
    weekend: list[Weekday] = Field(default_factory=lambda: ["sat", "sun"], max_length=7)
    holidays: HolidaySource | None = None
    extra_holidays: Dates = Field(default_factory=list)
    extra_workdays: Dates = Field(default_factory=list)

    @field_validator("weekend")
    @classmethod
    def _weekend(cls, value: list[str]) -> list[str]:
        return sorted(set(value), key=WEEKDAYS.index)

    @field_validator("extra_holidays", "extra_workdays")
    @classmethod
    def _sorted(cls, value: list[date]) -> list[date]:
        return sorted(set(value))


def _duration(value: str) -> str:
    return checked_duration(value, MAX_WINDOW_SECONDS, f"{MAX_WINDOW_SECONDS // DAY}d (ten years)")


def _cron(value: str) -> str:
    text = " ".join(value.split())
    problem = cron_problem(text)
    if problem:
        raise ValueError(problem)
    return text


class BlackoutWindow(Model):
    """`[[window]]`: opens at each occurrence of `cron` for `duration` of elapsed time, or is the fixed
    local range [from, until)."""

    cron: Annotated[str, Field(max_length=MAX_CRON), AfterValidator(_cron)] | None = None
    duration: Annotated[str, Field(max_length=64), AfterValidator(_duration)] | None = None
    from_: When | None = Field(default=None, alias="from")
    until: When | None = None

    cross_checks = ((("cron", "duration", "from_", "until"), lambda v: _window_problem(**v)),)


def _window_problem(cron: str | None, duration: str | None, from_: Any, until: Any) -> str | None:
    repeating, fixed = (cron, duration), (from_, until)
    if any(value is not None for value in repeating) and any(value is not None for value in fixed):
        return "a window is either cron + duration or from + until, not both; split it into two [[window]] tables"
    if all(value is None for value in (*repeating, *fixed)):
        return 'a window needs cron = "0 22 * * 5" with duration = "56h", or from = … with until = …'
    if any(value is None for value in repeating) and any(value is not None for value in repeating):
        return "cron needs duration (how long each window lasts), and duration needs cron"
    if any(value is None for value in fixed) and any(value is not None for value in fixed):
        return "from needs until (the end of the range, exclusive), and until needs from"
    start, end = _as_datetime(from_), _as_datetime(until)
    if start is not None and end is not None and (start.tzinfo is None) == (end.tzinfo is None) and end <= start:
        return f"until ({until.isoformat()}) must be after from ({from_.isoformat()})"
    return None  # one with an offset and one without: compared once the calendar's zone resolves them


def _as_datetime(value: date | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime(value.year, value.month, value.day)


class BlackoutCalendar(Model):
    """`kind = "blackout"`: windows in which a task that names the calendar does not fire."""

    kind: Literal["blackout"]
    timezone: str = Field(default="UTC", max_length=MAX_NAME)
    windows: list[BlackoutWindow] = Field(alias="window", min_length=1, max_length=MAX_WINDOWS)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        problem = zone_problem(value)
        if problem:
            raise ValueError(problem)
        return value


CalendarSpec = Annotated[BusinessDaysCalendar | BlackoutCalendar, Field(discriminator="kind")]


class CalendarFile(RootModel[CalendarSpec]):
    """A calendar file as a whole: `reconciler schema --kind calendar` describes it."""
