"""A kind of declared file (tasks.d, notifiers.d, …): its directory, model and id rule, and the one check every
file of every kind goes through: name → TOML → values no model may see → the model → the kind's own checks.

A new kind is a model, a `Kind` subclass naming it and one registration (registry.py's KINDS); it gets the
reading, one-line errors (file, line, key, fix), unknown-key hints and digests of the others. A kind named by its
files (`NamedKind`: notifiers, calendars, limits) also carries what plan, apply, the plan's renderings, export and
`reconciler schema` do with its items: they iterate the registry and ask the kind, never name it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from reconciler.files.messages import Keys, allowed_keys, model_errors
from reconciler.files.problems import FileError, FileWarning, key_path
from reconciler.files.text import BOM, defused, hostile_values, key_lines, locate, parse_toml
from reconciler.spec.values import ID_SEGMENT, id_problem

# (key path, message, key as shown when not the path) → the file's error at that key
ErrorAt = Callable[..., FileError]
ItemT = TypeVar("ItemT", bound="DeclaredItem")
SpecT = TypeVar("SpecT", bound=BaseModel)


def canonical_json(normalized: dict[str, Any]) -> str:
    """A normalized spec as JSON text with sorted keys and no spaces: the same spec, the same text."""
    return json.dumps(normalized, sort_keys=True, separators=(",", ":"))


def hash_canonical(canonical: str) -> str:
    """The spec_hash of a spec's canonical JSON text."""
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def spec_hash(normalized: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a normalized spec."""
    return hash_canonical(canonical_json(normalized))


@dataclass(frozen=True)
class Checked:
    """A file as far as the model took it: the model (None when it refused the data), the data it saw, the errors
    so far, and the file's ErrorAt (for the kind's own checks)."""

    spec: Any
    data: dict[str, Any]
    errors: list[FileError]
    error: ErrorAt


class DeclaredItem:
    """A valid declared file of any kind: the line of a key, and its spec normalized, as canonical
    JSON and hashed (what apply stores and compares)."""

    path: str
    source: str  # the file's text, for the line of a key

    def key(self) -> str:
        """The file's id in its kind: a task's `team/name`, a notifier's name."""
        raise NotImplementedError

    def model(self) -> BaseModel:
        """The file's validated model."""
        raise NotImplementedError

    def line_of(self, *key: str) -> int:
        """The file line of a key path (0 when unknown); computed only when an error needs it."""
        return locate(key_lines(self.source), key)

    @cached_property
    def normalized(self) -> dict[str, Any]:
        """The spec as stored in the database (defaults filled in)."""
        return self.model().model_dump(mode="json", by_alias=True, exclude_none=True)

    @cached_property
    def canonical(self) -> str:
        """The normalized spec as canonical JSON: what spec_hash hashes, and what apply stores."""
        return canonical_json(self.normalized)

    @cached_property
    def spec_hash(self) -> str:
        """A stable hash of the normalized spec."""
        return hash_canonical(self.canonical)


@dataclass(frozen=True)
class NamedItem(DeclaredItem, Generic[SpecT]):
    """A valid file of a kind named by its files (`limits.d/NAME.toml`): its name, path, model and text."""

    name: str
    path: str
    spec: SpecT
    source: str = field(default="", repr=False)  # the file's text, for the line of a key

    def key(self) -> str:
        return self.name

    def model(self) -> SpecT:
        return self.spec


