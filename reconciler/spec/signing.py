"""`[target.signing]`: the Standard Webhooks signature a task's requests carry (docs/requests.md, "Signing"), so a
target can verify the caller without sharing a bearer token with it. Secrets come from the environment only:
`secret = { env = "NAME" }`, or `secrets = [{ env = "NEW" }, { env = "OLD" }]` while a key is rotated (every
request then carries a signature by each)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from reconciler.spec.model import Model
from reconciler.spec.values import SecretRef

MAX_SECRETS = 4  # a rotation needs two; a few more let a rotation overlap another


class Signing(Model):
    kind: Literal["standard-webhooks"]
    secret: SecretRef | None = None
    secrets: list[SecretRef] | None = Field(default=None, min_length=1, max_length=MAX_SECRETS)

    cross_checks = ((("secret", "secrets"), lambda v: _secret_problem(**v)),)

    @property
    def keys(self) -> list[str]:
        """The variables holding the keys it signs with, in order (the new key first during a rotation)."""
        return [self.secret.env] if self.secret is not None else [ref.env for ref in self.secrets or ()]


def _secret_problem(secret: Any, secrets: Any) -> str | None:
    if secret is None and secrets is None:
        return 'signing needs its key: secret = { env = "NAME" } (or secrets = [...] while rotating)'
    if secret is not None and secrets is not None:
        return "give either secret = { env = ... } or secrets = [...] (while rotating), not both"
    names = [getattr(ref, "env", ref) for ref in secrets or ()]
    if len(set(map(str, names))) != len(names):
        return "secrets names one variable twice; list each key's variable once, the new key first"
    return None
