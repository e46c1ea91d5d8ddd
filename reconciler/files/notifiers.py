"""Notifier files (`notifiers.d/NAME.toml`): their models, loading, and the tasks' subscriptions to them.

A notifier is owned by the source that applies it, like a task, and reconciled by the same
plan and apply; a task's `[notify]` names notifiers of its own source.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from reconciler.files.tasks import (
    BOM,
    FileError,
    Task,
    canonical_json,
    decode_source,
    defused,
    hostile_values,
    key_lines,
    key_path,
    locate,
    model_errors,
    parse_toml,
    read_bytes,
    scan,
    spec_hash,
)
from reconciler.spec.model import Model, did_you_mean, suggestion
from reconciler.spec.notifier import SlackNotifier, WebhookNotifier, spec_adapter, subscriptions
from reconciler.spec.values import ID_SEGMENT

KIND_MISSING = 'missing kind; write kind = "webhook" or kind = "slack"'


# A target's checks name a task file's keys (`use target.auth.kind = "basic"`): a notifier's are at its
# top level. Only such key names are rewritten, never a quoted value of the file ('target.x').
TASK_KEYS = re.compile(r"(?<!['\w.])target\.(?=(?:auth|query|headers|url|method)\b)")
BODY_KEYS = ("json", "body")  # a task target's keys a notifier has not: the event is its body
NO_BODY = "a notifier sends the event as its JSON body; remove this key"














@cache
def _allowed_keys() -> dict[tuple[str, ...], list[str]]:
    from reconciler.spec.target import BasicAuth, BearerAuth, OAuth2ClientCredentials

    def names(model: type[Model]) -> list[str]:
        return sorted(info.alias or name for name, info in model.model_fields.items())

    allowed: dict[tuple[str, ...], list[str]] = {("webhook",): names(WebhookNotifier), ("slack",): names(SlackNotifier)}
    for auth in (BearerAuth, BasicAuth, OAuth2ClientCredentials):
        tag = auth.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]
        allowed[("webhook", "auth", tag)] = names(auth)
    return allowed


@dataclass(frozen=True)
class Notifier:
    """A valid notifier file."""

    name: str
    path: str
    spec: WebhookNotifier | SlackNotifier
    source: str = field(default="", repr=False)  # the file's text, for the line of a key

    def line_of(self, *key: str) -> int:
        """The file line of a key path (0 when unknown)."""
        return locate(key_lines(self.source), key)

    @cached_property
    def normalized(self) -> dict[str, Any]:
        """The spec as stored in `scheduler.notifiers.spec`."""
        return self.spec.model_dump(mode="json", by_alias=True, exclude_none=True)

    @cached_property
    def canonical(self) -> str:
        return canonical_json(self.normalized)

    @cached_property
    def spec_hash(self) -> str:
        return spec_hash(self.normalized)


def validate_notifier(name: str, display: str, source: str) -> tuple[Notifier | None, list[FileError]]:
    """One notifier file's text → the notifier, or every problem of it (one line each)."""
    if not ID_SEGMENT.fullmatch(name):
        message = "a notifier's file name must match [a-z0-9][a-z0-9_.-]{0,62}.toml; rename the file"
        return None, [FileError(display, 0, "name", message)]
    data, errors = parse_toml(display, source)
    if data is None:
        return None, errors
    lines: dict[tuple[str, ...], int] | None = None

    def error(loc: tuple[str, ...], message: str) -> FileError:
        nonlocal lines
        lines = key_lines(source) if lines is None else lines
        loc = loc[1:] if loc[:1] in (("webhook",), ("slack",)) else loc  # the union's tag is the file's `kind`
        return FileError(display, locate(lines, loc), key_path(loc), TASK_KEYS.sub("", message))

    if not data:
        return None, [
            FileError(display, 0, "(file)", "empty notifier file; " + KIND_MISSING.removeprefix("missing kind; "))
        ]
    hostile = list(hostile_values(data))
    errors = [error(loc, message) for loc, message in hostile]
    if hostile:  # the model sees a defused copy; its errors about those values are dropped
        data = defused(data)
    if data.get("kind") == "webhook":
        errors += [error((key,), NO_BODY) for key in BODY_KEYS if key in data]
        data = {key: value for key, value in data.items() if key not in BODY_KEYS}
    try:
        spec = spec_adapter().validate_python(data)
    except ValidationError as exc:
        # pydantic's locations start with the union's tag (`webhook`), the reported ones do not
        bad = [(tag, *loc) for loc, _ in hostile for tag in ("webhook", "slack")]
        for found in model_errors(exc, _allowed_keys(), bad, error):
            if found.key == "kind" and found.message.startswith("missing kind"):
                found = FileError(found.path, found.line, found.key, KIND_MISSING)
            errors.append(found)
        return None, sorted(errors, key=lambda e: e.line)
    if errors:
        return None, errors
    return Notifier(name, display, spec, source), []


