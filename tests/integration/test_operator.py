"""Operator commands do what they say: manual runs that wait for a slot and run, engines scoped to their
sources, one embedded database per project, `down`, Ctrl-C, warnings for failed runs."""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import timedelta
from pathlib import Path

import psycopg

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.targets.http import Firer
from tests.builders import cron, run_reconciler, start_engines, stop, wait_registered
from tests.helpers import wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, runs, setup
from tests.pgcontrol import needs_pgserver


def queue_manual(dsn: str, task_id: str) -> int:
    """What `reconciler trigger` does, at the injected time."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, claimed_at) "
            "VALUES (%s, %s, 'manual', 'queued', 0, %s) RETURNING id",
            (task_id, NOW + timedelta(minutes=5, seconds=1), NOW),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_manual_runs_wait_for_the_slot_and_each_has_its_own_key(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"ops/reindex": cron(f"{url}/reindex", policy="max_running_instances = 1")})
    at = NOW + timedelta(minutes=5, seconds=2)
    scheduled = await engine.claim(at)  # the 12:05 occurrence takes the only slot
    assert [c.kind for c in scheduled.runs] == ["scheduled"]
    first, second = queue_manual(dsn, "ops/reindex"), queue_manual(dsn, "ops/reindex")

    waiting = await engine.claim(at)
    assert waiting.runs == [] and waiting.skipped == 0  # queued, not skipped
    assert [r["status"] for r in runs(dsn) if r["kind"] == "manual"] == ["queued", "queued"]

    await engine.execute(scheduled.runs[0])
    await engine.results.flush()  # the slot is free again
    one = await engine.run_once(at)
    assert [c.run_id for c in one.runs] == [first]  # one at a time, oldest first
    two = await engine.run_once(at)
    assert [c.run_id for c in two.runs] == [second]

    assert [r["status"] for r in runs(dsn)] == ["succeeded"] * 3
    keys = [r.headers["Idempotency-Key"] for r in rec.paths("/reindex")]
    assert keys == ["ops/reindex@2026-12-02T12:05:00Z", f"ops/reindex@manual-{first}", f"ops/reindex@manual-{second}"]


async def test_a_manual_run_of_a_task_at_its_limit_does_not_hold_back_other_tasks(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"busy": cron(f"{url}/busy"), "free": cron(f"{url}/free")})
    firer = Firer(concurrency=5)
    small = Engine(store, EngineConfig("small-batch", batch=2), firer)
    try:
        held = await small.claim(NOW + timedelta(minutes=5))
        assert {c.task_id for c in held.runs} == {"busy", "free"}
        for run in held.runs:
            if run.task_id == "free":
                await small.execute(run)
        await small.results.flush()
        waiting = [queue_manual(dsn, "busy") for _ in range(3)]  # more than a batch, all waiting for busy's slot
        wanted = queue_manual(dsn, "free")
        report = await small.run_once(NOW + timedelta(minutes=5, seconds=3))
        assert [c.run_id for c in report.runs] == [wanted]
        assert len(rec.paths("/free")) == 2 and waiting
    finally:
        await firer.close()


def test_trigger_wait_follows_the_run_and_exits_by_its_result(
    dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/broken", statuses=[500], body=b"upstream exploded")
    tasks = tmp_path / "tasks.d"
    tasks.mkdir()
    later = 'kind = "once"\nat = 2099-01-01T00:00:00Z'
    (tasks / "good.toml").write_text(f'[trigger]\n{later}\n[target]\nurl = "{url}/good"\n')
    (tasks / "bad.toml").write_text(f'[trigger]\n{later}\n[target]\nurl = "{url}/broken"\n')
    run_reconciler("--tasks-dir", str(tasks), "apply", dsn=dsn, ok=True)
    engines = start_engines(dsn, ["waiter"], tmp_path)
    try:
        wait_registered(dsn, engines)
        command = ["--tasks-dir", str(tasks), "trigger", "--wait"]
        bad = run_reconciler(*command, "bad", dsn=dsn)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert "failed (HTTP 500" in bad.stdout and "response: upstream exploded" in bad.stdout
        good = run_reconciler(*command, "good", dsn=dsn)
        assert good.returncode == 0, good.stdout + good.stderr
        assert "succeeded (HTTP 200" in good.stdout
    finally:
        [(code, output)] = stop(engines)
    assert code == 0, output[-2000:]
    # A failure is a WARNING with status, reason and attempt; a success is INFO.
    assert "WARNING reconciler.engine: run bad (manual" in output and "failed: HTTP 500, attempt 1" in output
    assert "INFO reconciler.engine: run good (manual" in output


def test_cancel_only_a_queued_run(dsn: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.d"
    tasks.mkdir()
    (tasks / "x.toml").write_text(
        '[trigger]\nkind = "cron"\nexpr = "@yearly"\n[target]\nurl = "http://127.0.0.1:9/x"\n'
    )
    base = ["--tasks-dir", str(tasks)]
    run_reconciler(*base, "apply", dsn=dsn, ok=True)
    queued = run_reconciler(*base, "trigger", "x", dsn=dsn, ok=True).stdout
    run_id = queued.split()[3]
    assert f"cancelled manual run {run_id} of x" in run_reconciler(*base, "cancel", run_id, dsn=dsn, ok=True).stdout
    again = run_reconciler(*base, "cancel", run_id, dsn=dsn)
    assert again.returncode == 1 and again.stderr.startswith(f"error: run {run_id} is skipped, not queued")
    [row] = runs(dsn, "x")
    assert row["status"] == "skipped" and "cancelled" in str(row["error"])


def test_an_engine_scoped_to_a_source_never_fires_another_sources_task(
    dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    for source in ("a", "b"):
        folder = tmp_path / source / "tasks.d"
        folder.mkdir(parents=True)
        (folder / f"{source}-every-second.toml").write_text(
            f'[trigger]\nkind = "interval"\nseconds = 1\n[target]\nurl = "{url}/{source}"\n'
        )
        run_reconciler("--source", source, "--tasks-dir", str(folder), "apply", dsn=dsn, ok=True)
    run_reconciler("--tasks-dir", str(tmp_path / "b" / "tasks.d"), "trigger", "b-every-second", dsn=dsn, ok=True)
    engines = start_engines(dsn, ["scoped"], tmp_path, global_args=["--source", "a"])
    try:
        wait_registered(dsn, engines)
        assert wait_until(lambda: len(rec.paths("/a")) >= 3, 60)
    finally:
        [(code, output)] = stop(engines)
    assert code == 0, output[-2000:]
    assert rec.paths("/b") == []
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT status, count(*) FROM scheduler.runs WHERE task_id = 'b-every-second' GROUP BY 1")
        assert dict(rows.fetchall()) == {"queued": 1}  # b's manual run waits for an engine of b


@needs_pgserver
def test_the_embedded_database_belongs_to_the_project_wherever_the_command_runs(tmp_path: Path) -> None:
    project = tmp_path / "team"
    billing = project / "tasks.d" / "billing"
    billing.mkdir(parents=True)
    (billing / "invoices.toml").write_text(
        '[trigger]\nkind = "cron"\nexpr = "0 2 * * *"\n[target]\nurl = "http://127.0.0.1:9/i"\n'
    )
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    try:
        applied = run_reconciler("apply", cwd=project, timeout=180)
        assert applied.returncode == 0, applied.stderr
        status = run_reconciler("status", cwd=billing, timeout=180)
        assert status.returncode == 0, status.stderr
        assert "billing/invoices" in status.stdout
        assert f"embedded PostgreSQL in {project / '.reconciler' / 'pgdata'}" in status.stdout
        assert not (billing / ".reconciler").exists()
        checked = run_reconciler("validate", cwd=billing)  # the tasks directory is found above, as the database is
        found = project.resolve() / "tasks.d"
        assert checked.returncode == 0, checked.stderr
        assert checked.stdout.strip() == f"1 task file(s) in {found} are valid"
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        stray = run_reconciler(
            "status", cwd=elsewhere, timeout=180
        )  # no project here: an error, not a second, empty database
        assert stray.returncode == 1 and "no tasks directory 'tasks.d' here or above" in stray.stderr
        assert not (elsewhere / ".reconciler").exists()
        assert (project / ".reconciler" / ".gitignore").read_text().strip().endswith("*")
        shown = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True)
        assert ".reconciler" not in shown.stdout  # never shown as untracked
        down = run_reconciler("down", cwd=billing, timeout=180)
        assert down.returncode == 0, down.stderr
        assert down.stdout.startswith(f"stopped the embedded PostgreSQL in {project / '.reconciler' / 'pgdata'}")
        assert not (project / ".reconciler" / "pgdata" / "postmaster.pid").exists()
        assert run_reconciler("down", cwd=project, timeout=180).stdout.startswith("no embedded PostgreSQL is running")
    finally:
        pidfile = project / ".reconciler" / "pgdata" / "postmaster.pid"
        if pidfile.exists():
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGINT)
