"""What a task may read from the engine's environment, and scrubbing what it read.

A task names variables (`{ env = "NAME" }`); the engine resolves them at fire time under
an allow-list (`engine --allow-env`) and remembers every value it handed out for that run,
so that nothing stored or logged for the run (response excerpt, error text) contains one.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import quote, quote_plus

from reconciler.loader import FileError, Task
from reconciler.models import EnvRef, Target, TaskSpec
from reconciler.notifiers import Notifier, SlackNotifier

# The engine's own settings: a task must not be able to send them to a URL of its choice.
ENGINE_OWN_ENV = ("RECONCILER_*", "DATABASE_URL", "PG*")
REDACTED = "[redacted]"
# Shorter values cannot be secrets worth the name, and replacing them would garble every excerpt.
MIN_SCRUB_LENGTH = 4


class EnvProblem(Exception):
    """A `{ env = NAME }` value that cannot be used for this run; the run fails, the engine does not."""


@dataclass(frozen=True)
class EnvPolicy:
    """Which variables tasks may read: the `allow` globs, or (when none) all but the engine's own."""

    allow: tuple[str, ...] = ()

    def allows(self, name: str) -> bool:
        if self.allow:
            return any(fnmatchcase(name, pattern) for pattern in self.allow)
        return not any(fnmatchcase(name, pattern) for pattern in ENGINE_OWN_ENV)

    def describe(self) -> str:
        """The rule in words, for error messages."""
        if self.allow:
            return f"engine --allow-env lets tasks read only {', '.join(self.allow)}"
        return f"tasks may not read the engine's own settings ({', '.join(ENGINE_OWN_ENV)}); see engine --allow-env"


def variants(value: str) -> set[str]:
    """The forms a value takes when a target echoes it back: raw, URL-encoded, JSON-escaped."""
    return {value, quote(value, safe=""), quote_plus(value, safe=""), json.dumps(value)[1:-1]}


class RunSecrets:
    """Resolves one run's `{ env = NAME }` values and scrubs them (and issued tokens) from text."""

    def __init__(self, env: Mapping[str, str], policy: EnvPolicy) -> None:
        self.env = env
        self.policy = policy
        self.values: set[str] = set()

    def resolve(self, value: str | EnvRef, key: str) -> str:
        """A literal, or the allowed, set environment variable's value (remembered for scrubbing)."""
        if isinstance(value, str):
            return value
        name = value.env
        if not self.policy.allows(name):
            raise EnvProblem(f"{key} names environment variable {name}: {self.policy.describe()}")
        found = self.env.get(name)
        if found is None:
            raise EnvProblem(
                f"environment variable {name} is not set (needed by {key}); set it in the engine's environment"
            )
        self.remember(found)
        return found

    def remember(self, *secrets: str) -> None:
        """Treat these values as secret for the rest of the run."""
        for secret in secrets:
            if len(secret) >= MIN_SCRUB_LENGTH:
                self.values.update(variants(secret))

    def remember_basic(self, username: str, password: str) -> None:
        """Basic credentials travel base64-encoded; an echo of the header must not reveal them either."""
        self.remember(password, base64.b64encode(f"{username}:{password}".encode()).decode("ascii"))

    def scrub(self, text: str | None) -> str | None:
        """`text` with every remembered value replaced by [redacted]."""
        if not text or not self.values:
            return text
        for secret in sorted(self.values, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text

    @property
    def longest(self) -> int:
        """Bytes of the longest remembered value (the excerpt reads this much extra, to scrub across its end)."""
        if not self.values:  # most runs: no secret at all
            return 0
        return max(len(secret.encode()) for secret in self.values)


def storable(text: str | None) -> str | None:
    """Text PostgreSQL can store: NUL replaced (invalid UTF-8 was replaced when decoding)."""
    return text.replace("\x00", "\ufffd") if text else text


def globs(patterns: Iterable[str]) -> tuple[str, ...]:
    """--allow-env values, split on commas too (`--allow-env 'APP_*,TENANT'`)."""
    return tuple(part.strip() for pattern in patterns for part in pattern.split(",") if part.strip())


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
