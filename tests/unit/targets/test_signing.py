"""Standard Webhooks signatures agree with the reference library for any body, id and time; a key that is not one
fails the run naming its variable, never showing its value."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook

from reconciler.spec.environment import EnvPolicy
from reconciler.spec.signing import Signing
from reconciler.targets.secrets import EnvProblem, RunSecrets
from reconciler.targets.signing import signature_headers, signing_key

KEY = "whsec_" + base64.b64encode(bytes(range(32))).decode()
OLD = "whsec_" + base64.b64encode(b"o" * 24).decode()
ONE = Signing.model_validate({"kind": "standard-webhooks", "secret": {"env": "NEW"}})
BOTH = Signing.model_validate({"kind": "standard-webhooks", "secrets": [{"env": "NEW"}, {"env": "OLD"}]})


def secrets(**env: str) -> RunSecrets:
    return RunSecrets(env, EnvPolicy())


@given(
    body=st.binary(max_size=2048),
    msg_id=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=300),
    timestamp=st.integers(min_value=0, max_value=253402300799),  # to year 9999
)
def test_each_signature_is_the_reference_librarys(body: bytes, msg_id: str, timestamp: int) -> None:
    headers = signature_headers(BOTH, msg_id, timestamp, body, secrets(NEW=KEY, OLD=OLD))
    new, old = headers["webhook-signature"].split(" ")
    when = datetime.fromtimestamp(timestamp, UTC)
    assert new == Webhook(KEY).sign(msg_id, when, body) and old == Webhook(OLD).sign(msg_id, when, body)
    assert (headers["webhook-id"], headers["webhook-timestamp"]) == (msg_id, str(timestamp))


@pytest.mark.parametrize(
    "value",
    ["", "whsec_", "whsec_not base64!", "not-base64-%%%", "whsec_====", "\x00", "é" * 40],
)
def test_a_key_that_is_not_one_fails_naming_the_variable_not_the_value(value: str) -> None:
    with pytest.raises(EnvProblem) as caught:
        signature_headers(ONE, "id", 1, b"{}", secrets(NEW=value))
    message = str(caught.value)
    assert "environment variable NEW is not a Standard Webhooks secret" in message
    assert value in ("", "whsec_") or value not in message


def test_a_key_without_its_prefix_or_padding_is_read_as_the_libraries_read_it() -> None:
    raw = base64.b64encode(b"k" * 25).decode()
    assert signing_key(raw.rstrip("="), "X") == signing_key("whsec_" + raw, "X") == b"k" * 25


def test_an_unset_variable_fails_naming_it() -> None:
    with pytest.raises(EnvProblem, match="NEW"):
        signature_headers(ONE, "id", 1, b"", secrets())