class Kind(Generic[ItemT]):
    """One kind of declared file. Subclasses set the class attributes and `item`; the hooks below default
    to what a kind without checks of its own needs."""

    name: ClassVar[str]  # "task": in messages ("empty task file") and `schema --kind`
    directory: ClassVar[str]  # "tasks.d": the default directory, beside the others
    option: ClassVar[str]  # "--tasks-dir": the command-line option naming the directory
    model: ClassVar[Any]  # the file's pydantic model, or a tagged union of models
    empty: ClassVar[str]  # the error of an empty file: what to write first
    title: ClassVar[str]  # the JSON Schema's title (`reconciler schema --kind NAME`)
    description: ClassVar[str]  # the JSON Schema's description: what it checks, and what `validate` checks beyond
    nested: ClassVar[bool] = False  # ids are paths below the directory (`team/name`); else file names in it
    within: ClassVar[str | None] = None  # the directory as a symlink's escape names it (None: its path)
    in_line_order: ClassVar[bool] = True  # a file's errors are sorted by line
    derived: ClassVar[tuple[str, ...]] = ()  # keys of a stored spec that apply derives: export writes none of them

    @cached_property
    def keys(self) -> Keys:
        return allowed_keys(self.model)

    @cached_property
    def adapter(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.model)

    def item(self, item_id: str, display: str, source: str, spec: Any, digest: str | None) -> ItemT:
        """A valid file as the kind's item."""
        raise NotImplementedError

    def item_id(self, relative: str) -> str:
        """The id of the file at `relative` (below the directory): `billing/invoices`, or `ops`."""
        return relative.removesuffix(".toml") if self.nested else relative.rsplit("/", 1)[-1].removesuffix(".toml")

    def name_error(self, item_id: str, display: str) -> FileError | None:
        """Why the file's name cannot be an id."""
        if self.nested:
            problem = id_problem(item_id)
            return FileError(display, 0, "id", f"{problem}; rename the file") if problem else None
        if ID_SEGMENT.fullmatch(item_id):
            return None
        message = f"a {self.name}'s file name must match [a-z0-9][a-z0-9_.-]{{0,62}}.toml; rename the file"
        return FileError(display, 0, "name", message)

    def absent(self, root: str, directory: Path, required: bool) -> list[FileError]:
        """The errors of a directory that is not there (none: the kind has no files then)."""
        if directory.exists() or directory.is_symlink():  # a file there is no "no files"
            problem = f"is not a directory; make it the directory of {self.name} files, or pass {self.option}"
            return [FileError(root, 0, "(file)", problem)]
        if required:
            return [FileError(root, 0, "(file)", f"directory not found; create it or pass another {self.option}")]
        return []

    def rewrite(self, loc: tuple[str, ...], message: str) -> tuple[tuple[str, ...], str]:
        """An error's key path and message as the file has them: a file that is a tagged union as a whole
        has its tag in `kind`, not in front of every key."""
        return (loc[1:] if loc[:1] and loc[0] in self.keys.root_tags else loc), message

    def prepare(self, data: dict[str, Any], error: ErrorAt) -> tuple[dict[str, Any], list[FileError]]:
        """The data the model sees, and errors the model cannot word well (before the model's)."""
        return data, []

    def model_error(self, found: FileError) -> FileError:
        """One of the model's errors, worded for this kind."""
        return found

    def finish(
        self,
        item_id: str,
        display: str,
        source: str,
        checked: Checked,
        digest: str | None,
    ) -> tuple[ItemT | None, list[FileError]]:
        """The item, or every problem of the file (`checked`: as far as the model took it)."""
        spec, errors = checked.spec, checked.errors
        if spec is None:
            return None, sorted(errors, key=lambda e: e.line)
        if errors:
            return None, errors
        return self.item(item_id, display, source, spec, digest), []

    def across(self, items: list[ItemT], present: set[str]) -> list[FileError]:
        """Errors across the files of a directory (`present`: every id with a file, valid or not)."""
        return []

    def stand_in(self, file_id: str, display: str, source: str, digest: str, known: Mapping[str, Any]) -> ItemT | None:
        """An item standing on what `known` holds of a file unchanged since it was applied (not parsed)."""
        return None


