"""Notifier files (`notifiers.d/NAME.toml`): the notifier kind, and a notifiers directory loaded.

A notifier is owned by the source that applies it, like a task, and reconciled by the same
plan and apply; a task's `[notify]` names notifiers of its own source.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.files.directory import load_named
from reconciler.files.kinds import DeclaredItem, ErrorAt, Named, NamedKind, validate
from reconciler.files.problems import FileError
from reconciler.spec.model import did_you_mean, suggestion
from reconciler.spec.notifier import NotifierSpec, SlackNotifier, WebhookNotifier, subscriptions
from reconciler.spec.target import target_line

if TYPE_CHECKING:
    from reconciler.files.tasks import Task

KIND_MISSING = 'missing kind; write kind = "webhook" or kind = "slack"'


# A target's checks name a task file's keys (`use target.auth.kind = "basic"`): a notifier's are at its
# top level. Only such key names are rewritten, never a quoted value of the file ('target.x').
TASK_KEYS = re.compile(r"(?<!['\w.])target\.(?=(?:auth|query|headers|url|method)\b)")
BODY_KEYS = ("json", "body")  # a task target's keys a notifier has not: the event is its body
NO_BODY = "a notifier sends the event as its JSON body; remove this key"


@dataclass(frozen=True)
class Notifier(DeclaredItem):
    """A valid notifier file."""

    name: str
    path: str
    spec: WebhookNotifier | SlackNotifier
    source: str = field(default="", repr=False)  # the file's text, for the line of a key

    def key(self) -> str:
        return self.name

    def model(self) -> WebhookNotifier | SlackNotifier:
        return self.spec


class NotifierKind(NamedKind[Notifier]):
    """Notifier files: named by their file, directly in notifiers.d; webhook or slack. Apply keeps them in
    scheduler.notifiers, which the engines' delivery reads."""

    name = "notifier"
    directory = "notifiers.d"
    option = "--notifiers-dir"
    model = NotifierSpec
    empty = "empty notifier file; " + KIND_MISSING.removeprefix("missing kind; ")
    in_line_order = False  # a valid model's file keeps its errors as found (values no model may see first)
    title = "reconciler notifier file"
    description = (
        "One TOML file in notifiers.d/: where a task's events are sent (kind webhook or slack). Checks keys, "
        "types and ranges; `reconciler validate` checks the rest (URLs, secrets, the tasks' subscriptions)."
    )
    table = "notifiers"
    on_delete = "notifications_end_deleted"  # its pending events end with it, not at their next attempt

    def summary(self, spec: Mapping[str, Any]) -> str:
        """`webhook POST https://host/path (…)` or `slack (URL from $NAME; timeout 10 s)`."""
        if spec.get("kind") == "slack":
            url = spec.get("url")
            name = url.get("env", "?") if isinstance(url, dict) else "?"
            return f"slack (URL from ${name}; timeout {spec.get('timeout_seconds', '?')} s)"
        return "webhook " + target_line(spec)

    def references(
        self, tasks: Sequence[Task], loaded: Named[Notifier], stored: Mapping[str, Mapping[str, Any]] | None
    ) -> list[FileError]:
        """Every `[notify]` entry naming a notifier the files do not define."""
        errors: list[FileError] = []
        for task in tasks:
            spec = task.normalized if task.stored is None else (stored or {}).get(task.id)
            if spec is not None:
                errors += unknown_subscriptions(task.path, spec, loaded.names, loaded.root, task.line_of)
        return errors

    def item(self, item_id: str, display: str, source: str, spec: Any, digest: str | None) -> Notifier:
        return Notifier(item_id, display, spec, source)

    def rewrite(self, loc: tuple[str, ...], message: str) -> tuple[tuple[str, ...], str]:
        loc, message = super().rewrite(loc, message)
        return loc, TASK_KEYS.sub("", message)

    def prepare(self, data: dict[str, Any], error: ErrorAt) -> tuple[dict[str, Any], list[FileError]]:
        if data.get("kind") != "webhook":
            return data, []
        refused = [error((key,), NO_BODY) for key in BODY_KEYS if key in data]
        return {key: value for key, value in data.items() if key not in BODY_KEYS}, refused

    def model_error(self, found: FileError) -> FileError:
        if found.key == "kind" and found.message.startswith("missing kind"):
            return FileError(found.path, found.line, found.key, KIND_MISSING)
        return found


NOTIFIERS = NotifierKind()


def validate_notifier(name: str, display: str, source: str) -> tuple[Notifier | None, list[FileError]]:
    """One notifier file's text → the notifier, or every problem of it (one line each)."""
    return validate(NOTIFIERS, name, display, source)


Notifiers = Named[Notifier]


def load_notifiers(notifiers_dir: Path, display_root: str | None = None, required: bool = False) -> Notifiers:
    """Every `NAME.toml` directly in `notifiers_dir` (see load_named)."""
    return load_named(NOTIFIERS, notifiers_dir, display_root, required)


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
