"""tasks.d → (tasks, errors). Never raises on user input; every file is checked."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from reconciler.models import TaskSpec, id_problem
from reconciler.triggers import Schedule, TriggerError, compile_schedule

TAG_NAMES = {"cron", "interval", "calendar", "once", "bearer", "basic", "oauth2_client_credentials"}


@dataclass(frozen=True, slots=True)
class FileError:
    """One user mistake, rendered `path:LINE: key.path: message`."""

    path: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.key}: {self.message}"


@dataclass(frozen=True)
class Task:
    """A validated task file."""

    id: str
    path: str
    spec: TaskSpec
    schedule: Schedule = field(compare=False, repr=False)
    source: str = field(default="", compare=False, repr=False)

    def line_of(self, *key: str) -> int:
        """The file line of a key path (0 when unknown); computed only when an error needs it."""
        return locate(key_lines(self.source), key)

    @cached_property
    def normalized(self) -> dict[str, Any]:
        """The spec as stored in the database."""
        return self.spec.normalized()

    @cached_property
    def spec_hash(self) -> str:
        """A stable hash of the normalized spec."""
        return spec_hash(self.normalized)


def spec_hash(normalized: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a normalized spec."""
    canonical = json.dumps(normalized, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class LoadResult:
    tasks: list[Task]
    errors: list[FileError]

    @property
    def ok(self) -> bool:
        return not self.errors


# ---------------------------------------------------------------- locating keys


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEYVAL = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")


def _split_key(text: str) -> list[str]:
    parts = re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", text)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


def key_lines(source: str) -> dict[tuple[str, ...], int]:
    """Map each dotted key path found in a TOML text to its 1-based line (tables and keys)."""
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(source.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = tuple(_split_key(header.group(1)))
            found.setdefault(table, number)
            continue
        keyval = _KEYVAL.match(line)
        if keyval:
            path = table + tuple(_split_key(keyval.group(1)))
            found.setdefault(path, number)
            # Keys of an inline table on this line: `headers = { X-Api-Key = {...} }`.
            rest = line[keyval.end() :]
            for inner in re.finditer(r"""([A-Za-z0-9_-]+|"[^"]*")\s*=""", rest):
                found.setdefault((*path, inner.group(1).strip("\"'")), number)
    return found


def locate(lines: dict[tuple[str, ...], int], key: tuple[str, ...]) -> int:
    """The line of the longest prefix of `key` present in the file, else 0."""
    for size in range(len(key), 0, -1):
        if key[:size] in lines:
            return lines[key[:size]]
    return 0


# ---------------------------------------------------------------- pydantic errors


def _clean_loc(loc: tuple[int | str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for part in loc:
        text = str(part)
        # Discriminated unions put the tag into the location: trigger.cron.expr → trigger.expr.
        if text in TAG_NAMES and out and out[-1] in ("trigger", "auth"):
            continue
        if text == "json_body":
            text = "json"
        out.append(text)
    return tuple(out)


def _message(error: Any, spec_fields: dict[tuple[str, ...], list[str]], loc: tuple[str, ...]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = spec_fields.get(tuple(str(part) for part in error["loc"][:-1]))
        hint = f"; allowed here: {', '.join(allowed)}" if allowed else ""
        return f"unknown key {loc[-1]!r}{hint}"
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        return f"unknown kind {error['input'].get('kind')!r}; use one of {error['ctx']['expected_tags']}"
    if kind == "union_tag_not_found":
        return f"missing kind; use one of {error['ctx']['discriminator']}"
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    if "input" in error and kind.endswith("_type"):
        message += f" (got {type(error['input']).__name__})"
    return message


def _allowed_keys() -> dict[tuple[str, ...], list[str]]:
    """Allowed keys per raw pydantic location (discriminated unions keep their tag)."""
    from reconciler import models

    def names(model: type[models.Model]) -> list[str]:
        return sorted(info.alias or name for name, info in model.model_fields.items())

    allowed = {(): names(models.TaskSpec), ("target",): names(models.Target), ("policy",): names(models.Policy)}
    for trigger in (models.CronTrigger, models.IntervalTrigger, models.CalendarTrigger, models.OnceTrigger):
        allowed[("trigger", trigger.model_fields["kind"].annotation.__args__[0])] = names(trigger)  # type: ignore[union-attr]
    for auth in (models.BearerAuth, models.BasicAuth, models.OAuth2ClientCredentials):
        allowed[("target", "auth", auth.model_fields["kind"].annotation.__args__[0])] = names(auth)  # type: ignore[union-attr]
    return allowed


# ---------------------------------------------------------------- loading


def task_id_for(tasks_dir: Path, path: Path) -> str:
    """`tasks.d/billing/invoices.toml` → `billing/invoices`."""
    return path.relative_to(tasks_dir).with_suffix("").as_posix()


def discover(tasks_dir: Path) -> list[Path]:
    """Task files below `tasks_dir`, sorted; names starting with `_` or `.` are skipped."""
    found = []
    for path in tasks_dir.rglob("*.toml"):
        relative = path.relative_to(tasks_dir)
        if any(part.startswith(("_", ".")) for part in relative.parts):
            continue
        if path.is_file():
            found.append(path)
    return sorted(found)


def load_text(task_id: str, display: str, source: str) -> tuple[Task | None, list[FileError]]:
    """Validate one file's text."""
    problem = id_problem(task_id)
    if problem:
        return None, [FileError(display, 0, "id", f"{problem}; rename the file")]
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        text = str(exc)
        where = re.search(r"\(at line (\d+), column (\d+)\)", text)
        line = int(where.group(1)) if where else 0
        if "(at end of document)" in text:
            line = len(source.splitlines()) or 1
        reason = re.sub(r"\s*\(at .*\)$", "", text)
        col = f", column {where.group(2)}" if where else ""
        return None, [FileError(display, line, "toml", f"syntax error{col}: {reason}; fix the TOML syntax")]
    return validate_data(task_id, display, data, source)


def validate_data(
    task_id: str, display: str, data: dict[str, Any], source: str = ""
) -> tuple[Task | None, list[FileError]]:
    """Validate parsed TOML data (also used for specs read back from the database)."""
    if not data:
        return None, [FileError(display, 0, "(file)", "empty task file; add [trigger] and [target] tables")]
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        allowed = _allowed_keys()
        errors = []
        for error in exc.errors():
            loc = _clean_loc(error["loc"])
            key = ".".join(loc) if loc else "(file)"
            errors.append(FileError(display, locate(key_lines(source), loc), key, _message(error, allowed, loc)))
        return None, errors
    try:
        schedule = compile_schedule(spec)
    except TriggerError as exc:
        loc = tuple(exc.key.split("."))
        return None, [FileError(display, locate(key_lines(source), loc), exc.key, exc.message)]
    return Task(task_id, display, spec, schedule, source), []


def load_dir(tasks_dir: Path, display_root: str | None = None) -> LoadResult:
    """Load and validate every task file under `tasks_dir`; collect all errors."""
    root = display_root if display_root is not None else str(tasks_dir)
    if not tasks_dir.is_dir():
        return LoadResult([], [FileError(root, 0, "--tasks-dir", "directory not found; create it or pass --tasks-dir")])
    tasks: list[Task] = []
    errors: list[FileError] = []
    for path in discover(tasks_dir):
        display = f"{root.rstrip('/')}/{path.relative_to(tasks_dir).as_posix()}"
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(FileError(display, 0, "(file)", f"cannot read file: {exc}"))
            continue
        task, problems = load_text(task_id_for(tasks_dir, path), display, source)
        errors.extend(problems)
        if task is not None:
            tasks.append(task)
    errors.extend(_duplicate_ids(tasks, {t.id for t in tasks} | _ids_with_errors(tasks_dir, errors, root)))
    return LoadResult(tasks, errors)


def _ids_with_errors(tasks_dir: Path, errors: list[FileError], root: str) -> set[str]:
    prefix = root.rstrip("/") + "/"
    return {e.path[len(prefix) :].removesuffix(".toml") for e in errors if e.path.startswith(prefix)}


def _duplicate_ids(tasks: list[Task], present: set[str]) -> list[FileError]:
    errors: list[FileError] = []
    claimed: dict[str, str] = {}
    for task in tasks:
        old = task.spec.moved_from
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
