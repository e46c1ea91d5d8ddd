"""`validate` and `next` as a user runs them: a real subprocess, exit codes, no tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

from tests.builders import run_reconciler

ROOT = Path(__file__).parent.parent.parent
BAD = ROOT / "tests" / "fixtures" / "bad" / "tasks.d"


def test_validate_good_examples_exit_0() -> None:
    done = run_reconciler("validate", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "5 task file(s)" in done.stdout


def test_validate_bad_files_all_reported_exit_1_no_traceback() -> None:
    done = run_reconciler("--tasks-dir", str(BAD), "validate", cwd=ROOT)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if ".toml:" in line]
    assert len(lines) == 10
    assert all(line.startswith(str(BAD)) for line in lines)


def test_next_json_shape_and_dst_notes() -> None:
    done = run_reconciler(
        "next", "billing/invoices", "--count", "3", "--after", "2026-03-26T12:00:00Z", "--format", "json", cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data == [
        {
            "id": "billing/invoices",
            "fire_times": ["2026-03-27T02:30:00+01:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"],
            "dst": [],
        }
    ]


def test_next_text_marks_dst_adjusted(tmp_path: Path) -> None:
    (tmp_path / "gap.toml").write_text(
        'timezone = "Europe/Berlin"\n[trigger]\nkind = "cron"\nexpr = "30 2 * * *"\n[target]\nurl = "http://127.0.0.1:9/"\n'
    )
    done = run_reconciler(
        "--tasks-dir", str(tmp_path), "next", "--count", "2", "--after", "2026-03-28T12:00:00+01:00", cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "2026-03-29 03:00:00 CEST (2026-03-29 01:00:00 UTC)  [DST: 2026-03-29 02:30 does not exist" in done.stdout
    json_done = run_reconciler(
        "--tasks-dir",
        str(tmp_path),
        "next",
        "--count",
        "1",
        "--format",
        "json",
        "--after",
        "2026-03-28T12:00:00+01:00",
        cwd=ROOT,
    )
    assert json.loads(json_done.stdout)[0]["dst"][0].startswith(
        "2026-03-29T01:00:00+00:00: 2026-03-29 02:30 does not exist"
    )


def test_next_unknown_id_and_bad_after_are_one_line_errors() -> None:
    done = run_reconciler("next", "nope/task", cwd=ROOT)
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0 and "unknown task id" in done.stderr
    done = run_reconciler("next", "--after", "yesterday", cwd=ROOT)
    assert done.returncode == 1 and "--after" in done.stderr and "Traceback" not in done.stderr
