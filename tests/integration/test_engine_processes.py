"""Real engine processes against one database: exactly-once claim and max_running_instances across replicas."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from reconciler.apply import apply_tasks
from reconciler.loader import load_dir
from reconciler.store import Store
from tests.helpers import finished_runs, wait_until
from tests.httpserver import Recorder


def start_engines(dsn: str, count: int, *extra: str) -> list[subprocess.Popen[str]]:
    env = {**os.environ, "RECONCILER_DSN": dsn, "ENGINE_SECRET": "engine-secret-xyz"}
    return [
        subprocess.Popen(
            [sys.executable, "-m", "reconciler", "engine", "--engine-id", f"proc-{i}", "--max-sleep", "0.5", *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]


def stop(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    results = []
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        results.append((proc.returncode, err))
    return results


async def test_three_engine_processes_fire_500_occurrences_exactly_once(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    due = datetime.now(UTC) + timedelta(seconds=3)
    for i in range(500):
        (tmp_path / f"o{i:03d}.toml").write_text(
            f'[trigger]\nkind = "once"\nat = {due.strftime("%Y-%m-%dT%H:%M:%SZ")}\n'
            f'[target]\nurl = "{url}/once/{i}"\n[policy]\nmisfire_grace_seconds = 300\n'
        )
    loaded = load_dir(tmp_path, "tasks.d")
    await apply_tasks(store, loaded.tasks, "default", datetime.now(UTC))
    procs = start_engines(dsn, 3, "--batch", "25")
    try:
        assert wait_until(lambda: finished_runs(dsn) >= 500, 90), f"only {finished_runs(dsn)} runs finished"
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
    rec.script("/slow", delay=2.5)
    (tmp_path / "slow.toml").write_text(
        f'[trigger]\nkind = "interval"\nseconds = 1\n[target]\nurl = "{url}/slow"\ntimeout_seconds = 10\n'
        "[policy]\nmax_running_instances = 1\nmisfire_grace_seconds = 30\n"
    )
    await apply_tasks(store, load_dir(tmp_path, "tasks.d").tasks, "default", datetime.now(UTC))
    procs = start_engines(dsn, 2)
    try:
        time.sleep(8)
    finally:
        results = stop(procs)
    assert [code for code, _ in results] == [0, 0]
    assert rec.max_in_flight.get("/slow") == 1
    with psycopg.connect(dsn) as conn:
        statuses = Counter(r[0] for r in conn.execute("SELECT status FROM scheduler.runs"))
        engines = {r[0] for r in conn.execute("SELECT engine_id FROM scheduler.runs")}
    assert statuses["skipped"] >= 3 and statuses["succeeded"] >= 2, statuses
    assert engines == {"proc-0", "proc-1"}


async def test_sigterm_drains_the_run_in_flight_then_exits_0(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/slow", delay=2.0)
    due = datetime.now(UTC) + timedelta(seconds=2)
    (tmp_path / "slow.toml").write_text(
        f'[trigger]\nkind = "once"\nat = {due.strftime("%Y-%m-%dT%H:%M:%SZ")}\n'
        f'[target]\nurl = "{url}/slow"\ntimeout_seconds = 10\n[policy]\nmisfire_grace_seconds = 300\n'
    )
    await apply_tasks(store, load_dir(tmp_path, "tasks.d").tasks, "default", datetime.now(UTC))
    procs = start_engines(dsn, 1)
    try:
        assert wait_until(lambda: rec.in_flight.get("/slow", 0) == 1, 30), "the request never started"
    finally:
        [(code, err)] = stop(procs)  # SIGTERM while the request is in flight
    assert code == 0, err
    with psycopg.connect(dsn) as conn:
        run = conn.execute("SELECT status, http_status FROM scheduler.runs").fetchall()
        engines = conn.execute("SELECT engine_id FROM scheduler.engines").fetchall()
        leases = conn.execute("SELECT run_id FROM scheduler.run_leases").fetchall()
    assert run == [("succeeded", 200)]  # drained and recorded, not lost
    assert engines == [] and leases == []  # said goodbye, freed its slot