class NamedKind(Kind[ItemT]):
    """A kind named by its files (`limits.d/NAME.toml`), each stored whole by apply: a row per source and name with
    its normalized spec and hash. The hooks below are pure and default to what a kind without needs of its own has:
    a kind that only plan, apply and export read (no engine) is stored in `scheduler.declared` by kind."""

    table: ClassVar[str] = "declared"  # where apply keeps the items: scheduler.declared, or a table of the kind's own
    on_write: ClassVar[str | None] = None  # a named statement (queries.sql) apply runs with (source, name) after one
    on_delete: ClassVar[str | None] = None  # … and after a delete
    after_tasks: ClassVar[bool] = False  # apply writes the kind's rows after the tasks' (see apply._apply_locked)

    def current(self) -> Self:
        """The kind as a load now reads its files (a calendar resolves its holidays around this year)."""
        return self

    def columns(self, item: ItemT) -> dict[str, Any]:
        """The values of its own table's columns beside source, name, spec and spec_hash, written by every apply."""
        return {}

    def created_columns(self, item: ItemT) -> dict[str, Any]:
        """Columns written only when apply creates the row (a limit's full bucket), kept when it changes it."""
        return {}

    def summary(self, spec: Mapping[str, Any]) -> str:
        """A stored spec in one line, for a plan's created and deleted items; URLs as stored (the plan masks)."""
        return ""

    def field_line(self, path: str, old: Any, new: Any) -> str | None:
        """A changed field's line in a plan, when the kind words it its own way (None: `path: old → new`)."""
        return None

    def references(
        self, tasks: Sequence[Any], loaded: Named[ItemT], stored: Mapping[str, Mapping[str, Any]] | None
    ) -> list[FileError]:
        """Errors of tasks naming items of this kind that `loaded` lacks. A task standing on its row (its file
        unchanged since applied) is checked on its stored spec (`stored`, by id) or, without them, skipped."""
        return []

    def unused(
        self, tasks: Sequence[Any], loaded: Named[ItemT], stored: Mapping[str, Mapping[str, Any]] | None
    ) -> list[FileWarning]:
        """Warnings of valid files that no task names (a task standing on its row: by its stored spec, `stored`)."""
        return []

    def bind(self, tasks: list[Any], loaded: Named[ItemT]) -> list[Any]:
        """The tasks with what they name of this kind bound into them, once every file is valid (calendars)."""
        return tasks


@dataclass
class Named(Generic[ItemT]):
    """A directory of a kind named by its files (notifiers.d, calendars.d, limits.d) loaded: the valid items by
    name, and an error for everything else."""

    kind: NamedKind[ItemT]
    root: str
    by_name: dict[str, ItemT]
    errors: list[FileError]
    present: bool = True  # the directory exists
    invalid: set[str] = field(default_factory=set)  # names of files with errors: reported once, in their file

    @property
    def names(self) -> set[str]:
        """Every name a task may use without an error of its own (those with errors are reported in their file)."""
        return {*self.by_name, *self.invalid}


def validate(
    kind: Kind[ItemT], item_id: str, display: str, source: str, digest: str | None = None
) -> tuple[ItemT | None, list[FileError]]:
    """One file's text → the kind's item, or every problem of the file (one line each)."""
    source = source.removeprefix(BOM)
    wrong = kind.name_error(item_id, display)
    if wrong is not None:
        return None, [wrong]
    data, problems = parse_toml(display, source)
    if data is None:
        return None, problems
    return check_data(kind, item_id, display, data, source, digest)


def check_data(
    kind: Kind[ItemT], item_id: str, display: str, data: dict[str, Any], source: str = "", digest: str | None = None
) -> tuple[ItemT | None, list[FileError]]:
    """Parsed TOML data → the kind's item, or every problem of it (also used for specs read back from the
    database). Values no model may see are reported, and the model sees a harmless copy of them."""
    if not data:
        return None, [FileError(display, 0, "(file)", kind.empty)]
    lines: dict[tuple[str, ...], int] | None = None

    def error(loc: tuple[str, ...], message: str, key: str | None = None) -> FileError:
        nonlocal lines
        if lines is None:
            lines = key_lines(source)
        loc, message = kind.rewrite(loc, message)
        return FileError(display, locate(lines, loc), key_path(loc) if key is None else key, message)

    hostile = list(hostile_values(data))
    errors = [error(loc, message) for loc, message in hostile]
    if hostile:  # the model sees a defused copy; its errors about those values are dropped
        data = defused(data)
    data, refused = kind.prepare(data, error)
    errors += refused
    spec = None
    try:
        spec = kind.adapter.validate_python(data)
    except ValidationError as exc:
        # pydantic's locations of a file that is a tagged union start with the tag; the hostile ones do not
        leads: list[tuple[str, ...]] = [(tag,) for tag in kind.keys.root_tags] or [()]
        bad = [(*lead, *loc) for loc, _ in hostile for lead in leads]
        errors += [kind.model_error(found) for found in model_errors(exc, kind.keys, bad, error)]
    return kind.finish(item_id, display, source, Checked(spec, data, errors, error), digest)
