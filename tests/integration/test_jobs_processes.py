"""Jobs (completion = "callback") with real engine processes and a real target: the target answers 202 and the job
reports later, to any replica; the engine that fired is killed mid-job; a silent job times out and is retried
with the same Idempotency-Key and a new token; max_running_instances spans the whole job."""

from __future__ import annotations

import json
import signal
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from reconciler.db.store import Store
from reconciler.files.tasks import load_dir
from reconciler.reconcile.apply import apply_tasks
from tests.builders import EngineProcess, listening_addr, soon, start_engines, stop, wait_registered
from tests.helpers import wait_until
from tests.httpserver import Recorder

PUBLIC = "https://jobs.example.test/reconciler"
CALLBACK = "X-Reconciler-Callback"


def job_task(url: str, trigger: str, target: str = "", policy: str = "") -> str:
    return (
        f'[trigger]\n{trigger}\n[target]\nurl = "{url}/job"\ncompletion = "callback"\n{target}\n'
        f"[policy]\nmisfire_grace_seconds = 300\n{policy}\n"
    )


def run_row(dsn: str, task_id: str = "job") -> dict[str, Any]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT id, status, attempt, engine_id, accepted_at, heartbeat_at, progress, output, error, retry_at "
            "FROM scheduler.runs WHERE task_id = %s AND status NOT IN ('skipped', 'missed') ORDER BY id LIMIT 1",
            (task_id,),
        ).fetchone()
    return row or {}


def callbacks(rec: Recorder) -> list[str]:
    return [r.headers[CALLBACK] for r in rec.paths("/job")]


def post(addr: str, callback: str, action: str, body: object | None = None) -> httpx.Response:
    """POST to …/`action` of a callback URL, at the engine `addr` (the public URL's path, another front door)."""
    assert callback.startswith(PUBLIC + "/runs/")
    path = callback.removeprefix(PUBLIC)
    content = b"" if body is None else json.dumps(body).encode()
    return httpx.post(f"http://{addr}{path}/{action}", content=content, timeout=30)


def engines(dsn: str, ids: list[str], tmp_path: Path) -> tuple[list[EngineProcess], dict[str, str]]:
    procs = start_engines(dsn, ids, tmp_path, "--metrics-addr", "127.0.0.1:0", "--no-dashboard", "--public-url", PUBLIC)
    wait_registered(dsn, procs)
    return procs, {p.engine_id: listening_addr(p) for p in procs}


async def apply(store: Store, tmp_path: Path, files: dict[str, str]) -> None:
    root = tmp_path / "tasks"
    root.mkdir(exist_ok=True)
    for name, text in files.items():
        (root / f"{name}.toml").write_text(text)
    loaded = load_dir(root, "tasks.d")
    assert loaded.errors == [], loaded.errors
    await apply_tasks(store, loaded.tasks, "default", datetime.now(UTC))


