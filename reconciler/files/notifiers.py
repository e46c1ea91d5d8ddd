"""Notifier files (`notifiers.d/NAME.toml`): the notifier kind, and a notifiers directory loaded.

A notifier is owned by the source that applies it, like a task, and reconciled by the same
plan and apply; a task's `[notify]` names notifiers of its own source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.files.directory import Named, load_named
from reconciler.files.kinds import Declared, ErrorAt, Kind, validate
from reconciler.files.problems import FileError
from reconciler.spec.notifier import NotifierSpec, SlackNotifier, WebhookNotifier

KIND_MISSING = 'missing kind; write kind = "webhook" or kind = "slack"'


# A target's checks name a task file's keys (`use target.auth.kind = "basic"`): a notifier's are at its
# top level. Only such key names are rewritten, never a quoted value of the file ('target.x').
TASK_KEYS = re.compile(r"(?<!['\w.])target\.(?=(?:auth|query|headers|url|method)\b)")
BODY_KEYS = ("json", "body")  # a task target's keys a notifier has not: the event is its body
NO_BODY = "a notifier sends the event as its JSON body; remove this key"


@dataclass(frozen=True)
class Notifier(Declared):
    """A valid notifier file."""

    name: str
    path: str
    spec: WebhookNotifier | SlackNotifier
    source: str = field(default="", repr=False)  # the file's text, for the line of a key

    def key(self) -> str:
        return self.name

    def model(self) -> WebhookNotifier | SlackNotifier:
        return self.spec


class NotifierKind(Kind[Notifier]):
    """Notifier files: named by their file, directly in notifiers.d; webhook or slack."""

    name = "notifier"
    directory = "notifiers.d"
    option = "--notifiers-dir"
    model = NotifierSpec
    empty = "empty notifier file; " + KIND_MISSING.removeprefix("missing kind; ")
    in_line_order = False  # a valid model's file keeps its errors as found (values no model may see first)

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


class Notifiers(Named[Notifier]):
    """A notifiers directory loaded: the valid notifiers by name, and an error for everything else."""

    @property
    def named(self) -> set[str]:
        """Every notifier a task may name without a "no notifier" error of its own."""
        return {*self.by_name, *self.invalid}


def load_notifiers(notifiers_dir: Path, display_root: str | None = None, required: bool = False) -> Notifiers:
    """Every `NAME.toml` directly in `notifiers_dir` (see load_named)."""
    return load_named(NOTIFIERS, Notifiers, notifiers_dir, display_root, required)
