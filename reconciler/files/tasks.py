"""tasks.d → (tasks, errors). Never raises on user input; every file is checked."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from pydantic import TypeAdapter, ValidationError

from reconciler.errors import as_bytes, is_utf8
from reconciler.schedule.triggers import Schedule, TriggerError, compile_schedule, never_fires, trigger_instants
from reconciler.spec.model import did_you_mean, suggestion
from reconciler.spec.task import TaskSpec
from reconciler.spec.trigger import Trigger
from reconciler.spec.values import id_problem, zone_problem

if TYPE_CHECKING:
    from reconciler.files.notifiers import Notifiers

TAG_NAMES = {"cron", "interval", "calendar", "once", "bearer", "basic", "oauth2_client_credentials"}
MAX_FILE_BYTES = 1 << 20  # 1 MiB: a task file is a few hundred bytes; this bounds parse time and stored size
MAX_DEPTH = 32  # nesting of tables and arrays: bounds every recursive step after the parse
INT64 = 1 << 63  # TOML integers are 64-bit (tomllib reads any size)
TOO_BIG = f"larger than {MAX_FILE_BYTES // 1024} KiB; a task or notifier file is one small TOML document"
BOM = "\ufeff"  # a UTF-8 byte order mark, as some Windows editors write: not part of the text
NUL_MESSAGE = "contains a NUL character (\\u0000), which PostgreSQL cannot store; remove it"


@dataclass(frozen=True, slots=True)
class FileError:
    """One user mistake, rendered `path:LINE: key.path: message`."""

    path: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        return f"{printable(self.path)}:{self.line}: {printable(self.key)}: {printable(self.message)}"


@dataclass(frozen=True, slots=True)
class FileWarning(FileError):
    """Something valid that will not do what the file seems to want, rendered `path:LINE: warning: key: message`."""

    def __str__(self) -> str:
        return f"{printable(self.path)}:{self.line}: warning: {printable(self.key)}: {printable(self.message)}"


def printable(text: str) -> str:
    """`text` with control and other unprintable characters escaped, so an error stays one line; a byte
    of a name that is not UTF-8 (a lone surrogate, as Python reads one) shows as the byte, `\\xff`."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def _escaped(char: str) -> str:
    if "\udc80" <= char <= "\udcff":
        return as_bytes(char)
    return char.encode("unicode_escape").decode("ascii")


@dataclass(frozen=True, slots=True)
class Stored:
    """What a file parsed to when it was applied: all a plan reads of a task whose file is unchanged since."""

    digest: str  # file_digest() of the file as it was applied
    spec_hash: str
    enabled: bool
    timezone: str
    moved_from: str | None


@dataclass(frozen=True)
class Task:
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

    def line_of(self, *key: str) -> int:
        """The file line of a key path (0 when unknown); computed only when an error needs it."""
        return locate(key_lines(self.source), key)

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
    def normalized(self) -> dict[str, Any]:
        """The spec as stored in the database."""
        return self.spec.normalized()

    @cached_property
    def canonical(self) -> str:
        """The normalized spec as canonical JSON: what spec_hash hashes, and what apply stores."""
        return canonical_json(self.normalized)

    @cached_property
    def spec_hash(self) -> str:
        """A stable hash of the normalized spec."""
        return self.stored.spec_hash if self.stored is not None else _sha256(self.canonical)


def canonical_json(normalized: dict[str, Any]) -> str:
    """A normalized spec as JSON text with sorted keys and no spaces: the same spec, the same text."""
    return json.dumps(normalized, sort_keys=True, separators=(",", ":"))


