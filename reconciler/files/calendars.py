"""Calendar files (`calendars.d/NAME.toml`): the calendar kind, a calendars directory loaded, and each
business-days calendar's holidays resolved from the `holidays` package for the years Y−1 … Y+10.

What apply stores of a calendar is its normalized spec with those holidays (`resolved`): engines read it,
never the package, so they all agree; a change in the package's data is a change of the calendar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from reconciler.clock import utcnow
from reconciler.files.directory import load_named
from reconciler.files.kinds import Checked, DeclaredItem, Named, NamedKind
from reconciler.files.problems import FileError, FileWarning
from reconciler.files.references import missing, spec_of, unused, users_of
from reconciler.schedule.base import TriggerError
from reconciler.schedule.blackout import Blackout
from reconciler.schedule.business import holidays_note
from reconciler.spec.calendar import (
    BlackoutCalendar,
    BlackoutWindow,
    BusinessDaysCalendar,
    CalendarSpec,
    HolidaySource,
)
from reconciler.spec.task import calendars_named
from reconciler.spec.values import zone_problem

if TYPE_CHECKING:
    from reconciler.files.tasks import Task, Unparsed

YEARS_BEFORE, YEARS_AFTER = 1, 10  # the years resolved around the apply's year Y: Y−1 … Y+10
KIND_MISSING = 'missing kind; write kind = "business_days" or kind = "blackout"'
KINDS_OF = {"trigger.business_days": "business_days", "policy.blackouts": "blackout"}  # what each key names
HOLIDAY_PATH = "resolved.holidays."  # a resolved holiday's field in a plan: `resolved.holidays.2026-12-25`


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
class Calendar(DeclaredItem):
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


class CalendarKind(NamedKind[Calendar]):
    """Calendar files: named by their file, directly in calendars.d; business_days or blackout. Apply keeps them in
    scheduler.calendars, with the holidays it resolved, and binds each task to the calendars it names."""

    name = "calendar"
    directory = "calendars.d"
    option = "--calendars-dir"
    model = CalendarSpec
    empty = "empty calendar file; " + KIND_MISSING.removeprefix("missing kind; ")
    title = "reconciler calendar file"
    description = (
        "One TOML file in calendars.d/: business days (kind business_days) or blackout windows (kind blackout) "
        "that tasks name. Checks keys, types and ranges; `reconciler validate` checks the rest (countries and "
        "subdivisions of the holidays package, cron expressions, time zones, DST)."
    )
    table = "calendars"
    derived = ("resolved",)  # the holidays apply resolves

    def __init__(self, year: int = 2026) -> None:
        self.year = year

    def current(self) -> CalendarKind:
        return CalendarKind(utcnow().year)

    def columns(self, item: Calendar) -> dict[str, Any]:
        return {"holidays_version": holidays_version() if item.spec.kind == "business_days" else None}

    def summary(self, spec: Mapping[str, Any]) -> str:
        """`business days: weekend sat, sun; 138 holidays of US-NY 2025–2036; 1 extra holiday` or `blackout: 2
        window(s) in Europe/Berlin`."""
        if spec.get("kind") == "blackout":
            return f"blackout: {len(spec.get('window', []))} window(s) in {spec.get('timezone', 'UTC')}"
        parts = [f"weekend {', '.join(spec.get('weekend', [])) or 'none'}"]
        source, resolved = spec.get("holidays"), spec.get("resolved", {})
        if isinstance(source, dict):
            region = "-".join(str(source[key]) for key in ("country", "subdivision") if key in source)
            first, last = resolved.get("years", ["?", "?"])
            observed = "" if source.get("observed", True) else ", not observed"
            parts.append(f"{len(resolved.get('holidays', {}))} holidays of {region} {first}–{last}{observed}")
        parts += [
            f"{len(spec[key])} {key.replace('_', ' ')}" for key in ("extra_holidays", "extra_workdays") if spec.get(key)
        ]
        return "business days: " + "; ".join(parts)

    def field_line(self, path: str, old: Any, new: Any) -> str | None:
        """A resolved holiday as `+ holiday DATE NAME`, `- holiday …` or `~ holiday DATE: OLD → NEW`."""
        if not path.startswith(HOLIDAY_PATH):
            return None
        day = path.removeprefix(HOLIDAY_PATH)
        if old is None:
            return f"+ holiday {day} {new}"
        if new is None:
            return f"- holiday {day} {old}"
        return f"~ holiday {day}: {old} → {new}"

    def references(
        self,
        tasks: Sequence[Task | Unparsed],
        loaded: Named[Calendar],
        stored: Mapping[str, Mapping[str, Any]] | None,
    ) -> list[FileError]:
        """Every calendar a task names that calendars.d lacks (the error names every task using it: a calendar
        deleted while tasks use it is refused so), or of the wrong kind. A task standing on its row names none
        (see tasks_unchanged)."""
        return calendar_errors(tasks, loaded)

    def unused(
        self, tasks: Sequence[Task], loaded: Named[Calendar], stored: Mapping[str, Mapping[str, Any]] | None
    ) -> list[FileWarning]:
        """A calendar file no task names: it moves no occurrence."""
        used: set[str] = set()
        for task in tasks:
            business, blackouts = calendars_named(spec_of(task, stored))
            used.update(blackouts, [business] if business else [])
        return unused("calendar", loaded.by_name, used, "trigger.business_days or policy.blackouts")

    def bind(self, tasks: list[Task], loaded: Named[Calendar]) -> list[Task]:
        """Every task with the calendars it names bound (Task.bind): its schedule is then the engines'."""
        stored = {name: calendar.normalized for name, calendar in loaded.by_name.items()}
        return [task.bind(stored) for task in tasks]

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
        checked: Checked,
        digest: str | None,
    ) -> tuple[Calendar | None, list[FileError]]:
        """A blackout's fixed local times must each name one instant (not a DST gap or overlap): checked window by
        window, each that is valid on its own, also when another window (or the file) has errors."""
        checked.errors.extend(_window_errors(checked))
        return super().finish(item_id, display, source, checked, digest)