async def test_a_job_reports_to_any_replica_and_survives_the_engine_that_fired_it(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/job", statuses=[202], body=b'{"accepted": true}')
    procs, addrs = engines(dsn, ["job-0", "job-1"], tmp_path)
    try:
        due = soon(datetime.now(UTC), 1)
        await apply(store, tmp_path, {"job": job_task(url, f'kind = "once"\nat = {due}', 'deadline = "10m"')})
        assert wait_until(lambda: run_row(dsn).get("accepted_at") is not None, 60), run_row(dsn)
        [callback] = callbacks(rec)
        token = callback.rsplit("/", 1)[1]
        assert len(token) >= 22  # ≥ 128 bits, URL-safe base64
        row = run_row(dsn)
        assert row["status"] == "running" and callback == f"{PUBLIC}/runs/{row['id']}/{token}"
        with psycopg.connect(dsn) as conn:  # only a hash of the token is stored
            stored = conn.execute("SELECT callback_hash FROM scheduler.runs WHERE id = %s", (row["id"],)).fetchone()
            assert stored is not None and token not in stored[0]
        fired = row["engine_id"]
        other = next(e for e in addrs if e != fired)

        beat = post(addrs[fired], callback, "heartbeat", {"done": 40, "total": 100})
        assert beat.status_code == 200, beat.text
        assert run_row(dsn)["progress"] == {"done": 40, "total": 100}

        killed = next(p for p in procs if p.engine_id == fired)
        killed.proc.send_signal(signal.SIGKILL)
        killed.proc.wait(30)
        assert run_row(dsn)["status"] == "running"  # the job goes on without the engine that started it

        done = post(addrs[other], callback, "complete", {"status": "succeeded", "output": {"rows": 12345}})
        assert done.status_code == 200, done.text
        row = run_row(dsn)
        assert row["status"] == "succeeded" and row["output"] == {"rows": 12345}, row
        again = post(addrs[other], callback, "complete", {"status": "failed", "error": "late"})
        assert again.status_code == 409 and again.json()["status"] == "succeeded", again.text
        assert run_row(dsn)["status"] == "succeeded"
        with psycopg.connect(dsn) as conn:
            [leases] = conn.execute("SELECT count(*) FROM scheduler.run_leases").fetchone() or [0]
        assert leases == 0
    finally:
        results = stop(procs)
    assert [code for code, _ in results if code != -signal.SIGKILL] == [0], [err[-2000:] for _, err in results]


async def test_a_job_that_stops_heartbeating_times_out_and_is_retried_with_its_key_and_a_new_token(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/job", statuses=[202])
    procs, addrs = engines(dsn, ["beat-0", "beat-1"], tmp_path)
    try:
        due = soon(datetime.now(UTC), 1)
        target = 'deadline = "10m"\nheartbeat_timeout = "2s"\ntimeout_seconds = 5'
        policy = "retries = 1\nretry_backoff_seconds = 1"
        await apply(store, tmp_path, {"job": job_task(url, f'kind = "once"\nat = {due}', target, policy)})
        assert wait_until(lambda: len(rec.paths("/job")) >= 2, 90), (run_row(dsn), len(rec.paths("/job")))
        first, second = rec.paths("/job")[:2]
        assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
        assert first.headers[CALLBACK] != second.headers[CALLBACK]
        assert (first.headers["X-Reconciler-Attempt"], second.headers["X-Reconciler-Attempt"]) == ("1", "2")
        assert wait_until(lambda: run_row(dsn).get("accepted_at") is not None, 30)
        addr = next(iter(addrs.values()))
        stale = post(addr, first.headers[CALLBACK], "complete", {"status": "succeeded"})
        assert stale.status_code == 404, stale.text  # the first attempt's token died with it
        # the second attempt sends no heartbeat either: its retries spent, the run ends timed_out
        assert wait_until(lambda: run_row(dsn).get("status") == "timed_out", 60), run_row(dsn)
        row = run_row(dsn)
        assert row["attempt"] == 2 and "heartbeat" in row["error"], row
        late = post(addr, second.headers[CALLBACK], "complete", {"status": "succeeded"})
        assert late.status_code == 410, late.text
    finally:
        results = stop(procs)
    assert [code for code, _ in results] == [0, 0], [err[-2000:] for _, err in results]


async def test_with_three_engines_one_job_at_a_time_reaches_the_target(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/job", statuses=[202])
    procs, addrs = engines(dsn, ["one-0", "one-1", "one-2"], tmp_path)

    def statuses() -> Counter[str]:
        with psycopg.connect(dsn) as conn:
            return Counter(r[0] for r in conn.execute("SELECT status FROM scheduler.runs WHERE task_id = 'job'"))

    try:
        trigger = 'kind = "interval"\nevery = "1s"'
        await apply(store, tmp_path, {"job": job_task(url, trigger, 'deadline = "10m"', "max_running_instances = 1")})
        assert wait_until(lambda: statuses()["skipped"] >= 4, 90), statuses()
        assert len(rec.paths("/job")) == 1  # the job runs: the occurrences meanwhile are skipped, none sent
        [callback] = callbacks(rec)
        addr = next(iter(addrs.values()))
        assert post(addr, callback, "complete", {"status": "succeeded"}).status_code == 200
        assert wait_until(lambda: len(rec.paths("/job")) >= 2, 60)  # its slot free: the next occurrence goes
        assert statuses()["running"] == 1 and statuses()["succeeded"] == 1
    finally:
        results = stop(procs)
    assert [code for code, _ in results] == [0, 0, 0], [err[-2000:] for _, err in results]
