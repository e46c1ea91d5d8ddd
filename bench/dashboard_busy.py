"""The dashboard on a busy day (issue 49): `/` with 100 tasks firing every 10 s, and 50 clients at once.

`python -m bench.dashboard --busy` (or `python -m bench.dashboard_busy`). In one run, against the benches'
embedded PostgreSQL, everything on 127.0.0.1:

- Two databases with the same TASKS task files applied (interval 10 s): `busy`, with their runs of the last
  24 hours (TASKS × 8,640 = 864,000 runs at 100 tasks: one every 10 s each, ids in time order as an engine
  writes them; 97 % succeeded, 2 % failed, 1 % missed, the newest of each task running; a hundredth catch-up
  runs), seeded by INSERT … SELECT generate_series, then VACUUM ANALYZE; and `empty`, the same tasks without
  a run: the baseline, measured in the same run on the same server, every ratio is to it.
- One `reconciler dashboard --addr 127.0.0.1:PORT --dsn DSN` process on each.
- (a) REQUESTS sequential GETs of `/` on each (interleaved, after one warm-up each): p50/p95/p99 beside the
  bound (p95 ≤ 300 ms) and the ratio to the empty database's; the execution time of `dashboard_tasks`
  (EXPLAIN ANALYZE) on the busy one.
- (b) CLIENTS concurrent clients (one aiohttp session each), each making ROUNDS requests in turn, alternating
  `/` and a task page (each client its own task), on each database: p50/p95/p99 of every request, the
  throughput, and the answers by kind: `ok` (200), `busy` (a 503 saying the pool is busy, with Retry-After),
  `dsn` (a page saying it cannot connect: issue 49's bug), any other status, or a client error by its class.
  The machine's load average before and after (the benches share the cores with whatever else runs).

Assert-free: it prints and writes bench/results/dashboard-busy.json (dashboard-busy-quick.json with --quick:
10 tasks, 10 clients, fewer requests; `--tasks`, `--clients`, `--rounds`, `--requests` override one size).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import psycopg

from bench.common import write_results
from bench.dashboard import start_logged, stop, wait_for_http
from bench.engine import apply_dir, free_port, load_average, percentile
from bench.reconcile import fresh_database
from reconciler.cli.parser import tune_gc
from reconciler.db.embedded import embedded_dsn
from reconciler.db.store import QUERIES, Store
from reconciler.runs import STATUSES

FULL = {"tasks": 100, "clients": 50, "rounds": 10, "requests": 100}
QUICK = {"tasks": 10, "clients": 10, "rounds": 4, "requests": 20}
EVERY_SECONDS = 10
BOUND_P95_MS = 300.0
TIMEOUT = 60.0  # any one request: longer than the dashboard's own wait for a connection


def task_file(index: int) -> str:
    return (
        f'description = "busy task {index}"\nlabels = {{ team = "t{index % 5}" }}\n\n'
        f'[trigger]\nkind = "interval"\nevery = "{EVERY_SECONDS}s"\n\n'
        f'[target]\nurl = "http://127.0.0.1:9/hook/{index}"\n'
    )


def task_id(index: int) -> str:
    return f"busy/t{index:03d}"


async def prepare(dsn: str, tasks: int, workdir: Path) -> None:
    """The schema, and TASKS task files applied as `reconciler apply` writes them."""
    async with Store(dsn) as store:
        await store.init_schema()
    root = workdir / "tasks.d"
    (root / "busy").mkdir(parents=True, exist_ok=True)
    for index in range(tasks):
        (root / "busy" / f"t{index:03d}.toml").write_text(task_file(index))
    await apply_dir(dsn, root)


def seed_runs(dsn: str, tasks: int) -> dict[str, float]:
    """A day of runs: one every EVERY_SECONDS a task, in time order; seconds taken."""
    took: dict[str, float] = {}
    per_task = 86_400 // EVERY_SECONDS
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = time.perf_counter()
        conn.execute("SELECT setseed(0.49)")
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, engine_id, claimed_at, "
            "                            started_at, finished_at, http_status, error, duration_ms) "
            "SELECT 'busy/t' || lpad(t::text, 3, '0'), at, CASE WHEN n %% 100 = 7 THEN 'catchup' ELSE 'scheduled' END, "
            "       st, 1, 'bench-engine-' || (t %% 3), at, "
            "       CASE WHEN st <> 'missed' THEN at + interval '4 milliseconds' END, "
            "       CASE WHEN st IN ('succeeded', 'failed') THEN at + interval '1 millisecond' * (40 + t) END, "
            "       CASE st WHEN 'succeeded' THEN 200 WHEN 'failed' THEN 500 END, "
            "       CASE st WHEN 'failed' THEN 'HTTP 500 from the target' "
            "               WHEN 'missed' THEN 'missed: past misfire_grace_seconds' END, "
            "       CASE WHEN st IN ('succeeded', 'failed') THEN 36 + t END "
            "  FROM generate_series(%(per_task)s - 1, 0, -1) n, generate_series(0, %(tasks)s - 1) t, "
            "       LATERAL (SELECT date_trunc('second', now()) - make_interval(secs => n * %(every)s) AS at, "
            "                       random() AS r) x, "
            "       LATERAL (SELECT CASE WHEN n = 0 THEN 'running' WHEN r < 0.97 THEN 'succeeded' "
            "                            WHEN r < 0.99 THEN 'failed' ELSE 'missed' END AS st) s "
            " ORDER BY n DESC, t",
            {"per_task": per_task, "tasks": tasks, "every": EVERY_SECONDS},
        )
        took["runs"] = time.perf_counter() - start
        start = time.perf_counter()
        conn.execute("VACUUM ANALYZE scheduler.tasks, scheduler.runs")
        took["vacuum_analyze"] = time.perf_counter() - start
        [(count,)] = conn.execute("SELECT count(*) FROM scheduler.runs").fetchall()
    took["count"] = count
    return {k: round(v, 1) for k, v in took.items()}


def explain_index(dsn: str) -> dict[str, Any]:
    """EXPLAIN ANALYZE of `/`'s task query (as web/dashboard.py sends it): its execution time, and the plan
    lines of the last-day counts."""
    params: dict[str, Any] = {k: None for k in ("after", "source", "labels", "status", "now", "id")}
    params |= {"limit": 101, "statuses": list(STATUSES)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(QUERIES["dashboard_tasks"], params).fetchall()  # warm
        plan = [row[0] for row in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + QUERIES["dashboard_tasks"], params)]
    execution = next(float(line.split()[2]) for line in plan if line.startswith("Execution Time"))
    counts = [line.strip() for line in plan if "runs_day_idx" in line or "Heap Fetches" in line]
    return {"execution_ms": round(execution, 1), "count_nodes": sorted(set(counts))}


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def spread(values: list[float]) -> dict[str, float | None]:
    """p50, p95, p99 and the maximum (ms) of durations in seconds."""
    if not values:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None}
    values = sorted(values)
    return {
        "p50_ms": ms(statistics.median(values)),
        "p95_ms": ms(percentile(values, 0.95)),
        "p99_ms": ms(percentile(values, 0.99)),
        "max_ms": ms(values[-1]),
    }


def sequential(bases: dict[str, str], requests: int) -> dict[str, Any]:
    """(a) `/` one request at a time on each database, interleaved, after one warm-up each."""
    times: dict[str, list[float]] = {name: [] for name in bases}
    with httpx.Client(timeout=TIMEOUT) as client:
        for base in bases.values():
            assert client.get(base + "/").status_code == 200
        for _ in range(requests):
            for name, base in bases.items():
                start = time.perf_counter()
                response = client.get(base + "/")
                times[name].append(time.perf_counter() - start)
                assert response.status_code == 200, response.text[:300]
    return {name: {"requests": len(values), **spread(values)} for name, values in times.items()}


def kind_of(status: int, body: str, headers: Any) -> str:
    """An answer by kind: ok, busy (the pool, with Retry-After), dsn (a connection error's page), or its status."""
    if status == 200:
        return "ok"
    if status == 503 and ("stayed busy" in body or "already wait for one" in body):
        return "busy" + ("" if "Retry-After" in headers else " (no Retry-After)")
    if "cannot connect" in body or "check the DSN" in body or "check RECONCILER_DSN" in body:
        return "dsn"
    return f"HTTP {status}"


async def one_client(base: str, paths: list[str], rounds: int) -> list[tuple[float, str]]:
    """ROUNDS requests in turn, cycling `paths`: each one's time and kind."""
    got = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as session:
        for index in range(rounds):
            start = time.perf_counter()
            try:
                async with session.get(base + paths[index % len(paths)]) as response:
                    body = await response.text()
                    kind = kind_of(response.status, body, response.headers)
            except (aiohttp.ClientError, TimeoutError) as exc:
                kind = type(exc).__name__
            got.append((time.perf_counter() - start, kind))
    return got


async def concurrent(base: str, clients: int, rounds: int) -> dict[str, Any]:
    """(b) CLIENTS clients at once, each ROUNDS requests alternating `/` and its own task's page."""
    start = time.perf_counter()
    results = await asyncio.gather(
        *(one_client(base, ["/", f"/tasks/{task_id(index % clients)}"], rounds) for index in range(clients))
    )
    wall = time.perf_counter() - start
    answers = [answer for result in results for answer in result]
    kinds = Counter(kind for _, kind in answers)
    return {
        "requests": len(answers),
        "wall_seconds": round(wall, 1),
        "requests_per_second": round(len(answers) / wall, 1),
        **spread([took for took, _ in answers]),
        "ok": spread([took for took, kind in answers if kind == "ok"]),
        "answers": dict(sorted(kinds.items())),
    }


def ratio(part: float | None, whole: float | None) -> float | None:
    return round(part / whole, 2) if part and whole else None


def sizes(argv: list[str]) -> tuple[dict[str, int], bool]:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard --busy", description=__doc__.split("\n")[0])
    parser.add_argument("--busy", action="store_true", help="(this scenario; for bench.dashboard's dispatch)")
    parser.add_argument("--quick", action="store_true", help="10 tasks, 10 clients, fewer requests")
    for key in FULL:
        parser.add_argument(f"--{key}", type=int, dest=key)
    args = parser.parse_args(argv)
    overridden = {k: getattr(args, k) for k in FULL if getattr(args, k) is not None}
    return {**(QUICK if args.quick else FULL), **overridden}, args.quick or bool(overridden)


def main(argv: list[str] | None = None) -> None:
    tune_gc()
    size, reduced = sizes(sys.argv[1:] if argv is None else argv)
    load_before = load_average()
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    dsns = {name: fresh_database(admin, f"reconciler_bench_dashboard_{name}") for name in ("busy", "empty")}
    results: dict[str, Any] = {"size": size, "every_seconds": EVERY_SECONDS, "bound_p95_ms": BOUND_P95_MS}
    with tempfile.TemporaryDirectory() as tmp:
        for name, dsn in dsns.items():
            asyncio.run(prepare(dsn, size["tasks"], Path(tmp) / name))
        results["seed_seconds"] = seeded = seed_runs(dsns["busy"], size["tasks"])
        print(f"seeded {size['tasks']} tasks and {seeded['count']:,} runs of the last day: {seeded} s")
        results["dashboard_tasks"] = explain_index(dsns["busy"])
        print(f"dashboard_tasks (EXPLAIN ANALYZE): {results['dashboard_tasks']}")
        procs, bases = [], {}
        try:
            for name, dsn in dsns.items():
                addr = f"127.0.0.1:{free_port()}"
                command = [sys.executable, "-m", "reconciler", "dashboard", "--addr", addr, "--dsn", dsn]
                procs.append(start_logged(command, Path(tmp) / f"{name}.log"))
                bases[name] = f"http://{addr}"
                wait_for_http(f"{bases[name]}/static/app.js")
            results["load_average_sequential"] = load_average()
            results["sequential"] = seq = sequential(bases, size["requests"])
            seq["p95_ratio"] = ratio(seq["busy"]["p95_ms"], seq["empty"]["p95_ms"])
            within = "ok" if (seq["busy"]["p95_ms"] or 0) <= BOUND_P95_MS else "OVER"
            print(
                f"(a) `/` one at a time, {size['requests']} each: busy {seq['busy']} | empty {seq['empty']} | "
                f"p95 ratio {seq['p95_ratio']} (bound {BOUND_P95_MS:g} ms: {within}); load {load_average()}"
            )
            results["load_average_concurrent"] = load_average()
            results["concurrent"] = {
                name: asyncio.run(concurrent(base, size["clients"], size["rounds"])) for name, base in bases.items()
            }
            for name, got in results["concurrent"].items():
                print(f"(b) {size['clients']} clients × {size['rounds']} requests, {name}: {got}")
            busy, empty = results["concurrent"]["busy"], results["concurrent"]["empty"]
            results["concurrent"]["p95_ratio"] = ratio(busy["p95_ms"], empty["p95_ms"])
            print(f"(b) p95 ratio busy/empty {results['concurrent']['p95_ratio']}; load {load_average()}")
        finally:
            for proc in procs:
                stop(proc)
    load = {"load_average_before": load_before, "load_average_after": load_average()}
    print(f"load average {load_before} → {load['load_average_after']}")
    print(f"wrote {write_results('dashboard-busy-quick' if reduced else 'dashboard-busy', {**load, **results})}")


if __name__ == "__main__":
    main()
