"""plan / apply / export / status / watch / db init as a user runs them (real subprocesses, real PostgreSQL)."""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import signal
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.builders import clean_env, reconciler_argv, run_reconciler
from tests.helpers import Output, wait_until
from tests.pgcontrol import needs_pgserver, stop_embedded

ROOT = Path(__file__).parent.parent.parent
EXAMPLES = ROOT / "tasks.d"


def project(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES, tmp_path / "tasks.d")
    return tmp_path


def test_plan_detailed_exitcode_apply_then_noop(dsn: str, tmp_path: Path) -> None:
    cwd = project(tmp_path)
    planned = run_reconciler("plan", "--detailed-exitcode", cwd=cwd, dsn=dsn)
    assert planned.returncode == 2, planned.stderr
    assert "+ create billing/invoices" in planned.stdout
    assert "Plan: 5 to create, 0 to update, 0 to move, 0 to delete, 0 unchanged." in planned.stdout
    applied = run_reconciler("apply", cwd=cwd, dsn=dsn)
    assert applied.returncode == 0, applied.stderr
    assert "Apply complete: 5 change(s) written." in applied.stdout
    again = run_reconciler("plan", "--detailed-exitcode", cwd=cwd, dsn=dsn)
    assert again.returncode == 0 and "No changes." in again.stdout


def test_saved_plan_apply_and_stale_refusal(dsn: str, tmp_path: Path) -> None:
    cwd = project(tmp_path)
    assert run_reconciler("plan", "--out", "plan.json", cwd=cwd, dsn=dsn).returncode == 0
    saved = json.loads((cwd / "plan.json").read_text())
    assert saved["format_version"] == 2 and saved["summary"]["create"] == 5
    assert run_reconciler("apply", "plan.json", cwd=cwd, dsn=dsn).returncode == 0
    stale = run_reconciler("apply", "plan.json", cwd=cwd, dsn=dsn)  # the database moved on since the plan
    assert stale.returncode == 1 and "stale" in stale.stderr and "Traceback" not in stale.stderr
    bogus = cwd / "bogus.json"
    bogus.write_text("{}")
    refused = run_reconciler("apply", str(bogus), cwd=cwd, dsn=dsn)
    assert refused.returncode == 1 and "not a reconciler plan" in refused.stderr


def test_invalid_file_aborts_apply_with_all_errors(dsn: str, tmp_path: Path) -> None:
    cwd = project(tmp_path)
    (cwd / "tasks.d" / "broken.toml").write_text("[trigger]\nkind = 'cron'\nexpr = 'nope'\n")
    (cwd / "tasks.d" / "broken2.toml").write_text("x = [")
    done = run_reconciler("apply", cwd=cwd, dsn=dsn)
    assert done.returncode == 1
    assert "tasks.d/broken.toml:3: trigger.expr" in done.stderr
    assert "tasks.d/broken2.toml:1: toml" in done.stderr
    assert "Traceback" not in done.stderr
    with psycopg.connect(dsn) as conn:  # files with errors leave the database as it was, schema included
        assert conn.execute("SELECT to_regnamespace('scheduler')").fetchone() == (None,)


def test_export_round_trip_shows_no_changes(dsn: str, tmp_path: Path) -> None:
    cwd = project(tmp_path)
    assert run_reconciler("apply", cwd=cwd, dsn=dsn).returncode == 0
    exported = run_reconciler("export", "--out-dir", "exported", cwd=cwd, dsn=dsn)
    assert exported.returncode == 0, exported.stderr
    text = (cwd / "exported" / "ops" / "monthly-report.toml").read_text()
    assert tomllib.loads(text)["target"]["auth"]["client_secret"] == {"env": "IDP_CLIENT_SECRET"}
    assert 'client_secret = { env = "IDP_CLIENT_SECRET" }' in text.splitlines()  # a reference, inline, as written
    again = run_reconciler("--tasks-dir", "exported", "plan", "--detailed-exitcode", cwd=cwd, dsn=dsn)
    assert again.returncode == 0, again.stdout + again.stderr


