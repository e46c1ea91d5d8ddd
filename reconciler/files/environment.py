"""The environment variables declared files name (`{ env = "NAME" }`), checked against the engines' rules
(`validate --env-policy`) or this environment (`validate --check-env`): one error at every reference that fails.

Every kind's files are walked alike (a task's target, a notifier, any kind that takes a `{ env = … }` value);
what the engine does with a value at fire time is targets/secrets.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from reconciler.files.kinds import DeclaredItem
from reconciler.files.problems import FileError
from reconciler.spec.environment import EnvPolicy
from reconciler.spec.values import EnvRef


def env_references(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(key path as the file writes it, variable name) of every `{ env = NAME }` in a validated model."""
    if isinstance(value, EnvRef):
        return [(prefix.removesuffix("."), value.env)]
    if isinstance(value, BaseModel):
        fields = type(value).model_fields.items()
        return [
            ref
            for name, info in fields
            for ref in env_references(getattr(value, name), f"{prefix}{info.alias or name}.")
        ]
    if isinstance(value, dict):
        return [ref for key, item in value.items() for ref in env_references(item, f"{prefix}{key}.")]
    return []


def reference_errors(items: Iterable[DeclaredItem], problem: Callable[[str], str | None]) -> list[FileError]:
    """An error at every `{ env = NAME }` of the items whose NAME `problem` finds fault with."""
    errors = []
    for item in items:
        for key, name in env_references(item.model()):
            message = problem(name)
            if message is not None:
                errors.append(FileError(item.path, item.line_of(*key.split(".")), key, message))
    return errors


def policy_errors(items: Iterable[DeclaredItem], policy: EnvPolicy) -> list[FileError]:
    """`validate --env-policy`: every variable a file names that the engines would not let it read."""
    rule = policy.describe()
    return reference_errors(
        items, lambda name: None if policy.allows(name) else f"environment variable {name} is not allowed: {rule}"
    )


def unset_errors(items: Iterable[DeclaredItem], env: Mapping[str, str]) -> list[FileError]:
    """`validate --check-env`: every variable a file names that is not set in `env` (no value shown)."""
    return reference_errors(items, lambda name: None if name in env else f"environment variable {name} is not set")
