"""Task files (`tasks.d/**/*.toml`): the task kind, what a valid file is, and its checks of its own
(the trigger's window, `moved_from` across files, schedules that never fire). Never raises on user input."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, cached_property
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import TypeAdapter, ValidationError

from reconciler.files.directory import DirFiles, read_dir
from reconciler.files.kinds import Checked, DeclaredItem, ErrorAt, Kind, check_data, validate
from reconciler.files.problems import FileError, FileWarning
from reconciler.files.text import BOM, key_lines, locate, parse_toml
from reconciler.schedule.base import Schedule, TriggerError
from reconciler.schedule.business import BusinessDays, months_without
from reconciler.schedule.preview import never_fires
from reconciler.schedule.triggers import compile_schedule, trigger_instants
from reconciler.spec.task import TaskSpec, calendars_named
from reconciler.spec.trigger import BusinessDayTrigger, Trigger
from reconciler.spec.values import zone_problem

NOT_A_KEY = (
    "unknown key; a task names its calendars with trigger.business_days and policy.blackouts (files of calendars.d)"
)


@dataclass(frozen=True, slots=True)
class Stored:
    """What a file parsed to when it was applied: all a plan reads of a task whose file is unchanged since."""

    digest: str  # file_digest() of the file as it was applied
    spec_hash: str
    enabled: bool
    timezone: str
    moved_from: str | None


@dataclass(frozen=True)
class Task(DeclaredItem):
    """A valid task file: parsed (`parsed`), or standing on what it parsed to when it was applied (`stored`).

    A plan of a file unchanged since it was applied reads only the values `Stored` holds; anything
    more (spec, schedule, normalized form) parses the file's text on first use.
    """

    id: str
    path: str
    source: str = field(default="", repr=False)
    parsed: tuple[TaskSpec, Schedule] | None = field(default=None, repr=False, compare=False)
    stored: Stored | None = field(default=None, repr=False, compare=False)
    digest: str | None = field(default=None, repr=False, compare=False)  # file_digest() of the file; None: no file

    def key(self) -> str:
        return self.id

    def model(self) -> TaskSpec:
        return self.spec

    @cached_property
    def _validated(self) -> tuple[TaskSpec, Schedule]:
        if self.parsed is not None:
            return self.parsed
        assert self.stored is not None
        task, _ = load_text(self.id, self.path, self.source)
        if task is None or task.spec_hash != self.stored.spec_hash:
            # The file parsed differently when it was applied, under the same parser_key(): a change
            # outside what the key covers (the package's code and the listed versions) needs PARSER_VERSION.
            raise RuntimeError(f"{self.path} no longer parses as it did when applied; bump PARSER_VERSION")
        return task._validated

    @property
    def spec(self) -> TaskSpec:
        return self._validated[0]

    @property
    def schedule(self) -> Schedule:
        return self._validated[1]

    @property
    def enabled(self) -> bool:
        return self.stored.enabled if self.stored is not None else self.spec.enabled

    @property
    def timezone(self) -> str:
        return self.stored.timezone if self.stored is not None else self.spec.timezone

    @property
    def moved_from(self) -> str | None:
        return self.stored.moved_from if self.stored is not None else self.spec.moved_from

    @cached_property
    def spec_hash(self) -> str:
        """A stable hash of the normalized spec (a stand-in's is its row's: its file is not parsed)."""
        return self.stored.spec_hash if self.stored is not None else super().spec_hash

    @property
    def calendars(self) -> dict[str, dict[str, Any]] | None:
        """The calendars bound to the task (see bind), as apply stores them; None when it names none."""
        return self.spec.calendars if self.stored is None else None

    def bind(self, calendars: Mapping[str, dict[str, Any]]) -> Task:
        """The task with the calendars it names taken from `calendars` (the valid ones of calendars.d), so that
        its schedule is the one the engines will compute. A stand-in names none (see tasks_unchanged)."""
        if self.stored is not None:
            return self
        business, blackouts = calendars_named(self.normalized)
        names = [name for name in (business, *blackouts) if name is not None]
        if not names:
            return self
        bound = self.spec.model_copy(update={"calendars": {n: calendars[n] for n in names if n in calendars}})
        try:
            schedule = compile_schedule(bound)
        except TriggerError:  # a calendar missing or of the wrong kind: reported by calendar_errors
            return self
        return Task(self.id, self.path, self.source, (bound, schedule), digest=self.digest)


# The keys of a task file that name files of other kinds (calendars.d, limits.d).
NAMING_KEYS = (("trigger", "business_days"), ("policy", "blackouts"), ("policy", "limits"))


@dataclass(frozen=True)
class Unparsed:
    """A task file with errors, as far as the names it gives other kinds' files go (its calendars and limits, each
    key the model took): they are checked too, so `validate` reports every error of every file in one run."""

    id: str
    path: str
    source: str = field(repr=False)
    normalized: dict[str, Any] = field(default_factory=dict)  # only the naming keys, as the file wrote them
    stored: None = None  # never standing on a row (see Task.stored)

    def line_of(self, *key: str) -> int:
        """The file line of a key path (0 when unknown)."""
        return locate(key_lines(self.source), key)


def unparsed(file_id: str, display: str, source: str, errors: list[FileError]) -> Unparsed | None:
    """The names a task file with `errors` gives other kinds' files, each of a key without an error of its own."""
    data, _ = parse_toml(display, source.removeprefix(BOM))
    if data is None:
        return None
    wrong = {error.key for error in errors}
    named: dict[str, Any] = {}
    for table, key in NAMING_KEYS:
        value = data.get(table, {}).get(key) if isinstance(data.get(table), dict) else None
        if value is not None and not any(k == f"{table}.{key}" or k.startswith(f"{table}.{key}.") for k in wrong):
            named.setdefault(table, {})[key] = value
    return Unparsed(file_id, display, source, named) if named else None


