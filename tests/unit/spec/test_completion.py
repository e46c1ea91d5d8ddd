"""`[target] completion`, `deadline` and `heartbeat_timeout`: every wrong combination is one line naming the file,
its line and key and the fix; a right one is stored as written (a response task's spec keeps its hash)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.files.tasks import load_dir
from tests.builders import validate_line

BASE = '[trigger]\nkind = "cron"\nexpr = "0 3 * * *"\n[target]\nurl = "https://etl.example.com/nightly"\n'

WRONG = [
    ('completion = "callback"\n', "target", 'needs deadline = "6h"'),
    ('deadline = "6h"\n', "target", 'deadline is for completion = "callback" only'),
    ('heartbeat_timeout = "5m"\n', "target", 'heartbeat_timeout is for completion = "callback" only'),
    ('completion = "callback"\ndeadline = "8d"\n', "target.deadline", "longer than 7d"),
    ('completion = "callback"\ndeadline = "1.5h"\n', "target.deadline", "whole numbers only"),
    ('completion = "callback"\ndeadline = "0s"\n', "target.deadline", "it is zero"),
    ('completion = "callback"\ndeadline = "6H"\n', "target.deadline", "units are lower-case"),
    ('completion = "callback"\ndeadline = 3600\n', "target.deadline", "string"),
    ('completion = "callback"\ndeadline = "20s"\ntimeout_seconds = 30\n', "target", "not longer than timeout_seconds"),
    ('completion = "callback"\ndeadline = "1h"\nheartbeat_timeout = "1h"\n', "target", "not shorter than deadline"),
    (
        'completion = "callback"\ndeadline = "1h"\nheartbeat_timeout = "99999999999999999s"\n',
        "target.heartbeat_timeout",
        "",
    ),
    ('completion = "webhook"\n', "target.completion", "'response' or 'callback'"),
    ('completion = "callback\\u0000"\ndeadline = "1h"\n', "target.completion", ""),
]


@pytest.mark.parametrize(("extra", "key", "piece"), WRONG)
def test_a_wrong_combination_is_one_line_with_its_key_and_fix(tmp_path: Path, extra: str, key: str, piece: str) -> None:
    line, _err = validate_line(tmp_path, BASE + extra)
    assert f": {key}: " in line and piece in line, line


def test_a_callback_task_is_stored_as_written_and_a_response_task_keeps_its_hash(tmp_path: Path) -> None:
    root = tmp_path / "tasks.d"
    root.mkdir()
    (root / "job.toml").write_text(BASE + 'completion = "callback"\ndeadline = "7d"\nheartbeat_timeout = "10m"\n')
    (root / "plain.toml").write_text(BASE + 'completion = "response"\n')
    (root / "bare.toml").write_text(BASE)
    loaded = load_dir(root, "tasks.d")
    assert loaded.errors == []
    found = {task.id: task for task in loaded.tasks}
    target = found["job"].normalized["target"]
    assert (target["completion"], target["deadline"], target["heartbeat_timeout"]) == ("callback", "7d", "10m")
    assert found["job"].spec.target.deadline_seconds == 7 * 86400
    assert found["job"].spec.target.heartbeat_seconds == 600
    assert "completion" not in found["plain"].normalized["target"]
    assert found["plain"].spec_hash == found["bare"].spec_hash
