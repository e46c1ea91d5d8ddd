"""Calendar files (`calendars.d/NAME.toml`): the calendar kind, a calendars directory loaded, and each
business-days calendar's holidays resolved from the `holidays` package for the years Y−1 … Y+10.

What apply stores of a calendar is its normalized spec with those holidays (`resolved`): engines read it,
never the package, so they all agree; a change in the package's data is a change of the calendar.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from reconciler.clock import utcnow
from reconciler.files.directory import Named, load_named
from reconciler.files.kinds import Declared, ErrorAt, Kind
from reconciler.files.problems import FileError
from reconciler.schedule.base import TriggerError
from reconciler.schedule.blackout import Blackout
from reconciler.spec.calendar import BlackoutCalendar, BusinessDaysCalendar, CalendarSpec, HolidaySource

YEARS_BEFORE, YEARS_AFTER = 1, 10  # the years resolved around the apply's year Y: Y−1 … Y+10
KIND_MISSING = 'missing kind; write kind = "business_days" or kind = "blackout"'


def holidays_version() -> str:
    """The `holidays` package's version: stored beside each calendar it resolved."""
    from importlib.metadata import version

    return version("holidays")


@lru_cache(maxsize=64)
def resolve_holidays(source: HolidaySource, first: int, last: int) -> dict[str, str]:
    """The holidays of `source` in the years first … last, by ISO date (several on one date: joined)."""
    import holidays

    found = holidays.country_holidays(
        source.country, subdiv=source.subdivision, years=range(first, last + 1), observed=source.observed
    )
    return {day.isoformat(): "; ".join(found.get_list(day)) for day in sorted(found)}


@dataclass(frozen=True)
class Calendar(Declared):
    """A valid calendar file, resolved for the years around `year`."""

    name: str
    path: str
    spec: BusinessDaysCalendar | BlackoutCalendar
    source: str = field(default="", repr=False)
    year: int = field(default=2026, repr=False, compare=False)

    def key(self) -> str:
        return self.name

    def model(self) -> BusinessDaysCalendar | BlackoutCalendar:
        return self.spec

    @cached_property
    def normalized(self) -> dict[str, Any]:
        """The spec as stored: a business-days calendar with its holidays resolved (`resolved`)."""
        spec = self.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(self.spec, BusinessDaysCalendar) and self.spec.holidays is not None:
            first, last = self.year - YEARS_BEFORE, self.year + YEARS_AFTER
            spec["resolved"] = {
                "years": [first, last],
                "holidays": resolve_holidays(self.spec.holidays, first, last),
            }
        return spec


class CalendarKind(Kind[Calendar]):
    """Calendar files: named by their file, directly in calendars.d; business_days or blackout."""

    name = "calendar"
    directory = "calendars.d"
    option = "--calendars-dir"
    model = CalendarSpec
    empty = "empty calendar file; " + KIND_MISSING.removeprefix("missing kind; ")
    in_line_order = False

    def __init__(self, year: int = 2026) -> None:
        self.year = year

    def item(self, item_id: str, display: str, source: str, spec: Any, digest: str | None) -> Calendar:
        return Calendar(item_id, display, spec, source, self.year)

    def model_error(self, found: FileError) -> FileError:
        if found.key == "kind" and found.message.startswith("missing kind"):
            return FileError(found.path, found.line, found.key, KIND_MISSING)
        return found

    def finish(
        self,
        item_id: str,
        display: str,
        source: str,
        checked: tuple[Any, dict[str, Any], list[FileError], ErrorAt],
        digest: str | None,
    ) -> tuple[Calendar | None, list[FileError]]:
        """A blackout's fixed local times must each name one instant (not a DST gap or overlap)."""
        spec, _, errors, error = checked
        if isinstance(spec, BlackoutCalendar):
            try:
                Blackout.stored(item_id, spec.model_dump(mode="json", by_alias=True, exclude_none=True))
            except TriggerError as exc:
                errors.append(error(tuple(exc.key.split(".")), exc.message, exc.key))
        return super().finish(item_id, display, source, (spec, _, errors, error), digest)


CALENDARS = CalendarKind()


class Calendars(Named[Calendar]):
    """A calendars directory loaded: the valid calendars by name, and an error for everything else."""

    def stored(self) -> dict[str, dict[str, Any]]:
        """Every valid calendar as apply stores it, by name."""
        return {name: calendar.normalized for name, calendar in self.by_name.items()}


def load_calendars(
    calendars_dir: Path, display_root: str | None = None, required: bool = False, year: int | None = None
) -> Calendars:
    """Every `NAME.toml` directly in `calendars_dir` (none when it does not exist, unless `required`),
    resolved around `year` (default: this year, UTC)."""
    kind = CalendarKind(year if year is not None else utcnow().year)
    return load_named(kind, Calendars, calendars_dir, display_root, required)
