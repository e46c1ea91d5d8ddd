"""A run's `{ env = NAME }` values: resolved at fire time under the policy, and scrubbed from
everything stored or logged for the run."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from urllib.parse import quote, quote_plus

from reconciler.spec.environment import EnvPolicy
from reconciler.spec.values import EnvRef

REDACTED = "[redacted]"


# Shorter values cannot be secrets worth the name, and replacing them would garble every excerpt.
MIN_SCRUB_LENGTH = 4


class EnvProblem(Exception):
    """A `{ env = NAME }` value that cannot be used for this run; the run fails, the engine does not."""


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
