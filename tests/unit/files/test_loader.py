"""The loader: ids from paths, every error as `path:LINE: key: message`, nothing raised."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.files.tasks import load_dir, load_text

BAD = Path(__file__).parents[2] / "fixtures" / "bad" / "tasks.d"
GOOD = """
[trigger]
kind = "cron"
expr = "0 * * * *"

[target]
url = "http://127.0.0.1:9/x"
"""

# file → (line, key, words the message must contain)
EXPECTED = {
    "unknown-key.toml": (4, "trigger.colour", "unknown key 'colour'"),
    "wrong-type.toml": (1, "enabled", "boolean"),
    "bad-cron.toml": (3, "trigger.expr", "cron field minute: 61 is out of range 0-59"),
    "unknown-zone.toml": (1, "timezone", "unknown time zone 'Mars/Olympus'"),
    "end-before-start.toml": (5, "trigger.end_at", "must be after start_at"),
    "literal-secret.toml": (10, "target.auth.token", "literal secret"),
    "json-and-body.toml": (5, "target", "not both"),
    "syntax-error.toml": (5, "toml", "syntax error, column"),
    "Bad_ID.toml": (0, "id", "rename the file"),
    "empty.toml": (0, "(file)", "empty task file"),
}


def test_every_bad_fixture_reports_its_own_line() -> None:
    result = load_dir(BAD, "tasks.d")
    assert result.tasks == []
    by_file = {e.path.removeprefix("tasks.d/"): e for e in result.errors}
    assert set(by_file) == set(EXPECTED)
    assert len(result.errors) == len(EXPECTED)
    for name, (line, key, words) in EXPECTED.items():
        error = by_file[name]
        assert (error.line, error.key) == (line, key), str(error)
        assert words in error.message, str(error)
        assert str(error).startswith(f"tasks.d/{name}:{line}: {key}: ")


def test_literal_secret_value_is_not_echoed() -> None:
    result = load_dir(BAD, "tasks.d")
    assert all("hunter2" not in str(e) for e in result.errors)


def test_ids_come_from_paths_and_ignored_names_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "billing").mkdir()
    (tmp_path / "billing" / "invoices.toml").write_text(GOOD)
    (tmp_path / "_draft.toml").write_text("not toml at all [")
    (tmp_path / ".hidden.toml").write_text("x")
    (tmp_path / "_wip").mkdir()
    (tmp_path / "_wip" / "a.toml").write_text("x")
    result = load_dir(tmp_path, "tasks.d")
    assert result.errors == []
    assert [t.id for t in result.tasks] == ["billing/invoices"]
    assert result.tasks[0].path == "tasks.d/billing/invoices.toml"


def test_defaults_are_filled_in_the_normalized_spec() -> None:
    task, errors = load_text("a", "tasks.d/a.toml", GOOD)
    assert errors == [] and task is not None
    spec = task.normalized
    assert spec["timezone"] == "UTC" and spec["enabled"] is True
    assert spec["target"]["method"] == "POST" and spec["target"]["timeout_seconds"] == 30
    assert spec["policy"] == {
        "misfire_grace_seconds": 60,
        "coalesce": True,
        "max_running_instances": 1,
        "retries": 0,
        "retry_backoff_seconds": 5,
        "jitter_seconds": 0,
        "dst_gap": "shift",
    }
    assert task.spec_hash.startswith("sha256:")


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ('[trigger]\nkind = "weekly"\n[target]\nurl = "http://x.y"\n', "trigger.kind", "unknown kind 'weekly'"),
        ('[trigger]\nkind = "cron"\nexpr = "* * * *"\n[target]\nurl = "http://x.y"\n', "trigger.expr", "5 fields"),
        (
            '[trigger]\nkind = "interval"\nevery = "5 weeks"\n[target]\nurl = "http://x.y"\n',
            "trigger.every",
            "duration",
        ),
        ('[trigger]\nkind = "interval"\n[target]\nurl = "http://x.y"\n', "trigger", "exactly one of"),
        (
            '[trigger]\nkind = "calendar"\nunit = "days"\nat = "09:30"\n[target]\nurl = "http://x.y"\n',
            "trigger",
            "start_at",
        ),
        (
            '[trigger]\nkind = "calendar"\nunit = "days"\nat = "25:00"\nstart_at = 2026-01-01\n[target]\n'
            'url = "http://x.y"\n',
            "trigger.at",
            "time of day",
        ),
        ('[trigger]\nkind = "once"\nat = 2026-01-01T00:00:00Z\n[target]\nurl = "ftp://x.y"\n', "target.url", "http"),
        (
            '[trigger]\nkind = "once"\nat = 2026-01-01T00:00:00Z\n[target]\nurl = "http://x.y"\nmethod = "FETCH"\n',
            "target.method",
            "HTTP method",
        ),
        (
            '[trigger]\nkind = "once"\nat = 2026-01-01T00:00:00Z\n[target]\nurl = "http://x.y"\n'
            "timeout_seconds = 4000\n",
            "target.timeout_seconds",
            "3600",
        ),
        (
            '[trigger]\nkind = "once"\nat = 2026-01-01T00:00:00Z\n[target]\nurl = "http://x.y"\n'
            'headers = { Authorization = "Bearer abc" }\n',
            "target.headers",
            "literal Authorization",
        ),
        (
            '[trigger]\nkind = "once"\nat = 2026-01-01T00:00:00Z\n[target]\nurl = "http://x.y"\n[target.auth]\n'
            'kind = "basic"\nusername = "u"\npassword = "p"\n',
            "target.auth.password",
            "literal secret",
        ),
        (
            '[trigger]\nkind = "once"\nat = 2026-01-01T00:00:00Z\n[target]\nurl = "http://x.y"\n[target.auth]\n'
            'kind = "oauth2_client_credentials"\ntoken_url = "http://i.d/t"\nclient_id = "c"\nclient_secret = "s"\n',
            "target.auth.client_secret",
            "literal secret",
        ),
        (
            '[trigger]\nkind = "once"\nat = 2026-01-01T00:00:00Z\n[target]\nurl = "http://x.y"\n[policy]\n'
            'dst_gap = "later"\n',
            "policy.dst_gap",
            "shift",
        ),
        (
            '[trigger]\nkind = "once"\nat = 2026-01-01T00:00:00Z\n[target]\nurl = "http://x.y"\n'
            'headers = { X-Key = { env = "1BAD" } }\n',
            "target.headers.X-Key.env",
            "environment variable name",
        ),
    ],
)
def test_field_errors(text: str, key: str, words: str) -> None:
    task, errors = load_text("t", "tasks.d/t.toml", text)
    assert task is None
    assert any(e.key == key and words in e.message for e in errors), [str(e) for e in errors]
    assert all(e.line > 0 or e.key in ("trigger", "(file)") for e in errors), [str(e) for e in errors]


def test_duplicate_ids_from_moved_from(tmp_path: Path) -> None:
    (tmp_path / "old.toml").write_text(GOOD)
    (tmp_path / "new.toml").write_text('moved_from = "old"\n' + GOOD)
    (tmp_path / "a.toml").write_text('moved_from = "gone"\n' + GOOD)
    (tmp_path / "b.toml").write_text('moved_from = "gone"\n' + GOOD)
    errors = [str(e) for e in load_dir(tmp_path, "tasks.d").errors]
    assert "tasks.d/new.toml:1: moved_from: 'old' still exists as a file; delete it or drop moved_from" in errors
    assert any(e.startswith("tasks.d/b.toml:1: moved_from: 'gone' is already moved to 'a'") for e in errors)


def test_missing_directory_is_an_error(tmp_path: Path) -> None:
    result = load_dir(tmp_path / "nope", "nope")
    assert [e.key for e in result.errors] == ["--tasks-dir"]


def test_example_tasks_dir_is_valid() -> None:
    root = Path(__file__).parents[3] / "tasks.d"
    result = load_dir(root, "tasks.d")
    assert result.errors == []
    assert {t.spec.trigger.kind for t in result.tasks} == {"cron", "interval", "calendar", "once"}
