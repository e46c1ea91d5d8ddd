"""Standard Webhooks signatures (https://www.standardwebhooks.com, docs/requests.md "Signing"): `webhook-id`,
`webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, one signature per key
(space-separated) while a key is rotated. The keys are read from the environment for each request and are never
stored, logged or shown: an error names the variable, never its value."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from reconciler.spec.signing import Signing
from reconciler.spec.values import EnvRef
from reconciler.targets.secrets import EnvProblem, RunSecrets

PREFIX = "whsec_"


def signing_key(value: str, name: str) -> bytes:
    """A Standard Webhooks secret (`whsec_` and base64, as the reference libraries and Svix print them; the prefix
    may be left out) as the key's bytes."""
    text = value.strip()
    text = text.removeprefix(PREFIX)
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not key:
        raise EnvProblem(
            f"environment variable {name} is not a Standard Webhooks secret: give whsec_ followed by the key in "
            "base64 (24 to 64 random bytes), as the target's verifying library expects"
        )
    return key


def signature_headers(
    signing: Signing, msg_id: str, timestamp: int, body: bytes, secrets: RunSecrets
) -> dict[str, str]:
    """The three headers of a request with `body`, sent at `timestamp` (POSIX seconds) as message `msg_id`."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    signatures = []
    for name in signing.keys:
        key = signing_key(secrets.resolve(EnvRef(env=name), "target.signing.secret"), name)
        digest = hmac.new(key, signed, hashlib.sha256).digest()
        signatures.append("v1," + base64.b64encode(digest).decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp), "webhook-signature": " ".join(signatures)}
