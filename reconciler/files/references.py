"""Tasks naming the files of another kind by name (a calendar, a limit): which tasks name each, the error
of a name that its directory lacks, and the warning of a file that no task names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.files.problems import FileWarning
from reconciler.spec.model import did_you_mean

USERS_SHOWN = 10  # tasks named in the error of a missing file; the rest are counted


def users_of(named: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """{name: the ids of the tasks naming it, each once, sorted} of (task id, name) pairs."""
    users: dict[str, set[str]] = {}
    for task_id, name in named:
        users.setdefault(name, set()).add(task_id)
    return {name: sorted(ids) for name, ids in users.items()}


def missing(what: str, name: str, users: list[str], names: Iterable[str], root: str) -> str:
    """The message of a `what` (calendar, limit) that `root` lacks, naming the tasks that use it: a file deleted
    while tasks name it is refused so."""
    shown = ", ".join(users[:USERS_SHOWN])
    shown += f" and {len(users) - USERS_SHOWN} more" if len(users) > USERS_SHOWN else ""
    near = did_you_mean(name, names)
    hint = f"did you mean {near!r}? " if near else ""
    root = root.rstrip("/")
    return (
        f"no {what} {name!r} in {root} (used by {len(users)} task(s): {shown}); "
        f"{hint}add {root}/{name}.toml, or stop naming it in those tasks"
    )


def spec_of(task: Any, stored: Mapping[str, Mapping[str, Any]] | None) -> Mapping[str, Any]:
    """A task's normalized spec; a task standing on its row (its file unchanged since applied), the row's spec
    (`stored`, by id): its file is not parsed again."""
    if task.stored is None:
        return dict(task.normalized)
    return (stored or {}).get(task.id) or {}


def unused(what: str, by_name: Mapping[str, Any], used: set[str], where: str) -> list[FileWarning]:
    """A warning per file of `by_name` that no task names (`used`): valid, but it does nothing (`where`: the keys
    a task names it with)."""
    return [
        FileWarning(item.path, 0, "(file)", f"no task names {what} {name!r}; delete it, or name it in a task's {where}")
        for name, item in sorted(by_name.items())
        if name not in used
    ]
