"""Jobs (completion = "callback", docs/jobs.md): what callbacks cost an engine, and what running jobs cost the fleet.

In one run:

(a) completions per second one `reconciler engine` process accepts: 2,000 accepted jobs (run rows and job leases as
    the engine writes them, each with a token the bench knows) are completed by `POST …/complete` from 50
    concurrent connections; beside it, the database's ceiling: the same transactions (the run's row locked, its
    result and notification state written, its lease released) sent by psycopg directly, from as many connections.
    Compared as a ratio.
(b) the fire rate of ordinary tasks with and without 1,000 running jobs: one engine fires 2,000 one-shot tasks due
    at once against the sink, ROUNDS times each way, alternating; the 1,000 jobs (accepted, their leases held for an
    hour) are there in every other round. Medians compared: the change should stay within 10 %.
Results: bench/results/jobs.json.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from bench.common import write_results
from bench.engine import free_port, load_average, once_soon, scenario, start_sink, wait_for_engines
from bench.reconcile import fresh_database
from reconciler.cli.parser import tune_gc
from reconciler.db.embedded import embedded_dsn
from reconciler.db.store import Store

COMPLETIONS = 2_000
CLIENTS = 50  # concurrent connections completing jobs
RUNNING_JOBS = 1_000
FIRES = 2_000
ROUNDS = 3
JOB_TASK = "bench/job"


async def init_schema(dsn: str) -> None:
    async with Store(dsn) as store:
        await store.init_schema()


def seed_jobs(dsn: str, count: int, engine_id: str = "bench") -> list[tuple[int, str]]:
    """`count` accepted jobs of one task, as an engine leaves them after their targets' 202: run rows running with
    a token's hash, job leases held for an hour. Their (run id, token)."""
    tokens = [secrets.token_urlsafe(32) for _ in range(count)]
    hashes = [hashlib.sha256(token.encode()).hexdigest() for token in tokens]
    spec = json.dumps({"target": {"url": "http://127.0.0.1:9/job", "completion": "callback", "deadline": "1h"}})
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, enabled) VALUES (%s, 'jobs', %s, 'x', false) "
            "ON CONFLICT (id) DO NOTHING",
            (JOB_TASK, spec),
        )
        rows = conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, engine_id, started_at, "
            "  accepted_at, callback_hash, deadline_at) "
            "SELECT %s, now() - make_interval(secs => n), 'manual', 'running', 1, %s, now(), now(), h, "
            "       now() + interval '1 hour' "
            "  FROM unnest(%s::text[]) WITH ORDINALITY AS u(h, n) RETURNING id, callback_hash",
            (JOB_TASK, engine_id, hashes),
        ).fetchall()
        conn.execute(
            "INSERT INTO scheduler.run_leases (task_id, run_id, engine_id, expires_at, job) "
            "SELECT %s, id, %s, now() + interval '1 hour', true FROM unnest(%s::bigint[]) AS u(id)",
            (JOB_TASK, engine_id, [r[0] for r in rows]),
        )
    by_hash = dict(zip(hashes, tokens, strict=True))
    return [(run_id, by_hash[digest]) for run_id, digest in rows]


def clear_jobs(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("DELETE FROM scheduler.run_leases WHERE task_id = %s", (JOB_TASK,))
        conn.execute("DELETE FROM scheduler.runs WHERE task_id = %s", (JOB_TASK,))


async def complete_all(base: str, jobs: list[tuple[int, str]]) -> tuple[float, dict[int, int]]:
    """POST …/complete for every job from CLIENTS connections: (seconds, answers by status)."""
    queue = iter(jobs)
    codes: dict[int, int] = {}

    async def worker(session: aiohttp.ClientSession) -> None:
        for run_id, token in queue:
            body = {"status": "succeeded", "output": {"rows": run_id}}
            async with session.post(f"{base}/runs/{run_id}/{token}/complete", json=body) as response:
                await response.read()
                codes[response.status] = codes.get(response.status, 0) + 1

    start = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS)) as session:
        await asyncio.gather(*(worker(session) for _ in range(CLIENTS)))
    return time.perf_counter() - start, codes


