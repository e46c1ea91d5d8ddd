"""The calendars a task names (`trigger.business_days`, `policy.blackouts`) checked against the calendars of
its source: each must exist and be of the kind its key wants."""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.files.calendars import Calendars
from reconciler.files.problems import FileError
from reconciler.files.references import missing, users_of
from reconciler.files.tasks import Task
from reconciler.spec.task import calendars_named

KINDS_OF = {"trigger.business_days": "business_days", "policy.blackouts": "blackout"}


def calendar_errors(tasks: Iterable[Task], calendars: Calendars) -> list[FileError]:
    """Every calendar a task names that calendars.d lacks (the error names every task using it: a calendar
    deleted while tasks use it is refused so), or of the wrong kind. A task standing on its row names none
    (see tasks_unchanged)."""
    named: list[tuple[Task, str, str]] = []
    for task in tasks:
        if task.stored is not None:
            continue
        business, blackouts = calendars_named(task.normalized)
        named += [(task, "trigger.business_days", business)] if business else []
        named += [(task, "policy.blackouts", name) for name in blackouts]
    users = users_of((task.id, name) for task, _, name in named)
    errors: list[FileError] = []
    for task, key, name in named:
        line = task.line_of(*key.split("."))
        if name in calendars.invalid:
            continue  # its own file's errors are reported there
        found = calendars.by_name.get(name)
        if found is None:
            message = missing("calendar", name, users[name], calendars.by_name, calendars.root)
            errors.append(FileError(task.path, line, key, message))
        elif found.spec.kind != KINDS_OF[key]:
            wanted = KINDS_OF[key]
            errors.append(
                FileError(
                    task.path,
                    line,
                    key,
                    f"calendar {name!r} is a {found.spec.kind} calendar; {key} names a {wanted} calendar "
                    f'(kind = "{wanted}" in {calendars.root.rstrip("/")}/NAME.toml)',
                )
            )
    return errors


def bind_all(tasks: list[Task], calendars: Calendars) -> list[Task]:
    """Every task with the calendars it names bound (Task.bind)."""
    stored = calendars.stored()
    return [task.bind(stored) for task in tasks]