@dataclass
class Notifiers:
    """A notifiers directory loaded: the valid notifiers by name, and an error for everything else."""

    root: str
    by_name: dict[str, Notifier]
    errors: list[FileError]
    present: bool = True  # the directory exists
    invalid: set[str] = field(default_factory=set)  # names of files with errors: reported once, in their file

    @property
    def named(self) -> set[str]:
        """Every notifier a task may name without a "no notifier" error of its own."""
        return {*self.by_name, *self.invalid}


def load_notifiers(notifiers_dir: Path, display_root: str | None = None, required: bool = False) -> Notifiers:
    """Every `NAME.toml` directly in `notifiers_dir` (none when it does not exist, unless `required`: it was
    named on the command line); `_` and `.` names skipped. Anything else there is an error."""
    root = display_root if display_root is not None else str(notifiers_dir)
    if not notifiers_dir.is_dir():
        if notifiers_dir.exists() or notifiers_dir.is_symlink():  # a file there is no "no notifiers"
            problem = "is not a directory; make it the directory of notifier files, or pass --notifiers-dir"
            return Notifiers(root, {}, [FileError(root, 0, "(file)", problem)], present=False)
        if required:
            problem = "directory not found; create it or pass another --notifiers-dir"
            return Notifiers(root, {}, [FileError(root, 0, "(file)", problem)], present=False)
        return Notifiers(root, {}, [], present=False)
    found: dict[str, Notifier] = {}
    errors: list[FileError] = []
    depth = len(notifiers_dir.parts)
    for entry in scan(notifiers_dir, root):
        parts = entry.path.parts[depth:]
        display = f"{root.rstrip('/')}/{'/'.join(parts)}"
        if entry.problem is not None:
            errors.append(FileError(display, 0, "(file)", entry.problem))
            continue
        if len(parts) > 1:
            errors.append(FileError(display, 0, "(file)", f"notifier files sit directly in {root}; move it up"))
            continue
        try:
            source = decode_source(read_bytes(entry.path)).removeprefix(BOM)
        except OSError as exc:
            errors.append(FileError(display, 0, "(file)", f"cannot read file ({exc.strerror})"))
            continue
        except ValueError as exc:
            errors.append(FileError(display, getattr(exc, "line", 0), "(file)", str(exc)))
            continue
        notifier, problems = validate_notifier(parts[0].removesuffix(".toml"), display, source)
        errors += problems
        if notifier is not None:
            found[notifier.name] = notifier
    invalid = {error.path.rsplit("/", 1)[-1].removesuffix(".toml") for error in errors}
    return Notifiers(root, found, errors, invalid=invalid)




def unknown_subscriptions(
    path: str, spec: Mapping[str, Any], names: Iterable[str], root: str, line_of: Callable[..., int] | None = None
) -> list[FileError]:
    """An error per notifier a task names that `names` (its source's notifiers) lacks."""
    known = set(names)
    errors = []
    for event, wanted in subscriptions(spec).items():
        for name in wanted:
            if name in known:
                continue
            near = did_you_mean(name, known)
            hint = suggestion(name, known) if near else f"; add {root.rstrip('/')}/{name}.toml or remove it here"
            line = line_of("notify", event) if line_of is not None else 0
            errors.append(FileError(path, line, f"notify.{event}", f"no notifier {name!r} in {root}{hint}"))
    return errors


def subscription_errors(
    tasks: Iterable[Task], stored_specs: Mapping[str, Mapping[str, Any]], notifiers: Notifiers
) -> list[FileError]:
    """Every `[notify]` entry naming a notifier the files do not define. A task whose file is unchanged
    since it was applied is checked on its stored spec (`stored_specs` by id), so its file is not parsed."""
    errors: list[FileError] = []
    for task in tasks:
        stored = stored_specs.get(task.id) if task.stored is not None else None
        spec = stored if stored is not None else task.normalized
        errors += unknown_subscriptions(task.path, spec, notifiers.named, notifiers.root, task.line_of)
    return errors