@dataclass(frozen=True)
class LoadResult:
    """A tasks directory loaded: its valid tasks, an error for everything else, and what the files with errors name
    of other kinds (files/declared.py composes it with the other kinds' directories)."""

    tasks: list[Task]
    errors: list[FileError]
    unparsed: list[Unparsed] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class TaskKind(Kind[Task]):
    """Task files: ids are their paths below tasks.d; a trigger's window times and moved_from are checked too."""

    name = "task"
    directory = "tasks.d"
    option = "--tasks-dir"
    model = TaskSpec
    empty = "empty task file; add [trigger] and [target] tables"
    title = "reconciler task file"
    description = (
        "One TOML file under tasks.d/: one scheduled HTTP call. Checks keys, types and ranges; "
        "`reconciler validate` checks the rest (cron expressions, time zones, secrets, DST)."
    )
    nested = True
    within = "the tasks directory"
    derived = ("moved_from",)  # a move's leftover pointer, once the move is applied

    def absent(self, root: str, directory: Path, required: bool) -> list[FileError]:
        return [FileError(root, 0, self.option, f"directory not found; create it or pass {self.option}")]

    def prepare(self, data: dict[str, Any], error: ErrorAt) -> tuple[dict[str, Any], list[FileError]]:
        if "calendars" not in data:  # the model's field the reconciler binds (TaskSpec.calendars)
            return data, []
        refused = error(("calendars",), NOT_A_KEY)
        return {key: value for key, value in data.items() if key != "calendars"}, [refused]

    def finish(
        self,
        item_id: str,
        display: str,
        source: str,
        checked: Checked,
        digest: str | None,
    ) -> tuple[Task | None, list[FileError]]:
        """Every problem of the file comes in one pass, in line order: values no model may see,
        field errors, checks across fields and the trigger's window times."""
        spec, data, errors, error = checked.spec, checked.data, checked.errors, checked.error
        checkable = _checkable_trigger(data) if spec is None else None
        if spec is not None:
            try:
                schedule = compile_schedule(spec)
            except TriggerError:
                checkable = spec.trigger, ZoneInfo(spec.timezone)
            else:
                if not errors:
                    return Task(item_id, display, source, (spec, schedule), digest=digest), []
        if checkable is not None:
            for found in trigger_instants(*checkable)[1]:
                errors.append(error(tuple(found.key.split(".")), found.message, found.key))
        return None, sorted(errors, key=lambda e: e.line)

    def across(self, items: list[Task], present: set[str]) -> list[FileError]:
        return _duplicate_ids(items, present)

    def stand_in(self, file_id: str, display: str, source: str, digest: str, known: Mapping[str, Any]) -> Task | None:
        stored = known.get(file_id)
        if stored is None or stored.digest != digest:
            return None
        return Task(file_id, display, source.removeprefix(BOM), stored=stored, digest=digest)


TASKS = TaskKind()


