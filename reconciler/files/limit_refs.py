"""The limits a task names (`policy.limits`) checked against the limits of its source: each must exist."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.files.limits import Limits
from reconciler.files.problems import FileError
from reconciler.files.references import missing, users_of
from reconciler.files.tasks import Task

KEY = "policy.limits"


def limits_named(spec: Mapping[str, Any]) -> list[str]:
    """A normalized task spec's limits (a stored spec edited by hand into something else names none)."""
    policy = spec.get("policy")
    named = policy.get("limits") if isinstance(policy, dict) else None
    return [name for name in named if isinstance(name, str)] if isinstance(named, list) else []


def limit_errors(
    tasks: Iterable[Task], limits: Limits, stored_specs: Mapping[str, Mapping[str, Any]] | None = None
) -> list[FileError]:
    """Every limit a task names that limits.d lacks; the error names every task using it, so a limit deleted
    while tasks name it is refused so. A task standing on its row is checked on its stored spec (`stored_specs`
    by id: a plan has them) or, without them, skipped (its file is not parsed for this)."""
    named: list[tuple[Task, str]] = []
    for task in tasks:
        if task.stored is None:
            spec: Mapping[str, Any] | None = task.normalized
        else:
            spec = stored_specs.get(task.id) if stored_specs is not None else None
        named += [(task, name) for name in limits_named(spec or {})]
    users = users_of((task.id, name) for task, name in named)
    return [
        FileError(
            task.path,
            task.line_of(*KEY.split(".")),
            KEY,
            missing("limit", name, users[name], limits.by_name, limits.root),
        )
        for task, name in named
        if name not in limits.by_name and name not in limits.invalid  # an invalid one's errors are in its file
    ]