def _sha256(canonical: str) -> str:
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def spec_hash(normalized: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a normalized spec."""
    return _sha256(canonical_json(normalized))


@dataclass
class LoadResult:
    tasks: list[Task]
    errors: list[FileError]
    notifiers: Notifiers | None = None  # notifiers.d, when the command reads it (see commands.load_or_report)

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
        if text == "[key]":  # a dict key's own error: the key path already ends with it
            continue
        if text == "json_body":
            text = "json"
        out.append(text)
    return tuple(out)


def key_path(loc: tuple[str, ...]) -> str:
    """`target.headers.X-Api-Key`; an empty key shows as "", no key at all as (file)."""
    return ".".join(part or '""' for part in loc) or "(file)"


def _quoted(text: str) -> list[str]:
    """The 'quoted' words of a pydantic message: the choices of a literal or a tagged union."""
    return re.findall(r"'([^']*)'", text)


def _allowed_here(error: Any, spec_fields: dict[tuple[str, ...], list[str]]) -> list[str]:
    """The keys allowed next to an unknown one; a location no model is listed for is inside `{ env = "NAME" }`."""
    return spec_fields.get(tuple(str(part) for part in error["loc"][:-1]), ["env"])


def _misspelt(errors: list[Any], spec_fields: dict[tuple[str, ...], list[str]]) -> set[tuple[str, ...]]:
    """Key paths an unknown key probably meant (`tokn` → `token`): their "missing" errors say nothing more."""
    meant = set()
    for error in errors:
        if error["type"] == "extra_forbidden":
            loc = _clean_loc(error["loc"])
            found = did_you_mean(loc[-1], _allowed_here(error, spec_fields))
            if found is not None:
                meant.add((*loc[:-1], found))
    return meant


# pydantic's bound errors → (their context's key, the words of "must be …")
BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "less_than_equal": ("le", "at most"),
    "greater_than": ("gt", "more than"),
    "less_than": ("lt", "less than"),
}


def _message(error: Any, spec_fields: dict[tuple[str, ...], list[str]], loc: tuple[str, ...]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_here(error, spec_fields)
        hint = suggestion(loc[-1], allowed)
        listed = ", ".join(allowed)
        return (
            f"unknown key {loc[-1]!r}{hint} (allowed here: {listed})"
            if hint
            else f"unknown key {loc[-1]!r}; allowed here: {listed}"
        )
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        tags = error["ctx"]["expected_tags"]
        hint = suggestion(str(error["ctx"]["tag"]), _quoted(tags))
        return (
            f"unknown kind {error['input'].get('kind')!r}{hint} (kinds: {tags})"
            if hint
            else f"unknown kind {error['input'].get('kind')!r}; use one of {tags}"
        )
    if kind == "union_tag_not_found":
        tags = [key[-1] for key in spec_fields if key[:-1] == loc[:-1] and len(key) == len(loc)]
        return f"missing kind; use one of {', '.join(map(repr, tags))}" if tags else "missing kind"
    if kind in BOUNDS:
        bound, words = BOUNDS[kind]
        return f"must be {words} {error['ctx'][bound]} (got {error['input']!r})"
    if kind in ("too_long", "string_too_long"):
        unit = "characters" if kind == "string_too_long" else "entries"
        got = error["ctx"].get("actual_length")
        return f"may have at most {error['ctx']['max_length']} {unit}" + (f" (got {got})" if got is not None else "")
    message = str(error["msg"])
    if kind == "literal_error" and isinstance(error.get("input"), str):
        message += suggestion(error["input"], _quoted(error["ctx"]["expected"]))
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    if "input" in error and kind.endswith("_type"):
        message += f" (got {type(error['input']).__name__})"
    return message


def _allowed_keys() -> dict[tuple[str, ...], list[str]]:
    """Allowed keys per raw pydantic location (discriminated unions keep their tag)."""
    from reconciler.spec import model as base
    from reconciler.spec import target, task
    from reconciler.spec import trigger as triggers

    def names(model: type[base.Model]) -> list[str]:
        return sorted(info.alias or name for name, info in model.model_fields.items())

    allowed = {
        (): names(task.TaskSpec),
        ("target",): names(target.Target),
        ("policy",): names(task.Policy),
        ("notify",): names(task.Notify),
    }
    for trigger in (triggers.CronTrigger, triggers.IntervalTrigger, triggers.CalendarTrigger, triggers.OnceTrigger):
        allowed[("trigger", trigger.model_fields["kind"].annotation.__args__[0])] = names(trigger)  # type: ignore[union-attr]
    for auth in (target.BearerAuth, target.BasicAuth, target.OAuth2ClientCredentials):
        allowed[("target", "auth", auth.model_fields["kind"].annotation.__args__[0])] = names(auth)  # type: ignore[union-attr]
    return allowed


# ---------------------------------------------------------------- loading


@dataclass(frozen=True, slots=True)
class Entry:
    """A `*.toml` entry below the tasks directory; `problem` says why it cannot be read as a task file."""

    path: Path
    problem: str | None = None


def _ignored(name: str) -> bool:
    return name.startswith(("_", "."))


def _link_problem(path: Path, root: Path, what: str) -> str | None:
    """Why the symlink `path` cannot stand for a task file below `root` (resolved), or None."""
    try:
        real = path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 reports a loop this way, later versions as ELOOP
        return "is a symlink loop; remove it"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop; remove it"
        if exc.errno == errno.ENOENT:
            return "is a broken symlink; remove it or fix its target"
        return f"cannot follow symlink ({exc.strerror})"
    if not real.is_relative_to(root):
        return f"is a symlink to a path outside {what}; copy the file in instead"
    if real.is_dir():
        return "is a symlink to a directory, which is not followed; move or link the files themselves"
    return None


NAME_NOT_UTF8 = "the name is not UTF-8 text; rename it (ids, paths and the database are UTF-8)"
DIRECTORY_NAMED_TOML = "is a directory, not a task file; rename it (the files in it are loaded)"


def scan(tasks_dir: Path, what: str = "the tasks directory") -> list[Entry]:
    """Every `*.toml` entry below `tasks_dir`, sorted, each with its problem if any; `_`/`.` names are skipped.

    Nothing is skipped silently: a directory named `*.toml`, a broken or looping symlink, a
    symlink leading outside `tasks_dir`, a symlinked directory and an unreadable directory
    are entries with a problem, so a plan refuses instead of pruning the tasks behind them.
    """
    root = tasks_dir.resolve()
    entries: list[Entry] = []
    folders = [tasks_dir]
    while folders:  # os.walk's order does not matter (sorted below); its lstat per file costs a tenth of a load
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                items = list(listing)
        except OSError as exc:
            entries.append(Entry(folder, f"cannot list directory ({exc.strerror})"))
            continue
        for item in items:
            name = item.name
            if _ignored(name):
                continue
            path = folder / name
            if _is_dir(item):
                if not is_utf8(name):  # not walked: every file below would have the same problem
                    entries.append(Entry(path, NAME_NOT_UTF8))
                    continue
                if item.is_symlink():  # reported, never walked, so no loop can recur
                    entries.append(Entry(path, _link_problem(path, root, what) or "is a symlink to a directory"))
                    continue
                if name.endswith(".toml"):
                    entries.append(Entry(path, DIRECTORY_NAMED_TOML))
                folders.append(path)
            elif name.endswith(".toml"):
                if not is_utf8(name):
                    entries.append(Entry(path, NAME_NOT_UTF8))
                    continue
                entries.append(Entry(path, _link_problem(path, root, what) if item.is_symlink() else None))
    return sorted(entries, key=lambda entry: entry.path.parts)  # as paths sort, without a Path comparison per step


def _is_dir(item: os.DirEntry[str]) -> bool:
    """Whether a listed entry is a directory or a symlink to one (a broken or looping symlink is not)."""
    try:
        return item.is_dir()
    except OSError:
        return False


def discover(tasks_dir: Path) -> list[Path]:
    """Readable-looking task files below `tasks_dir`, sorted (`scan` also lists the entries that are not)."""
    return [entry.path for entry in scan(tasks_dir) if entry.problem is None]


class UnreadableSource(ValueError):
    """Why a file cannot be a task file; `line` is where the problem is (0: the whole file)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


def read_bytes(path: Path) -> bytes:
    """A task file's bytes; raises OSError, or UnreadableSource (a ValueError) saying why it cannot be a task file."""
    # O_NONBLOCK: opening a FIFO named *.toml must not hang; fstat then refuses it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableSource("not a regular file (a FIFO, socket or device); remove it")
        # Reads sized by fstat: one of MAX_FILE_BYTES would allocate that much for every file. Read on
        # to the end (or past the limit): the file may have grown since.
        chunks: list[bytes] = []
        size, want = 0, min(info.st_size, MAX_FILE_BYTES) + 1
        while size <= MAX_FILE_BYTES and (chunk := os.read(fd, want)):
            chunks.append(chunk)
            size += len(chunk)
            want = min(1 << 16, MAX_FILE_BYTES + 1 - size)
    finally:
        os.close(fd)
    if size > MAX_FILE_BYTES:
        raise UnreadableSource(TOO_BIG)
    return b"".join(chunks)


def decode_source(data: bytes) -> str:
    """A task file's bytes as text (a UTF-8 byte order mark is kept: load_text drops it); raises UnreadableSource."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UnreadableSource(
            "not UTF-8 text but UTF-16 (it starts with a UTF-16 byte order mark); save the file as UTF-8", 1
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        column = len(data[line_start : exc.start].decode("utf-8", "replace")) + 1
        raise UnreadableSource(
            f"not UTF-8 text: byte 0x{data[exc.start]:02X} in column {column} cannot be read as UTF-8 ({exc.reason}); "
            "save the file as UTF-8",
            data.count(b"\n", 0, exc.start) + 1,
        ) from None


def load_text(
    task_id: str, display: str, source: str, digest: str | None = None
) -> tuple[Task | None, list[FileError]]:
    """Validate one file's text (`digest`: its file_digest(), kept on the task for apply to store)."""
    source = source.removeprefix(BOM)
    problem = id_problem(task_id)
    if problem:
        return None, [FileError(display, 0, "id", f"{problem}; rename the file")]
    data, problems = parse_toml(display, source)
    if data is None:
        return None, problems
    return validate_data(task_id, display, data, source, digest)


def parse_toml(display: str, source: str) -> tuple[dict[str, Any] | None, list[FileError]]:
    """A file's text as TOML data, or the one-line error that says why it is not."""
    if len(source) > MAX_FILE_BYTES:
        return None, [FileError(display, 0, "(file)", TOO_BIG)]
    try:
        return tomllib.loads(source), []
    except RecursionError:
        line = _deep_line(source)
        return None, [FileError(display, line, "toml", f"nested more than {MAX_DEPTH} levels deep; flatten it")]
    except tomllib.TOMLDecodeError as exc:
        text = str(exc)
        where = re.search(r"\(at line (\d+), column (\d+)\)", text)
        line = int(where.group(1)) if where else 0
        if "(at end of document)" in text:
            line = len(source.splitlines()) or 1
        reason = re.sub(r"\s*\(at .*\)$", "", text)
        col = f", column {where.group(2)}" if where else ""
        return None, [FileError(display, line, "toml", f"syntax error{col}: {reason}; fix the TOML syntax")]
    except ValueError:  # int() refuses a literal of more than 4300 digits
        where = re.search(r"\d{4300}", source)
        line = source.count("\n", 0, where.start()) + 1 if where else 0
        return None, [FileError(display, line, "toml", "integer out of range; TOML integers are 64-bit")]


def _deep_line(source: str) -> int:
    """The line where bracket nesting first exceeds MAX_DEPTH (strings not excluded: a hint for the error)."""
    depth = 0
    for index, char in enumerate(source):
        depth += char in "[{"
        depth -= char in "]}"
        if depth > MAX_DEPTH:
            return source.count("\n", 0, index) + 1
    return 0


def hostile_values(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """(key path, message) for values no model may see: too deep, NUL, NaN/infinity, integers beyond 64 bits."""
    if len(path) > MAX_DEPTH:
        yield path, f"nested more than {MAX_DEPTH} levels deep; flatten it"
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\0" in key:
                yield (*path, key), "the key " + NUL_MESSAGE
            else:
                yield from hostile_values(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from hostile_values(item, (*path, str(index)))
    elif isinstance(value, str):
        if "\0" in value:
            yield path, NUL_MESSAGE
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield path, f"{value} is not a finite number; write a number such as 1.5"
    elif isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        yield path, "integer out of range; TOML integers are 64-bit"


def defused(value: Any, depth: int = 0) -> Any:
    """A copy of parsed TOML with each value `hostile_values` reports made harmless, so the models check the rest."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, dict):
        return {key: defused(item, depth + 1) for key, item in value.items() if "\0" not in key}
    if isinstance(value, list):
        return [defused(item, depth + 1) for item in value]
    if isinstance(value, str):
        return value.replace("\0", "")
    if isinstance(value, float) and not math.isfinite(value):
        return 0.0
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        return 0
    return value


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


ErrorAt = Callable[[tuple[str, ...], str], FileError]  # (key path, message) → the file's error at that key


def model_errors(
    exc: ValidationError, allowed: dict[tuple[str, ...], list[str]], defused: list[tuple[str, ...]], error: ErrorAt
) -> list[FileError]:
    """A model's validation errors as the file's errors (`defused`: key paths already reported as hostile)."""
    errors = []
    problems = exc.errors()
    misspelt = _misspelt(problems, allowed)
    for problem in problems:
        loc = _clean_loc(problem["loc"])
        if problem["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = (*loc, "kind")
        if problem["type"] == "missing" and loc in misspelt:
            continue  # "unknown key 'tokn'; did you mean 'token'?" says it
        # An unknown key is about the key, not the value: reported even when the value was defused.
        if problem["type"] == "extra_forbidden" or not any(loc[: len(bad)] == bad for bad in defused):
            errors.append(error(loc, _message(problem, allowed, loc)))
    return errors


def validate_data(
    task_id: str, display: str, data: dict[str, Any], source: str = "", digest: str | None = None
) -> tuple[Task | None, list[FileError]]:
    """Validate parsed TOML data (also used for specs read back from the database).

    Every problem of the file comes in one pass, in line order: values no model may see,
    field errors, checks across fields and the trigger's window times.
    """
    if not data:
        return None, [FileError(display, 0, "(file)", "empty task file; add [trigger] and [target] tables")]
    lines: dict[tuple[str, ...], int] | None = None

    def error(loc: tuple[str, ...], message: str, key: str | None = None) -> FileError:
        nonlocal lines
        if lines is None:
            lines = key_lines(source)
        return FileError(display, locate(lines, loc), key_path(loc) if key is None else key, message)

    hostile = list(hostile_values(data))
    errors = [error(loc, message) for loc, message in hostile]
    if hostile:  # the models see a defused copy; their errors about those values are dropped
        data = defused(data)
    spec: TaskSpec | None = None
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        errors += model_errors(exc, _allowed_keys(), [bad for bad, _ in hostile], error)
    checkable = _checkable_trigger(data) if spec is None else None
    if spec is not None:
        try:
            schedule = compile_schedule(spec)
        except TriggerError:
            checkable = spec.trigger, ZoneInfo(spec.timezone)
        else:
            if not errors:
                return Task(task_id, display, source, (spec, schedule), digest=digest), []
    if checkable is not None:
        for found in trigger_instants(*checkable)[1]:
            errors.append(error(tuple(found.key.split(".")), found.message, found.key))
    return None, sorted(errors, key=lambda e: e.line)


# ---------------------------------------------------------------- unchanged files

# Bump when a change to models.py, loader.py or triggers.py changes what some file parses to, or
# whether it parses: every file's digest changes with it, so each file is parsed again once.
PARSER_VERSION = 1


@cache
def parser_key() -> bytes:
    """Everything besides a file's id and bytes that its parse depends on: the versions of reconciler,
    its parser, Python, pydantic and croniter, and of the time zone data (a zone's new rules can put
    a `once` into a gap)."""
    import sys
    import zoneinfo

    import pydantic
    from croniter import croniter

    from reconciler import __version__

    # croniter has no __version__, and importlib.metadata costs `validate` 40 ms to import: its code stands in.
    cron_file = sys.modules[croniter.__module__].__file__
    cron_code = hashlib.sha256(Path(cron_file).read_bytes()).hexdigest() if cron_file else "unknown"
    # The package's own code, every module: a change that forgets PARSER_VERSION still re-parses.
    package = Path(__file__).parent
    code = hashlib.sha256(b"".join(path.read_bytes() for path in sorted(package.glob("*.py")))).hexdigest()
    parts = [f"reconciler {__version__} parser {PARSER_VERSION} code {code}", f"python {sys.version}"]
    parts += [f"pydantic {pydantic.VERSION}", f"croniter {cron_code}"]
    for folder in zoneinfo.TZPATH:  # the first folder with an index names the system's tz data version
        index = Path(folder, "tzdata.zi")
        if index.is_file():
            with index.open() as lines:
                parts.append(f"{folder} {lines.readline().strip()}")
            break
    try:
        import tzdata  # type: ignore[import-untyped]  # the fallback ZoneInfo reads when a zone is not in TZPATH

        parts.append(f"tzdata {tzdata.IANA_VERSION}")
    except ImportError:
        pass
    return "\n".join(parts).encode() + b"\0"


def file_digest(task_id: str, data: bytes) -> str:
    """sha256 of a task file's bytes, its id and parser_key(): the same digest, the same parse."""
    return hashlib.sha256(parser_key() + task_id.encode() + b"\0" + data).hexdigest()


@dataclass(frozen=True, slots=True)
class TaskFile:
    """A task file read but not parsed."""

    id: str
    path: str  # as displayed
    source: str
    digest: str


@dataclass
class TaskFiles:
    """A tasks directory read but not parsed: its readable files, and an error for every entry that is not one."""

    root: str
    files: list[TaskFile]
    errors: list[FileError]
    order: dict[str, int]  # display path → place in the directory: errors are reported file by file

    def digests(self) -> dict[str, str]:
        """{id: digest} of the files that can be tasks: an id with a problem cannot (nor be sent to PostgreSQL,
        which refuses a file name that is not UTF-8)."""
        return {f.id: f.digest for f in self.files if id_problem(f.id) is None}

    def load(self, known: Mapping[str, Stored] | None = None) -> LoadResult:
        """Parse and validate every file, except those `known` holds with their digest: they stand on what they
        parsed to when applied, which is what they parse to now (the digest covers all the parse depends on)."""
        known = known or {}
        tasks: list[Task] = []
        errors = list(self.errors)
        for file in self.files:
            stored = known.get(file.id)
            if stored is not None and stored.digest == file.digest:
                tasks.append(Task(file.id, file.path, file.source.removeprefix(BOM), stored=stored, digest=file.digest))
                continue
            task, problems = load_text(file.id, file.path, file.source, file.digest)
            errors.extend(problems)
            if task is not None:
                tasks.append(task)
        errors.extend(_duplicate_ids(tasks, {t.id for t in tasks} | _ids_with_errors(errors, self.root)))
        # File by file, each in line order (the moved_from checks come last otherwise).
        errors.sort(key=lambda e: (self.order.get(e.path, len(self.order)), e.line))
        return LoadResult(tasks, errors)


def read_files(tasks_dir: Path, display_root: str | None = None) -> TaskFiles:
    """Read and digest every task file under `tasks_dir` (nothing is parsed); collect the errors of the rest."""
    root = display_root if display_root is not None else str(tasks_dir)
    if not tasks_dir.is_dir():
        missing = FileError(root, 0, "--tasks-dir", "directory not found; create it or pass --tasks-dir")
        return TaskFiles(root, [], [missing], {})
    files: list[TaskFile] = []
    errors: list[FileError] = []
    order: dict[str, int] = {}
    depth = len(tasks_dir.parts)
    for entry in scan(tasks_dir):
        relative = "/".join(entry.path.parts[depth:])  # what relative_to gives, at a fraction of its cost
        display = f"{root.rstrip('/')}/{relative}" if relative else root
        order.setdefault(display, len(order))
        if entry.problem is not None:
            errors.append(FileError(display, 0, "(file)", entry.problem))
            continue
        try:
            data = read_bytes(entry.path)
            source = decode_source(data)
        except OSError as exc:
            errors.append(FileError(display, 0, "(file)", f"cannot read file ({exc.strerror})"))
            continue
        except ValueError as exc:
            line = exc.line if isinstance(exc, UnreadableSource) else 0
            errors.append(FileError(display, line, "(file)", str(exc)))
            continue
        task_id = relative.removesuffix(".toml")  # tasks.d/billing/invoices.toml → billing/invoices
        files.append(TaskFile(task_id, display, source, file_digest(task_id, data)))
    return TaskFiles(root, files, errors, order)


def load_dir(tasks_dir: Path, display_root: str | None = None) -> LoadResult:
    """Load and validate every task file under `tasks_dir`; collect all errors."""
    return read_files(tasks_dir, display_root).load()


def fire_warnings(tasks: Iterable[Task], now: datetime) -> list[FileWarning]:
    """A warning per task that cannot fire in the ten years after `now`: a past `once`, an ended window, 30 February."""
    warnings = []
    for task in tasks:
        found = never_fires(task.spec, task.schedule, now)
        if found is not None:
            key, message = found
            warnings.append(FileWarning(task.path, task.line_of(*key.split(".")), key, message))
    return warnings


def _ids_with_errors(errors: list[FileError], root: str) -> set[str]:
    prefix = root.rstrip("/") + "/"
    return {e.path[len(prefix) :].removesuffix(".toml") for e in errors if e.path.startswith(prefix)}


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
