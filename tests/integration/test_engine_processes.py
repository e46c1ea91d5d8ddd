"""Real engine processes against one database: exactly-once claim and max_running_instances across replicas."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from reconciler.db.store import Store
from reconciler.files.tasks import load_dir
from reconciler.reconcile.apply import apply_tasks
from tests.builders import run_reconciler, soon, start_engines, stop, wait_registered
from tests.helpers import finished_runs, leases, wait_until
from tests.httpserver import Recorder
from tests.pgcontrol import PrivateServer, needs_pgserver


def statuses(dsn: str) -> Counter[str]:
    with psycopg.connect(dsn) as conn:
        return Counter(r[0] for r in conn.execute("SELECT status FROM scheduler.runs"))


async def test_three_engine_processes_fire_500_occurrences_exactly_once(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = start_engines(dsn, ["proc-0", "proc-1", "proc-2"], logs, "--batch", "25",
                          env={"ENGINE_SECRET": "engine-secret-xyz"})  # fmt: skip
    try:
        due = soon(wait_registered(dsn, procs), 1)
        for i in range(500):
            (tmp_path / f"o{i:03d}.toml").write_text(
                f'[trigger]\nkind = "once"\nat = {due}\n'
                f'[target]\nurl = "{url}/once/{i}"\n[policy]\nmisfire_grace_seconds = 300\n'
            )
        await apply_tasks(store, load_dir(tmp_path, "tasks.d").tasks, "default", datetime.now(UTC))
        assert wait_until(lambda: finished_runs(dsn) >= 500, 120), f"only {finished_runs(dsn)} runs finished"
    finally:
        results = stop(procs)
    assert [code for code, _ in results] == [0, 0, 0], [err[-2000:] for _, err in results]
    keys = Counter(r.headers["Idempotency-Key"] for r in rec.paths("/once"))
    assert len(keys) == 500 and set(keys.values()) == {1}
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT task_id, status, engine_id FROM scheduler.runs").fetchall()
    assert len(rows) == 500 and len({r[0] for r in rows}) == 500
    assert {r[1] for r in rows} == {"succeeded"}
    engines = Counter(r[2] for r in rows)
    assert len(engines) >= 2, engines  # the work really was shared
    assert all("engine-secret-xyz" not in err for _, err in results)


async def test_max_running_instances_holds_across_two_processes(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/slow", delay=1.5)
    procs = start_engines(dsn, ["proc-0", "proc-1"], tmp_path)
    try:
        wait_registered(dsn, procs)
        (tmp_path / "tasks" / "slow.toml").parent.mkdir()
        (tmp_path / "tasks" / "slow.toml").write_text(
            f'[trigger]\nkind = "interval"\nseconds = 1\n[target]\nurl = "{url}/slow"\ntimeout_seconds = 10\n'
            "[policy]\nmax_running_instances = 1\nmisfire_grace_seconds = 30\n"
        )
        await apply_tasks(store, load_dir(tmp_path / "tasks", "tasks.d").tasks, "default", datetime.now(UTC))

        def both_engines_claimed_and_the_limit_skipped() -> bool:
            with psycopg.connect(dsn) as conn:
                engines = {row[0] for row in conn.execute("SELECT engine_id FROM scheduler.runs")}
            done = statuses(dsn)
            return engines == {"proc-0", "proc-1"} and done["succeeded"] >= 2 and done["skipped"] >= 2

        assert wait_until(both_engines_claimed_and_the_limit_skipped, 120), statuses(dsn)
    finally:
        results = stop(procs)
    assert [code for code, _ in results] == [0, 0], [err[-2000:] for _, err in results]
    assert rec.max_in_flight.get("/slow") == 1  # never two at once, across both processes
    assert leases(dsn) == 0


async def test_sigterm_drains_the_run_in_flight_then_exits_0(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/slow", delay=2.0)
    procs = start_engines(dsn, ["proc-0"], tmp_path)
    try:
        (tmp_path / "tasks").mkdir()
        (tmp_path / "tasks" / "slow.toml").write_text(
            f'[trigger]\nkind = "once"\nat = {soon(wait_registered(dsn, procs), 1)}\n'
            f'[target]\nurl = "{url}/slow"\ntimeout_seconds = 10\n[policy]\nmisfire_grace_seconds = 300\n'
        )
        await apply_tasks(store, load_dir(tmp_path / "tasks", "tasks.d").tasks, "default", datetime.now(UTC))
        assert wait_until(lambda: rec.in_flight.get("/slow", 0) == 1, 60), "the request never started"
    finally:
        [(code, err)] = stop(procs)  # SIGTERM while the request is in flight
    assert code == 0, err
    with psycopg.connect(dsn) as conn:
        run = conn.execute("SELECT status, http_status FROM scheduler.runs").fetchall()
        engines = conn.execute("SELECT engine_id FROM scheduler.engines").fetchall()
    assert run == [("succeeded", 200)]  # drained and recorded, not lost
    assert engines == [] and leases(dsn) == 0  # said goodbye, freed its slot


@needs_pgserver
def test_an_engine_started_while_the_database_is_down_waits_and_then_fires(
    http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    server = PrivateServer(tmp_path / "pg")
    server.stop()
    try:
        [engine] = start_engines(server.dsn, ["patient"], tmp_path)
        assert wait_until(lambda: "database unavailable" in engine.output(), 60), engine.output()
        assert engine.proc.poll() is None  # still there, retrying: no crash loop
        server.start()
        wait_registered(server.dsn, [engine])
        # One line when the wait started (naming the variable the DSN came from), one when it ended.
        assert wait_until(lambda: "database reachable after" in engine.output(), 60), engine.output()
        assert engine.output().count("database unavailable") == 1, engine.output()
        assert "from RECONCILER_DSN" in engine.output() and "check --dsn" not in engine.output()
        (tmp_path / "tasks.d").mkdir()
        (tmp_path / "tasks.d" / "late.toml").write_text(
            f'[trigger]\nkind = "once"\nat = 2099-01-01T00:00:00Z\n[target]\nurl = "{url}/late"\n'
        )
        # A manual run fires at the engine's next claim, however long the apply took on a loaded machine.
        for command in (["apply"], ["trigger", "late"]):
            run_reconciler("--dsn", server.dsn, "--tasks-dir", str(tmp_path / "tasks.d"), *command, ok=True)
        assert wait_until(lambda: finished_runs(server.dsn) >= 1, 60)
        [(code, output)] = stop([engine])
        assert code == 0, output[-2000:]
        assert len(rec.paths("/late")) == 1
    finally:
        if server.running():
            server.stop()
