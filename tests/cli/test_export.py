"""`reconciler export` against a real PostgreSQL: never over existing files, only non-default keys in the
model's types, no moved_from, no literal secret, and `plan` over the exported files shows no changes."""

from __future__ import annotations

import json
import os
import tomllib
from datetime import date
from pathlib import Path
from typing import Any

import psycopg
import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings

from reconciler.db.rows import TaskRow
from reconciler.files.kinds import spec_hash
from reconciler.files.tasks import load_dir, load_text
from reconciler.reconcile.export import DEFAULT_OUT_DIR, Placeholders, export_row
from tests.builders import cli, cron, write_tasks
from tests.cli.test_fuzz_files import boundary_task

INVOICES = """# Nightly invoices (a comment export cannot know about)
description = "Nightly invoice run on weekdays"
timezone = "Europe/Berlin"
labels = { team = "billing" }

[trigger]
kind = "cron"
expr = "30 2 * * 1-5"

[target]
url = "http://127.0.0.1:9/billing/invoices/run"
headers = { X-Tenant = "eu", X-Api-Key = { env = "BILLING_API_KEY" } }
json = { dry_run = false }
timeout_seconds = 30

[policy]
misfire_grace_seconds = 300
retries = 2
retry_backoff_seconds = 10
"""
# Every key spelled out with its default value: the export of this task is trigger and url only.
DEFAULTS = """description = "defaults"
timezone = "UTC"
enabled = true
labels = {}

[trigger]
kind = "calendar"
every = 1
unit = "days"
at = "09:30"
start_at = 2026-01-01

[target]
url = "http://127.0.0.1:9/defaults"
method = "post"
headers = {}
query = {}
timeout_seconds = 30.0

[policy]
misfire_grace_seconds = 60
coalesce = true
max_running_instances = 1
retries = 0
retry_backoff_seconds = 5
jitter_seconds = 0
dst_gap = "shift"
"""
TYPES = """[trigger]
kind = "interval"
seconds = 90
end_at = 2031-06-30T23:59:59+05:30

[target]
url = "http://127.0.0.1:9/types"
method = "PATCH"
query = { page = "1", api_key = { env = "TYPES_API_KEY" } }
json = { n = 1, x = 1.0, half = 0.5, empty = {}, list = [1, 2.5, "s", { deep = {} }] }
timeout_seconds = 45

[policy]
retries = 3
retry_backoff_seconds = 2.5
keep_runs = 100
"""
UNICODE = '''description = """Zahlläufe – 月次レポート ✓
second line\twith a tab, "quotes" and a \\\\ backslash"""
labels = { owner = "Zoë Ångström", "team name" = "платформа" }

[trigger]
kind = "once"
at = 2030-01-02T03:04:05+05:30

[target]
url = "http://127.0.0.1:9/unicode"
body = "héllo wörld ☃"
'''
EMPTY_JSON = """[trigger]
kind = "cron"
expr = "@daily"

[target]
url = "http://127.0.0.1:9/empty"
json = {}
"""


def apply(dsn: str, tasks: Path) -> str:
    code, out, err = cli(dsn, None, "--tasks-dir", str(tasks), "apply")
    assert code == 0, err
    return out


def plan_changes(dsn: str, tasks: Path) -> dict[str, dict[str, Any]]:
    code, out, err = cli(dsn, None, "--tasks-dir", str(tasks), "plan", "--format", "json")
    assert code == 0, err
    return {change["id"]: change for change in json.loads(out)["changes"]}


