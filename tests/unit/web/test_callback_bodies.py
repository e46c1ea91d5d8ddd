"""A job's callback bodies, parsed before anything is written: their bounds, UTF-8, depth and shape (web/callbacks.py),
and what of a report is stored (engine/jobs.py: NUL, lone surrogates and the task's secrets replaced). Fuzzed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.jobs import TOKEN, callback_url, clean, new_token, retry_wait, token_hash
from reconciler.spec.environment import EnvPolicy
from reconciler.targets.secrets import RunSecrets
from reconciler.web.callbacks import BadRequest, _depth, completion

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_depth_counts_what_json_loads_would_recurse_into(value: Any) -> None:
    text = json.dumps(value)

    def nesting(item: Any) -> int:
        if isinstance(item, dict):
            return 1 + max(map(nesting, item.values()), default=0)
        if isinstance(item, list):
            return 1 + max(map(nesting, item), default=0)
        return 0

    assert _depth(text) == nesting(value)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ([], "must be a JSON object"),
        ({"status": "ok"}, 'status must be "succeeded" or "failed"'),
        ({"status": "succeeded", "outputs": {}}, "unknown key 'outputs'"),
        ({"status": "succeeded", "output": "text"}, "output must be a JSON object"),
        ({"status": "failed", "error": ["x"]}, "error must be a string"),
    ],
)
def test_a_completion_of_the_wrong_shape_is_refused_with_its_reason(body: Any, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        completion(body)


@given(st.dictionaries(st.text(max_size=10), JSON, max_size=5))
def test_any_object_is_a_completion_or_a_bad_request(body: dict[str, Any]) -> None:
    try:
        status, output, _error = completion(body)
    except BadRequest as exc:
        assert exc.status == 400 and "\n" not in str(exc)
    else:
        assert status in ("succeeded", "failed") and (output is None or isinstance(output, dict))


@settings(max_examples=200)
@given(JSON)
def test_what_is_stored_has_no_nul_no_lone_surrogate_and_no_secret(value: Any) -> None:
    secrets = RunSecrets({"API_TOKEN": "sEcReT-0123456789"}, EnvPolicy())
    secrets.remember("sEcReT-0123456789")
    wrapped = {"value": value, "note": "x\u0000\ud800 sEcReT-0123456789"}
    stored = json.dumps(clean(wrapped, secrets), ensure_ascii=False)
    stored.encode("utf-8")  # no lone surrogate left
    assert "\x00" not in stored and "\\u0000" not in stored and "sEcReT-0123456789" not in stored


def test_tokens_are_256_bits_url_safe_and_only_their_hash_is_kept() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    for token, digest in tokens:
        assert TOKEN.fullmatch(token) and digest == token_hash(token) and token not in digest
    assert callback_url("https://gw.example/reconciler/", 7, "t") == "https://gw.example/reconciler/runs/7/t"


@pytest.mark.parametrize(
    ("policy", "attempt", "wait"),
    [
        ({"retries": 0}, 1, None),
        ({"retries": 2, "retry_backoff_seconds": 5}, 1, 5.0),
        ({"retries": 2, "retry_backoff_seconds": 5}, 2, 10.0),
        ({"retries": 2, "retry_backoff_seconds": 5}, 3, None),
        ({"retries": 3, "retry_backoff_seconds": 3000}, 3, 3600.0),  # capped as a Retry-After is
        ({"retries": "2"}, 1, None),  # a hand edit: no retry rather than a crash
        ({"retries": 1, "retry_backoff_seconds": "x"}, 1, 5.0),
        (None, 1, None),
    ],
)
def test_a_jobs_retry_waits_its_backoff_while_retries_are_left(policy: Any, attempt: int, wait: float | None) -> None:
    assert retry_wait(policy, attempt) == wait
