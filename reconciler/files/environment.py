"""What a task may read from the engine's environment, and scrubbing what it read.

A task names variables (`{ env = "NAME" }`); the engine resolves them at fire time under
an allow-list (`engine --allow-env`) and remembers every value it handed out for that run,
so that nothing stored or logged for the run (response excerpt, error text) contains one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from reconciler.files.notifiers import Notifier
from reconciler.files.problems import FileError
from reconciler.files.tasks import Task
from reconciler.spec.environment import EnvPolicy
from reconciler.spec.notifier import SlackNotifier
from reconciler.spec.target import Target
from reconciler.spec.task import TaskSpec
from reconciler.spec.values import EnvRef


def target_references(target: Target, prefix: str) -> list[tuple[str, str]]:
    """(key path, variable name) of every `{ env = NAME }` in a target (or a webhook notifier), keys under `prefix`."""
    found = [(f"{prefix}headers.{k}", v.env) for k, v in target.headers.items() if isinstance(v, EnvRef)]
    found += [(f"{prefix}query.{k}", v.env) for k, v in target.query.items() if isinstance(v, EnvRef)]
    if target.auth is not None:
        for name in type(target.auth).model_fields:
            value = getattr(target.auth, name)
            if isinstance(value, EnvRef):
                found.append((f"{prefix}auth.{name}", value.env))
    return found


def env_references(spec: TaskSpec) -> list[tuple[str, str]]:
    """(key path, variable name) of every `{ env = NAME }` in a task."""
    return target_references(spec.target, "target.")


def notifier_references(notifier: Notifier) -> list[tuple[str, str]]:
    """(key path, variable name) of every `{ env = NAME }` in a notifier file."""
    spec = notifier.spec
    return [("url", spec.url.env)] if isinstance(spec, SlackNotifier) else target_references(spec, "")


def reference_errors(
    tasks: Iterable[Task], problem: Callable[[str], str | None], notifiers: Iterable[Notifier] = ()
) -> list[FileError]:
    """An error at every `{ env = NAME }` of the tasks (and notifiers) whose NAME `problem` finds fault with."""
    files = [(t.path, t.line_of, env_references(t.spec)) for t in tasks]
    files += [(n.path, n.line_of, notifier_references(n)) for n in notifiers]
    errors = []
    for path, line_of, references in files:
        for key, name in references:
            message = problem(name)
            if message is not None:
                errors.append(FileError(path, line_of(*key.split(".")), key, message))
    return errors


def policy_errors(tasks: Iterable[Task], policy: EnvPolicy, notifiers: Iterable[Notifier] = ()) -> list[FileError]:
    """`validate --env-policy`: every variable a task or notifier names that the engine would not let it read."""
    rule = policy.describe()
    return reference_errors(
        tasks,
        lambda name: None if policy.allows(name) else f"environment variable {name} is not allowed: {rule}",
        notifiers,
    )


def unset_errors(tasks: Iterable[Task], env: Mapping[str, str], notifiers: Iterable[Notifier] = ()) -> list[FileError]:
    """`validate --check-env`: every variable a task or notifier names that is not set in `env` (no value shown)."""
    return reference_errors(
        tasks, lambda name: None if name in env else f"environment variable {name} is not set", notifiers
    )
