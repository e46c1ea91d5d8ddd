"""`[target.signing]` and the headers the engine sets: every wrong input is one `validate` line naming the file, its
line and key and the fix; a right one is stored as written (a task without signing keeps its hash)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.files.tasks import load_dir
from tests.builders import validate_line

BASE = '[trigger]\nkind = "cron"\nexpr = "0 3 * * *"\n[target]\nurl = "https://etl.example.com/nightly"\n'
SIGNING = '[target.signing]\nkind = "standard-webhooks"\n'

WRONG = [
    (SIGNING + 'secret = "whsec_c2VjcmV0"\n', "target.signing.secret", "a literal secret is not allowed"),
    (SIGNING, "target.signing", 'secret = { env = "NAME" }'),
    (SIGNING + 'secret = { env = "A" }\nsecrets = [{ env = "B" }]\n', "target.signing", "not both"),
    (SIGNING + 'secrets = [{ env = "A" }, { env = "A" }]\n', "target.signing", "names one variable twice"),
    (SIGNING + "secrets = []\n", "target.signing.secrets", "at least 1"),
    (SIGNING + 'secrets = ["whsec_c2VjcmV0"]\n', "target.signing.secrets.0", "a literal secret is not allowed"),
    (
        SIGNING + "secrets = [" + ", ".join(f'{{ env = "K{i}" }}' for i in range(5)) + "]\n",
        "target.signing.secrets",
        "at most 4",
    ),
    ('[target.signing]\nkind = "hmac"\nsecret = { env = "A" }\n', "target.signing.kind", "'standard-webhooks'"),
    (SIGNING + 'secret = { env = "A" }\nalgorithm = "sha1"\n', "target.signing.algorithm", ""),
    (SIGNING + 'secret = { env = "NOT A NAME" }\n', "target.signing.secret.env", "not an environment variable"),
    (SIGNING + 'secret = { env = "A\\u0000" }\n', "target.signing.secret.env", "NUL character"),
]

ENGINE_SET = [
    "User-Agent",
    "user-agent",
    "X-Reconciler-Kind",
    "X-Reconciler-Run-Id",
    "traceparent",
    "X-Reconciler-Callback",
    "Idempotency-Key",
]


@pytest.mark.parametrize(("extra", "key", "piece"), WRONG)
def test_a_wrong_signing_table_is_one_line_with_its_key_and_fix(
    tmp_path: Path, extra: str, key: str, piece: str
) -> None:
    line, err = validate_line(tmp_path, BASE + extra)
    assert f": {key}: " in line and piece in line, line
    assert "c2VjcmV0" not in err


@pytest.mark.parametrize("name", ENGINE_SET)
def test_a_task_header_may_not_override_one_the_engine_sets(tmp_path: Path, name: str) -> None:
    line, _err = validate_line(tmp_path, BASE + f'headers = {{ "{name}" = "mine" }}\n')
    assert ": target.headers: " in line and f"the engine sets {name} on every request; remove it" in line, line


@pytest.mark.parametrize("name", ["webhook-signature", "Webhook-Id", "webhook-timestamp"])
def test_a_signing_header_points_to_target_signing(tmp_path: Path, name: str) -> None:
    line, _err = validate_line(tmp_path, BASE + f'headers = {{ "{name}" = {{ env = "X" }} }}\n')
    assert f"the engine sets {name} when the request is signed" in line and "[target.signing]" in line, line


def test_signing_is_stored_as_written_and_a_task_without_it_keeps_its_hash(tmp_path: Path) -> None:
    root = tmp_path / "tasks.d"
    root.mkdir()
    (root / "signed.toml").write_text(BASE + SIGNING + 'secrets = [{ env = "NEW" }, { env = "OLD" }]\n')
    (root / "bare.toml").write_text(BASE)
    loaded = load_dir(root, "tasks.d")
    assert loaded.errors == []
    found = {task.id: task for task in loaded.tasks}
    assert found["signed"].normalized["target"]["signing"] == {
        "kind": "standard-webhooks",
        "secrets": [{"env": "NEW"}, {"env": "OLD"}],
    }
    assert found["signed"].spec.target.signing is not None
    assert found["signed"].spec.target.signing.keys == ["NEW", "OLD"]
    assert "signing" not in found["bare"].normalized["target"]
