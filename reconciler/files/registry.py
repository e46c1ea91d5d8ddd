"""The one list of declared kinds, in the order they are planned and applied: a kind comes after the kinds
its files name (a task's `[notify]` names notifiers)."""

from __future__ import annotations

from typing import Any

from reconciler.files.kinds import Kind
from reconciler.files.notifiers import NOTIFIERS
from reconciler.files.tasks import TASKS

KINDS: tuple[Kind[Any], ...] = (NOTIFIERS, TASKS)


def kind_named(name: str) -> Kind[Any]:
    """The kind called `name` ("task", "notifier")."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise KeyError(name)