def test_status_json_and_text(dsn: str, tmp_path: Path) -> None:
    cwd = project(tmp_path)
    assert run_reconciler("apply", cwd=cwd, dsn=dsn).returncode == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE scheduler.tasks SET spec = spec || '{\"description\": \"x\"}' WHERE id = 'ops/cache-warm'")
    done = run_reconciler("status", "--format", "json", cwd=cwd, dsn=dsn)
    data = json.loads(done.stdout)
    by_id = {t["id"]: t for t in data["tasks"]}
    assert set(by_id) == {"billing/invoices", "ops/cache-warm", "ops/monthly-report", "ops/ping", "ops/xmas-banner"}
    assert by_id["ops/cache-warm"]["drift"] is True and by_id["billing/invoices"]["drift"] is False
    assert by_id["billing/invoices"]["next_run_local"].endswith("+01:00")  # ISO with the offset in json
    text = run_reconciler("status", cwd=cwd, dsn=dsn).stdout
    flags = {ln.split()[0]: ln.split()[1:] for ln in text.splitlines() if ln.startswith(("billing/", "ops/"))}
    assert set(flags) == set(by_id), text
    assert [task_id for task_id, cells in flags.items() if "DRIFT" in cells] == ["ops/cache-warm"], text


def test_bad_dsn_is_one_line(tmp_path: Path) -> None:
    done = run_reconciler(
        "--dsn", "postgresql://u:topsecret@127.0.0.1:1/x?connect_timeout=2", "plan", cwd=project(tmp_path)
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot connect to PostgreSQL")
    assert "topsecret" not in done.stderr


def test_file_errors_come_before_an_unreachable_database(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    (cwd / "tasks.d" / "broken.toml").write_text("x = \n")
    for command in ("plan", "apply"):
        done = run_reconciler("--dsn", "postgresql://u@127.0.0.1:1/x?connect_timeout=2", command, cwd=cwd)
        assert done.returncode == 1
        assert "tasks.d/broken.toml:1" in done.stderr and "cannot connect" not in done.stderr, done.stderr


def test_db_init_twice(dsn: str, tmp_path: Path) -> None:
    assert run_reconciler("db", "init", cwd=tmp_path, dsn=dsn).returncode == 0
    assert run_reconciler("db", "init", cwd=tmp_path, dsn=dsn).returncode == 0


def test_watch_applies_edits_and_survives_invalid_ones(dsn: str, tmp_path: Path) -> None:
    cwd = project(tmp_path)
    proc = subprocess.Popen(
        reconciler_argv("watch", "--debounce-ms", "100"),
        cwd=cwd,
        env=clean_env(dsn, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, errors = Output(proc.stdout), Output(proc.stderr)

    def expr_in_db() -> str | None:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT spec->'trigger'->>'expr' FROM scheduler.tasks WHERE id = 'billing/invoices'"
            ).fetchone()
        return row[0] if row else None

    def hook_in_db() -> str | None:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT spec->>'url' FROM scheduler.notifiers WHERE name = 'oncall'").fetchone()
        return row[0] if row else None

    def wait_for(check: Callable[[], object], seconds: float = 20) -> bool:
        def tolerant() -> object:
            try:
                return check()
            except psycopg.Error:  # the schema may not exist yet
                return False

        return wait_until(tolerant, seconds, step=0.2)

    try:
        assert wait_for(lambda: expr_in_db() == "30 2 * * 1-5"), "initial apply did not happen"
        path = cwd / "tasks.d" / "billing" / "invoices.toml"
        (cwd / "tasks.d" / "oops.toml").write_text("this is = = not toml")
        assert wait_for(lambda: "nothing applied, still watching" in "\n".join(errors.lines)), errors.lines
        assert proc.poll() is None, "watch died on an invalid file"
        (cwd / "tasks.d" / "oops.toml").unlink()
        path.write_text(path.read_text().replace("30 2 * * 1-5", "45 3 * * 1-5"))
        assert wait_for(lambda: expr_in_db() == "45 3 * * 1-5"), "edit was not applied"
        # notifiers.d, made after the watch started, is watched too: its creation and then an edit in it.
        notifiers = cwd / "notifiers.d"
        notifiers.mkdir()
        (notifiers / "oncall.toml").write_text('kind = "webhook"\nurl = "https://hooks.example.com/a"\n')
        assert wait_for(lambda: hook_in_db() == "https://hooks.example.com/a"), (out.lines, errors.lines)
        (notifiers / "oncall.toml").write_text('kind = "webhook"\nurl = "https://hooks.example.com/b"\n')
        assert wait_for(lambda: hook_in_db() == "https://hooks.example.com/b"), (out.lines, errors.lines)
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        out.join()
        errors.join()
    assert code == 0, errors.lines  # Ctrl-C is the normal way to stop a watch
    stderr, stdout = "\n".join(errors.lines), "\n".join(out.lines)
    assert "tasks.d/oops.toml:1: toml: syntax error" in stderr
    assert "Plan: 5 to create" in stdout and "1 to update" in stdout
    assert "; notifiers: 1 to create, 0 to update, 0 to delete." in stdout
    assert "; notifiers: 0 to create, 1 to update, 0 to delete." in stdout
    assert "Traceback" not in stderr


@pytest.mark.skipif(importlib.util.find_spec("pgserver") is not None, reason="pgserver is installed here")
def test_without_pgserver_the_embedded_database_is_a_one_line_error(tmp_path: Path) -> None:
    planned = run_reconciler("plan", cwd=project(tmp_path))
    assert planned.returncode == 1 and "Traceback" not in planned.stderr
    assert "the embedded PostgreSQL needs the pgserver package" in planned.stderr
    assert "pass --dsn or set RECONCILER_DSN" in planned.stderr


@needs_pgserver
def test_embedded_database_when_no_dsn(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    try:
        planned = run_reconciler("plan", cwd=cwd)
        assert planned.returncode == 0, planned.stderr
        assert "5 to create" in planned.stdout
        applied = run_reconciler("apply", cwd=cwd)
        assert applied.returncode == 0, applied.stderr
        assert (cwd / ".reconciler" / "pgdata" / "PG_VERSION").exists()
        assert "No changes." in run_reconciler("plan", cwd=cwd).stdout
    finally:
        stop_embedded(cwd / ".reconciler")


def hint_of(exported: subprocess.CompletedProcess[str]) -> list[str]:
    """The command export prints to review what it wrote, as argv (after `reconciler`)."""
    argv = shlex.split(exported.stdout.rsplit("review them with: ", 1)[1].strip())
    assert argv[0] == "reconciler", exported.stdout
    return argv[1:]


def test_exports_hint_run_literally_shows_no_changes(dsn: str, tmp_path: Path) -> None:
    cwd = project(tmp_path)
    env = clean_env()  # the database named by --dsn only: the hint must name it too
    assert run_reconciler("--dsn", dsn, "apply", cwd=cwd, env=env).returncode == 0
    exported = run_reconciler("--dsn", dsn, "export", "--out-dir", "exported/tasks.d", cwd=cwd, env=env)
    assert exported.returncode == 0, exported.stderr
    again = run_reconciler(*hint_of(exported), cwd=cwd, env=env)
    assert again.returncode == 0, again.stderr
    assert "No changes." in again.stdout
    assert not (cwd / "exported" / ".reconciler").exists()


def test_plan_of_a_tasks_dir_elsewhere_refuses_to_start_a_new_embedded_database(tmp_path: Path) -> None:
    cwd = project(tmp_path / "proj")
    shutil.copytree(EXAMPLES, tmp_path / "elsewhere" / "tasks.d")
    planned = run_reconciler("plan", "--tasks-dir", str(tmp_path / "elsewhere" / "tasks.d"), cwd=cwd)
    assert planned.returncode == 1
    lines = planned.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no embedded PostgreSQL for"), planned.stderr
    assert "--dsn" in lines[0] and "run it from the project" in lines[0]
    assert not (tmp_path / "elsewhere" / ".reconciler").exists()


@needs_pgserver
def test_export_hint_and_plans_elsewhere_use_the_projects_embedded_database(tmp_path: Path) -> None:
    cwd = project(tmp_path / "proj")
    shutil.copytree(EXAMPLES, tmp_path / "elsewhere" / "tasks.d")
    try:
        assert run_reconciler("apply", cwd=cwd).returncode == 0
        exported = run_reconciler("export", "--out-dir", "exported/tasks.d", cwd=cwd)
        assert exported.returncode == 0, exported.stderr
        again = run_reconciler(*hint_of(exported), cwd=cwd)
        assert again.returncode == 0 and "No changes." in again.stdout, again.stdout + again.stderr
        outside = run_reconciler("plan", "--tasks-dir", str(tmp_path / "elsewhere" / "tasks.d"), cwd=cwd)
        assert "No changes." in outside.stdout, outside.stdout + outside.stderr
        assert "creating the embedded PostgreSQL" not in again.stderr + outside.stderr
        assert not (cwd / "exported" / ".reconciler").exists() and not (tmp_path / "elsewhere" / ".reconciler").exists()
    finally:
        stop_embedded(cwd / ".reconciler")