def stored(dsn: str, task_id: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT spec FROM scheduler.tasks WHERE id = %s", (task_id,)).fetchone()
    assert row is not None
    spec: dict[str, Any] = row[0]
    return spec


def listing(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def history(dsn: str, tmp_path: Path) -> Path:
    """A database that saw creates, an update, a move and drift; returns its export (--out-dir)."""
    tasks = tmp_path / "tasks.d"
    write_tasks(
        tasks,
        {
            "billing/invoices": INVOICES,
            "ops/old-name": cron("http://127.0.0.1:9/moved"),
            "ops/drifted": cron("http://127.0.0.1:9/drifted"),
            "ops/defaults": DEFAULTS,
            "ops/types": TYPES,
            "ops/unicode": UNICODE,
            "ops/empty-json": EMPTY_JSON,
        },
    )
    assert "Apply complete: 7 change(s) written." in apply(dsn, tasks)
    write_tasks(tasks, {"billing/invoices": INVOICES.replace('"30 2 * * 1-5"', '"45 3 * * 1-5"')})  # an update
    assert "1 change(s)" in apply(dsn, tasks)
    old = tasks / "ops" / "old-name.toml"
    (tasks / "ops" / "new-name.toml").write_text('moved_from = "ops/old-name"\n' + old.read_text())
    old.unlink()
    assert plan_changes(dsn, tasks)["ops/new-name"]["op"] == "move"
    apply(dsn, tasks)
    assert stored(dsn, "ops/new-name")["moved_from"] == "ops/old-name"  # the stored spec keeps it
    with psycopg.connect(dsn, autocommit=True) as conn:  # drift: a change outside the reconciler
        conn.execute(
            "UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{target,url}', '\"http://127.0.0.1:9/edited\"')"
            " WHERE id = 'ops/drifted'"
        )
    out_dir = tmp_path / "exported"
    code, out, err = cli(dsn, None, "export", "--out-dir", str(out_dir))
    assert code == 0 and err == "", err
    assert out.startswith(f"exported 7 task(s) to {out_dir}")
    return out_dir


def test_export_after_creates_update_move_and_drift_plans_no_changes(dsn: str, tmp_path: Path) -> None:
    out_dir = history(dsn, tmp_path)
    changes = plan_changes(dsn, out_dir)
    assert set(changes) == {
        "billing/invoices",
        "ops/new-name",
        "ops/drifted",
        "ops/defaults",
        "ops/types",
        "ops/unicode",
        "ops/empty-json",
    }
    for task_id, change in changes.items():
        if task_id == "ops/drifted":
            # The file holds the row's current (drifted) content, so no field differs; the row's
            # hash no longer matches its content, and the plan's update re-hashes it (no other write).
            assert change["op"] == "update" and change["drift"] is True and change["fields"] == [], change
        else:  # the renamed task too: a finished move's moved_from is not content
            assert change["op"] == "noop" and not change["drift"], change
    # What the files say, read with tomllib: the update, the drift, the model's types, no defaults, no moved_from.
    files = {p.relative_to(out_dir).with_suffix("").as_posix(): p for p in out_dir.rglob("*.toml")}
    assert set(files) == set(changes)
    data = {task_id: tomllib.loads(path.read_text(encoding="utf-8")) for task_id, path in files.items()}
    assert data["billing/invoices"]["trigger"]["expr"] == "45 3 * * 1-5"
    assert "comment" not in files["billing/invoices"].read_text()  # the database never saw the comment
    assert data["ops/drifted"]["target"]["url"] == "http://127.0.0.1:9/edited"
    assert "moved_from" not in data["ops/new-name"]
    types = data["ops/types"]
    assert type(types["target"]["timeout_seconds"]) is int and types["target"]["timeout_seconds"] == 45
    assert type(types["trigger"]["seconds"]) is int and type(types["policy"]["retries"]) is int
    assert type(types["policy"]["retry_backoff_seconds"]) is float and types["policy"]["retry_backoff_seconds"] == 2.5
    assert type(data["billing/invoices"]["policy"]["retry_backoff_seconds"]) is int  # stored as 10.0
    body = types["target"]["json"]  # a JSON body keeps its own types: 1 stays 1, 1.0 stays 1.0
    assert body == {"n": 1, "x": 1.0, "half": 0.5, "empty": {}, "list": [1, 2.5, "s", {"deep": {}}]}
    assert type(body["n"]) is int and type(body["x"]) is float
    assert types["target"]["query"] == {"page": "1", "api_key": {"env": "TYPES_API_KEY"}}
    assert str(types["trigger"]["end_at"]) == "2031-06-30 23:59:59+05:30"
    assert data["ops/defaults"] == {
        "description": "defaults",
        "trigger": {"kind": "calendar", "unit": "days", "at": "09:30", "start_at": date(2026, 1, 1)},
        "target": {"url": "http://127.0.0.1:9/defaults"},
    }
    assert "method" not in data["billing/invoices"]["target"] and "timezone" not in data["ops/new-name"]
    assert data["ops/empty-json"]["target"]["json"] == {}  # an empty body object is not a default
    original = tomllib.loads(UNICODE)
    assert data["ops/unicode"]["description"] == original["description"]
    assert data["ops/unicode"]["labels"] == original["labels"]
    assert data["ops/unicode"]["target"]["body"] == "héllo wörld ☃"
    assert data["ops/unicode"]["trigger"]["at"] == original["trigger"]["at"]
    text = files["billing/invoices"].read_text(encoding="utf-8")  # shaped like a hand-written file
    assert 'headers = { X-Tenant = "eu", X-Api-Key = { env = "BILLING_API_KEY" } }' in text
    # Applying the export re-hashes the drifted row (and drops the finished move's moved_from): then no change.
    apply(dsn, out_dir)
    code, out, err = cli(dsn, None, "--tasks-dir", str(out_dir), "plan", "--detailed-exitcode")
    assert code == 0 and "No changes." in out, out + err


def test_export_of_a_moved_task_plans_no_changes(dsn: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.d"
    write_tasks(tasks, {"new": 'moved_from = "old"\n' + cron("http://127.0.0.1:9/m")})
    write_tasks(tasks.parent / "before", {"old": cron("http://127.0.0.1:9/m")})
    apply(dsn, tasks.parent / "before")
    apply(dsn, tasks)  # the move
    code, _, err = cli(dsn, None, "export", "--out-dir", str(tmp_path / "out"))
    assert code == 0, err
    code, out, err = cli(dsn, None, "--tasks-dir", str(tmp_path / "out"), "plan", "--detailed-exitcode")
    assert code == 0 and "No changes." in out, out + err


def test_export_refuses_to_overwrite_without_force_and_writes_nothing(dsn: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.d"
    write_tasks(tasks, {"a": cron("http://127.0.0.1:9/a"), "b/c": cron("http://127.0.0.1:9/c"), "z": EMPTY_JSON})
    apply(dsn, tasks)
    out_dir = tmp_path / "out"
    write_tasks(out_dir, {"b/c": "# my own file\n", "z": "# mine too\n"})
    before = listing(out_dir)
    code, out, err = cli(dsn, None, "export", "--out-dir", str(out_dir))
    assert code == 1 and out == ""
    assert err == (
        f"error: export: {out_dir / 'b' / 'c.toml'} already exists; pass --force to overwrite it, "
        "or choose an empty --out-dir (nothing was written)\n"
    )
    assert listing(out_dir) == before  # a.toml, checked first but free, was not written either
    # The user's own tasks directory is refused the same way: export never writes over it unasked.
    tasks_before = listing(tasks)
    code, _, err = cli(dsn, None, "export", "--out-dir", str(tasks))
    assert code == 1 and "already exists; pass --force" in err and listing(tasks) == tasks_before


def test_export_force_overwrites_and_replaces_a_symlink_without_following_it(dsn: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.d"
    write_tasks(tasks, {"a": cron("http://127.0.0.1:9/a"), "b": cron("http://127.0.0.1:9/b")})
    apply(dsn, tasks)
    out_dir = tmp_path / "out"
    write_tasks(out_dir, {"a": "# stale\n"})
    outside = tmp_path / "elsewhere.toml"
    outside.write_text("# not the export's to change\n")
    os.symlink(outside, out_dir / "b.toml")
    code, out, err = cli(dsn, None, "export", "--out-dir", str(out_dir), "--force")
    assert code == 0 and err == "" and out.startswith("exported 2 task(s)"), err
    exported = '[trigger]\nkind = "cron"\nexpr = "*/5 * * * *"\n\n[target]\nurl = "http://127.0.0.1:9/a"\n'
    assert (out_dir / "a.toml").read_text() == exported  # as export lays a file out: a blank line between tables
    assert not (out_dir / "b.toml").is_symlink() and "127.0.0.1:9/b" in (out_dir / "b.toml").read_text()
    assert outside.read_text() == "# not the export's to change\n"
    assert sorted(p.name for p in out_dir.iterdir()) == ["a.toml", "b.toml"]  # no temporary file left
    code, out, _ = cli(dsn, None, "--tasks-dir", str(out_dir), "plan", "--detailed-exitcode")
    assert code == 0 and "No changes." in out


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("link", ["billing", "billing/eu"])
def test_export_refuses_to_write_through_a_symlinked_folder_and_writes_nothing(
    dsn: str, tmp_path: Path, force: bool, link: str
) -> None:
    tasks = tmp_path / "tasks.d"
    write_tasks(tasks, {"a": cron("http://127.0.0.1:9/a"), "billing/eu/invoices": cron("http://127.0.0.1:9/i")})
    apply(dsn, tasks)
    out_dir, outside = tmp_path / "out", tmp_path / "elsewhere"
    outside.mkdir()
    (out_dir / link).parent.mkdir(parents=True)
    os.symlink(outside, out_dir / link)  # billing/ -> elsewhere/, or billing/eu/ -> elsewhere/
    before = listing(out_dir)
    code, out, err = cli(dsn, None, "export", "--out-dir", str(out_dir), *(["--force"] if force else []))
    assert code == 1 and out == ""
    assert err == (
        f"error: export: {out_dir / link} is a symlink; export writes no file through one: "
        "remove it or choose another --out-dir (nothing was written)\n"
    )
    assert listing(outside) == {} and listing(out_dir) == before  # a.toml, before it in order, was not written


def test_export_defaults_to_a_new_directory_never_tasks_d(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_tasks(tmp_path / "tasks.d", {"billing/invoices": INVOICES})
    code, _, err = cli(dsn, None, "apply")
    assert code == 0, err
    before = listing(tmp_path / "tasks.d")
    code, out, err = cli(dsn, None, "export")
    assert code == 0, err
    assert DEFAULT_OUT_DIR == "exported.d" and out.startswith("exported 1 task(s) to exported.d")
    assert listing(tmp_path / "tasks.d") == before  # comments and all
    assert (tmp_path / "exported.d" / "billing" / "invoices.toml").is_file()
    code, _, err = cli(dsn, None, "export")  # a second export refuses: the first one's files exist
    assert code == 1 and "exported.d/billing/invoices.toml already exists" in err


def test_export_of_old_rows_hides_literal_secrets_and_keeps_invalid_ones_as_stored(dsn: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.d"
    write_tasks(tasks, {"old/secret": cron("http://127.0.0.1:9/s"), "broken": cron("http://127.0.0.1:9/b")})
    apply(dsn, tasks)
    # Rows as an older version wrote them (hash consistent, no digest): literal credentials the model now refuses.
    spec = stored(dsn, "old/secret")
    spec["target"]["headers"] = {"Authorization": "Bearer hunter2-header", "X-Tenant": "eu"}
    spec["target"]["query"] = {"sig": "hunter2-query", "page": "2"}
    spec["target"]["auth"] = {"kind": "bearer", "token": "hunter2-token"}
    spec["target"]["url"] = "http://admin:hunter2-userinfo@127.0.0.1:9/s?token=hunter2-url&x=1"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE scheduler.tasks SET spec = %s, spec_hash = %s, spec_digest = NULL WHERE id = 'old/secret'",
            (json.dumps(spec), spec_hash(spec)),
        )
        conn.execute(
            "UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{trigger,expr}', '\"nope\"') WHERE id = 'broken'"
        )
    out_dir = tmp_path / "out"
    code, out, err = cli(dsn, None, "export", "--out-dir", str(out_dir))
    assert code == 0 and out.startswith("exported 2 task(s)"), err
    warnings = err.splitlines()
    assert all(line.startswith("warning: ") for line in warnings) and len(warnings) == 6, err
    assert "hunter2" not in out + err + "".join(p.read_text() for p in out_dir.rglob("*.toml"))
    secret = tomllib.loads((out_dir / "old" / "secret.toml").read_text())
    assert secret["target"]["headers"] == {
        "Authorization": {"env": "EXPORTED_OLD_SECRET_HEADER_AUTHORIZATION"},
        "X-Tenant": "eu",
    }
    assert secret["target"]["query"] == {
        "sig": {"env": "EXPORTED_OLD_SECRET_QUERY_SIG"},
        "page": "2",
        "token": {"env": "EXPORTED_OLD_SECRET_QUERY_TOKEN"},
    }
    assert secret["target"]["url"] == "http://127.0.0.1:9/s?x=1"  # userinfo dropped, the token moved to query
    assert secret["target"]["auth"] == {"kind": "bearer", "token": {"env": "EXPORTED_OLD_SECRET_AUTH_TOKEN"}}
    assert any("old/secret: target.headers.Authorization held a literal secret" in w for w in warnings)
    assert any("old/secret: target.auth.token held a literal secret" in w for w in warnings)
    # Decision: a row that no longer validates is written as stored, with a warning; plan then names the
    # file's error instead of planning a delete of the task.
    assert [w for w in warnings if "broken" in w] == [
        "warning: broken: the stored spec no longer validates (trigger.expr: 'nope' has 1 field; cron needs 5 "
        "fields: minute hour day-of-month month day-of-week); written as stored, fix the file before plan or apply"
    ]
    assert tomllib.loads((out_dir / "broken.toml").read_text())["trigger"]["expr"] == "nope"
    code, out, err = cli(dsn, None, "--tasks-dir", str(out_dir), "plan")
    assert code == 1 and f"{out_dir}/broken.toml:" in err and "trigger.expr" in err
    (out_dir / "broken.toml").write_text(cron("http://127.0.0.1:9/b"))
    changes = plan_changes(dsn, out_dir)
    assert changes["old/secret"]["op"] == "update"  # the placeholders replace the literals
    assert {f["path"] for f in changes["old/secret"]["fields"]} == {
        "target.auth.token",
        "target.auth.token.env",
        "target.headers.Authorization",
        "target.headers.Authorization.env",
        "target.query.sig",
        "target.query.sig.env",
        "target.query.token.env",
        "target.url",
    }


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=boundary_task())
def test_exported_file_reloads_to_the_stored_spec(doc: dict[str, Any]) -> None:
    """Whatever validates and is stored, its exported file re-loads with the same hash (no database)."""
    task, _ = load_text("t", "t", tomli_w.dumps(doc))
    if task is None:
        return
    row = TaskRow("t", "default", json.dumps(task.normalized), task.spec_hash, task.spec.enabled, "UTC", None)
    exported = export_row(row, Placeholders())
    assert exported.text is not None and exported.warnings == []
    again, errors = load_text("t", "t", exported.text)
    assert again is not None, errors
    assert again.spec_hash == task.spec_hash


def test_examples_export_like_their_files(tmp_path: Path) -> None:
    """The shipped examples come out as their files minus comments and default values (no database)."""
    root = Path(__file__).parent.parent.parent / "tasks.d"
    for task in load_dir(root).tasks:
        row = TaskRow(task.id, "default", json.dumps(task.normalized), task.spec_hash, True, "UTC", None)
        text = export_row(row, Placeholders()).text
        assert text is not None
        again, _ = load_text(task.id, task.id, text)
        assert again is not None and again.spec_hash == task.spec_hash
        assert "moved_from" not in text and "coalesce" not in text and "dst_gap" not in text


@pytest.mark.parametrize(
    ("spec", "text", "warning"),
    [
        ({"max_in_flight": 4}, "max_in_flight = 4\n", None),
        ({"rate_per_second": 10.0, "burst": 20}, "rate_per_second = 10.0\nburst = 20\n", None),
        ({"max_in_flight": 0}, "max_in_flight = 0\n", "the stored spec no longer validates (max_in_flight: "),
        ([1, 2], None, "skipped, the stored spec is not a table"),
    ],
)
def test_a_limit_row_exports_as_its_file_and_an_odd_one_with_a_warning(
    spec: Any, text: str | None, warning: str | None
) -> None:
    """A limit row as `limits.d/NAME.toml` (no database): its numbers in their types; a row edited by hand into
    something a file cannot say is written as stored or skipped, with a warning naming it."""
    from reconciler.files.limits import LIMITS
    from reconciler.reconcile.diff import StoredRow
    from reconciler.reconcile.export import Placeholders, export_item

    row = StoredRow("default", "billing-api", spec, spec_hash(spec) if isinstance(spec, dict) else "")
    exported = export_item(LIMITS, row, Placeholders())
    assert exported.text == text
    assert [w.startswith(f"limit billing-api: {warning}") for w in exported.warnings] == ([True] if warning else [])
    skipped = export_item(LIMITS, StoredRow("default", "Billing API", {"max_in_flight": 4}, ""), Placeholders())
    assert skipped.text is None and skipped.warnings == ["limit Billing API: skipped, the name cannot be a file name"]