def _window_errors(checked: Checked) -> list[FileError]:
    """The DST errors of each window of a blackout calendar that the model takes on its own, at its own key."""
    data = checked.data
    windows, zone = data.get("window"), data.get("timezone", "UTC")
    if data.get("kind") != "blackout" or not isinstance(windows, list) or not isinstance(zone, str):
        return []
    if zone_problem(zone):
        return []
    errors = []
    for index, raw in enumerate(windows):
        try:
            window = BlackoutWindow.model_validate(raw).model_dump(mode="json", by_alias=True, exclude_none=True)
            Blackout.stored("window", {"timezone": zone, "window": [window]})
        except ValidationError:
            continue  # the model's own errors say what is wrong with it
        except TriggerError as exc:
            key = exc.key.replace("window.0.", f"window.{index}.", 1)
            errors.append(checked.error(tuple(key.split(".")), exc.message, key))
    return errors


CALENDARS = CalendarKind()


Calendars = Named[Calendar]


def load_calendars(
    calendars_dir: Path, display_root: str | None = None, required: bool = False, year: int | None = None
) -> Calendars:
    """Every `NAME.toml` directly in `calendars_dir` (none when it does not exist, unless `required`),
    resolved around `year` (default: this year, UTC)."""
    kind = CalendarKind(year) if year is not None else CALENDARS.current()
    return load_named(kind, calendars_dir, display_root, required)


def calendar_errors(tasks: Sequence[Task | Unparsed], calendars: Calendars) -> list[FileError]:
    """Every calendar a task names that calendars.d lacks (the error names every task using it: a calendar
    deleted while tasks use it is refused so), or of the wrong kind. A task standing on its row names none
    (see tasks_unchanged)."""
    named: list[tuple[Task | Unparsed, str, str]] = []
    for task in tasks:
        if task.stored is not None:
            continue
        business, blackouts = calendars_named(task.normalized)
        named += [(task, "trigger.business_days", business)] if business else []
        named += [(task, "policy.blackouts", name) for name in blackouts]
    users = users_of((task.id, name) for task, _, name in named)
    errors: list[FileError] = []
    for task, key, name in named:
        line = task.line_of(*key.split("."))
        if name in calendars.invalid:
            continue  # its own file's errors are reported there
        found = calendars.by_name.get(name)
        if found is None:
            message = missing("calendar", name, users[name], calendars.by_name, calendars.root)
            errors.append(FileError(task.path, line, key, message))
        elif found.spec.kind != KINDS_OF[key]:
            wanted = KINDS_OF[key]
            errors.append(
                FileError(
                    task.path,
                    line,
                    key,
                    f"calendar {name!r} is a {found.spec.kind} calendar; {key} names a {wanted} calendar "
                    f'(kind = "{wanted}" in {calendars.root.rstrip("/")}/NAME.toml)',
                )
            )
    return errors


def holiday_warnings(named: Mapping[str, Named[Any]]) -> list[FileWarning]:
    """A warning per business-days calendar that takes holidays from the `holidays` package: the years its holiday
    dates are resolved for, after which its holidays are business days (what `validate` says; `next` says it when
    the span it shows goes past them); `named`: the named kinds' directories loaded (Declared.named)."""
    loaded = named.get(CALENDARS.name)
    warnings = []
    for calendar in loaded.by_name.values() if loaded is not None else []:
        note = holidays_note(calendar.name, calendar.normalized)
        if note is not None:
            warnings.append(FileWarning(calendar.path, calendar.line_of("holidays"), "holidays", note))
    return warnings