def load_text(
    task_id: str, display: str, source: str, digest: str | None = None
) -> tuple[Task | None, list[FileError]]:
    """Validate one file's text (`digest`: its file_digest(), kept on the task for apply to store)."""
    return validate(TASKS, task_id, display, source, digest)


def validate_data(
    task_id: str, display: str, data: dict[str, Any], source: str = "", digest: str | None = None
) -> tuple[Task | None, list[FileError]]:
    """Validate parsed TOML data (also used for specs read back from the database)."""
    return check_data(TASKS, task_id, display, data, source, digest)


@cache
def _triggerspec_adapter() -> TypeAdapter[Trigger]:
    return TypeAdapter(Trigger)


def _checkable_trigger(data: dict[str, Any]) -> tuple[Trigger, ZoneInfo] | None:
    """The trigger and zone of a file that failed elsewhere, when both are valid on their own."""
    zone = data.get("timezone", "UTC")
    if not isinstance(zone, str) or zone_problem(zone):
        return None
    try:
        return _triggerspec_adapter().validate_python(data.get("trigger")), ZoneInfo(zone)
    except ValidationError:
        return None


class TaskFiles(DirFiles[Task]):
    """A tasks directory read but not parsed (see DirFiles)."""

    def load(self, known: Mapping[str, Stored] | None = None) -> LoadResult:
        """Parse and validate every file, except those `known` holds with their digest (see DirFiles.check)."""
        tasks, errors = self.check(known)
        failed = self.failed(errors)
        by_path: dict[str, list[FileError]] = {}
        for error in errors:
            by_path.setdefault(error.path, []).append(error)
        partial = [
            unparsed(file.id, file.path, file.source, by_path.get(file.path, []))
            for file in self.files
            if file.id in failed and self.kind.name_error(file.id, file.path) is None
        ]
        return LoadResult(tasks, errors, [found for found in partial if found is not None])


def read_files(tasks_dir: Path, display_root: str | None = None) -> TaskFiles:
    """Read and digest every task file under `tasks_dir` (nothing is parsed); collect the errors of the rest."""
    files = read_dir(TASKS, tasks_dir, display_root, into=TaskFiles)
    assert isinstance(files, TaskFiles)
    return files


def load_dir(tasks_dir: Path, display_root: str | None = None) -> LoadResult:
    """Load and validate every task file under `tasks_dir`; collect all errors."""
    return read_files(tasks_dir, display_root).load()


def fire_warnings(tasks: Iterable[Task], now: datetime) -> list[FileWarning]:
    """A warning per task that cannot fire in the ten years after `now` (a past `once`, an ended window, 30
    February), and per `business_day` task with months of the next two years that have no such day."""
    warnings = []
    for task in tasks:
        found = never_fires(task.spec, task.schedule, now)
        if found is None:
            found = _short_months(task.spec, now)
        if found is not None:
            key, message = found
            warnings.append(FileWarning(task.path, task.line_of(*key.split(".")), key, message))
    return warnings


def _short_months(spec: TaskSpec, now: datetime) -> tuple[str, str] | None:
    trigger = spec.trigger
    if not isinstance(trigger, BusinessDayTrigger) or not spec.calendars:
        return None
    days = BusinessDays.stored(trigger.business_days, spec.calendars[trigger.business_days])
    short = months_without(days, trigger.day, now.astimezone(ZoneInfo(spec.timezone)).date())
    if not short:
        return None
    shown = ", ".join(short[:6]) + (f" and {len(short) - 6} more" if len(short) > 6 else "")
    return "trigger.day", (
        f"day = {trigger.day}: {len(short)} month(s) of the next two years have fewer business days of calendar "
        f"{trigger.business_days!r} ({shown}), so this task does not fire then; a day nearer the month's "
        "start or end fires every month"
    )


def _duplicate_ids(tasks: list[Task], present: set[str]) -> list[FileError]:
    errors: list[FileError] = []
    claimed: dict[str, str] = {}
    for task in tasks:
        old = task.moved_from
        if old is None:
            continue
        line = task.line_of("moved_from")
        if old == task.id:
            errors.append(FileError(task.path, line, "moved_from", "moved_from names the task itself; remove it"))
        elif old in present:
            errors.append(
                FileError(
                    task.path, line, "moved_from", f"{old!r} still exists as a file; delete it or drop moved_from"
                )
            )
        elif old in claimed:
            errors.append(
                FileError(task.path, line, "moved_from", f"{old!r} is already moved to {claimed[old]!r}; keep one")
            )
        else:
            claimed[old] = task.id
    return errors
