"""The one list of declared kinds, in the order they are planned and applied: a kind comes after the kinds its files
name (a task's `[notify]` names notifiers, its trigger and policy name calendars, its policy limits). Everything
that handles declared files iterates it: reading, validate, plan, apply, the plan's renderings, export, `schema`,
the command line's directory options, `watch` and GitOps (tests/ecosystem/test_declared_dirs.py)."""

from __future__ import annotations

from typing import Any

from reconciler.files.calendars import CALENDARS
from reconciler.files.kinds import Kind, NamedKind
from reconciler.files.limits import LIMITS
from reconciler.files.notifiers import NOTIFIERS
from reconciler.files.tasks import TASKS

KINDS: tuple[Kind[Any], ...] = (CALENDARS, LIMITS, NOTIFIERS, TASKS)


def named_kinds(kinds: tuple[Kind[Any], ...] | None = None) -> tuple[NamedKind[Any], ...]:
    """The kinds named by their files (stored whole by apply), in the registry's order: all but tasks."""
    return tuple(kind for kind in (KINDS if kinds is None else kinds) if isinstance(kind, NamedKind))


def kind_named(name: str) -> Kind[Any]:
    """The kind of this name (`task`, `limit`, …); a KeyError for none."""
    return {kind.name: kind for kind in KINDS}[name]
