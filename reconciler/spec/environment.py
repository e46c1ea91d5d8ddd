"""Which environment variables a file may name: the engine's `--allow-env` policy."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

# The engine's own settings: a task must not be able to send them to a URL of its choice.
ENGINE_OWN_ENV = ("RECONCILER_*", "DATABASE_URL", "PG*")


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


def globs(patterns: Iterable[str]) -> tuple[str, ...]:
    """--allow-env values, split on commas too (`--allow-env 'APP_*,TENANT'`)."""
    return tuple(part.strip() for pattern in patterns for part in pattern.split(",") if part.strip())
