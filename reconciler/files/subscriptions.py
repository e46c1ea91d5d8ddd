"""The tasks' `[notify]` subscriptions checked against the notifiers of their source."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reconciler.files.notifiers import Notifiers
from reconciler.files.problems import FileError
from reconciler.files.tasks import Task
from reconciler.spec.model import did_you_mean, suggestion
from reconciler.spec.notifier import subscriptions


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