async def raw_completions(dsn: str, jobs: list[tuple[int, str]]) -> float:
    """The database's ceiling: each completion's transactions by psycopg alone (read, lock, write), CLIENTS at once."""
    queue = iter(jobs)

    async def worker() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for run_id, _ in queue:
                await conn.execute(
                    "SELECT r.status, r.callback_hash, t.spec -> 'policy' FROM scheduler.runs r "
                    "LEFT JOIN scheduler.tasks t ON t.id = r.task_id WHERE r.id = %s",
                    (run_id,),
                )
                async with conn.transaction():
                    await conn.execute("SELECT status FROM scheduler.runs WHERE id = %s FOR UPDATE", (run_id,))
                    await conn.execute(
                        "UPDATE scheduler.runs SET status = 'succeeded', finished_at = now(), output = %s::jsonb "
                        "WHERE id = %s",
                        (json.dumps({"rows": run_id}), run_id),
                    )
                    await conn.execute("DELETE FROM scheduler.run_leases WHERE run_id = %s", (run_id,))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CLIENTS)))
    return time.perf_counter() - start


def completions(dsn: str, workdir: Path) -> dict[str, Any]:
    """(a): an engine's callbacks against the database's ceiling, twice each, alternating."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "reconciler", "engine", "--engine-id", "callbacks", "--max-sleep", "1"]
    command += ["--metrics-addr", f"127.0.0.1:{port}", "--no-dashboard", "--public-url", base]
    rates: dict[str, list[float]] = {"engine": [], "raw": []}
    with (workdir / "callbacks.log").open("w") as log:
        proc = subprocess.Popen(command, env={**os.environ, "RECONCILER_DSN": dsn}, stdout=log, stderr=log)
        try:
            wait_for_engines(dsn, 1)
            for _ in range(2):
                clear_jobs(dsn)
                seconds, codes = asyncio.run(complete_all(base, seed_jobs(dsn, COMPLETIONS)))
                assert codes == {200: COMPLETIONS}, codes
                rates["engine"].append(COMPLETIONS / seconds)
                clear_jobs(dsn)
                rates["raw"].append(COMPLETIONS / asyncio.run(raw_completions(dsn, seed_jobs(dsn, COMPLETIONS))))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    clear_jobs(dsn)
    engine, raw = max(rates["engine"]), max(rates["raw"])
    return {
        "jobs": COMPLETIONS,
        "clients": CLIENTS,
        "engine_completions_per_second": round(engine, 1),
        "database_ceiling_per_second": round(raw, 1),
        "engine_over_ceiling": round(engine / raw, 2),
    }


def fire_rates(dsn: str, url: str, workdir: Path) -> dict[str, Any]:
    """(b): ordinary fires with and without RUNNING_JOBS jobs held, alternating ROUNDS times."""
    port = free_port()
    args = ("--metrics-addr", f"127.0.0.1:{port}", "--no-dashboard", "--public-url", f"http://127.0.0.1:{port}")
    rates: dict[str, list[float]] = {"without": [], "with": []}
    for round_ in range(ROUNDS):
        for way in ("without", "with"):
            clear_jobs(dsn)
            if way == "with":
                seed_jobs(dsn, RUNNING_JOBS)
            row = scenario(dsn, url, workdir, f"fire-{way}-{round_}", 1, FIRES, once_soon, *args)
            rates[way].append(row["fires_per_second"])
    clear_jobs(dsn)
    without, with_jobs = statistics.median(rates["without"]), statistics.median(rates["with"])
    return {
        "fires": FIRES,
        "running_jobs": RUNNING_JOBS,
        "rounds": ROUNDS,
        "fires_per_second_without_jobs": rates["without"],
        "fires_per_second_with_jobs": rates["with"],
        "median_without": without,
        "median_with": with_jobs,
        "change_percent": round((with_jobs - without) / without * 100, 1),
    }


def main() -> None:
    tune_gc()
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    dsn = fresh_database(admin, "reconciler_bench_jobs")
    asyncio.run(init_schema(dsn))
    sink, url = start_sink()
    load_before = load_average()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            done = completions(dsn, Path(tmp))
            print(f"(a) completions/s: engine {done['engine_completions_per_second']}, database ceiling "
                  f"{done['database_ceiling_per_second']} (ratio {done['engine_over_ceiling']})")  # fmt: skip
            fired = fire_rates(dsn, url, Path(tmp))
            print(f"(b) fires/s without jobs {fired['median_without']}, with {RUNNING_JOBS} running jobs "
                  f"{fired['median_with']} ({fired['change_percent']:+} %)")  # fmt: skip
    finally:
        sink.kill()
    load = {"load_average_before": load_before, "load_average_after": load_average()}
    print(f"load average {load_before} → {load['load_average_after']}")
    print(f"wrote {write_results('jobs', {**load, 'completions': done, 'fire_rate': fired})}")


if __name__ == "__main__":
    main()
