"""The read-only dashboard: page latency on a large database, and the fire lag its traffic adds to an engine.

In one run, against the benches' embedded PostgreSQL, everything on 127.0.0.1:

(a) TASKS tasks (realistic stored specs: cron, interval, calendar and one-shot, labels, env headers) and
    RUNS runs spread over them (~100 a task, one every 7.2 h of the last 30 days, so ~3 a task in the
    last 24 h; succeeded, failed, missed and skipped mixed, a fiftieth of the tasks failing for their
    newest fifth), seeded by INSERT … SELECT generate_series, then VACUUM ANALYZE. One
    `reconciler dashboard --addr 127.0.0.1:PORT --dsn DSN` process; REQUESTS sequential requests of
    each page, the pages interleaved, after one warm-up request each (its time given as `cold_ms`):
    `/` as HTML and as `?format=json`, `/tasks/<id>`, `/runs`, `/timeline`, and two worst-case filters
    that match nothing (`/?status=none`, `/runs?status=lost`, each reads every row it filters). p50 and
    p95 latency (ms) beside the bound (p95 ≤ 300 ms), and the execution time of each page's main
    query (EXPLAIN ANALYZE); the whole plan is printed for a page over the bound.
(b) On the same database, one `reconciler engine --metrics-addr` process (its dashboard pages passed on
    to the `reconciler dashboard` process it starts on the first page asked for) firing TICKING
    1-second tasks at the local sink (`bench/sink.py`): the fire lag p99
    (the sink's arrival less X-Reconciler-Scheduled-For, as bench/engine.py) in rounds of
    ROUND_SECONDS without dashboard traffic and with RATE requests a second cycling `/`,
    `/tasks/<id>`, `/runs`, `/timeline` on the engine's own address (at most IN_FLIGHT at once; a
    request that would exceed it is skipped and counted). The conditions alternate (ABBA…) ROUNDS
    times each; their medians are compared (bound: the p99 changes by ≤ 10 %). The p50s are given beside:
    with --metrics-addr the engine's own gauge refresh (every 5 s, the health of every task) stalls its
    loop now and then, so the p99 of a round without traffic varies (70–290 ms seen at 10,000 tasks).

`--busy` runs issue 49's scenario instead (bench/dashboard_busy.py): 100 tasks firing every 10 s for a day,
`/` one request at a time and 50 clients at once, errors by kind.

`--quick` runs 1,000 tasks and 100,000 runs and shorter rounds (to check the script works); `--tasks N`,
`--runs N`, `--requests N`, `--ticking N`, `--rounds N`, `--round-seconds S`, `--rate R` override one size.
Results: bench/results/dashboard.json (dashboard-quick.json with --quick, or with a size overridden).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.common import task_text, write_results
from bench.engine import SINK, apply_dir, cpu_seconds, free_port, load_average, percentile, sink_get, write_files
from bench.engine import wait_for_engines as wait_for_heartbeat
from bench.reconcile import fresh_database
from bench.scrape import ticking_text
from reconciler.cli.parser import tune_gc
from reconciler.db.embedded import embedded_dsn
from reconciler.db.store import QUERIES, Store
from reconciler.files.tasks import load_dir
from reconciler.web.dashboard import RUNS_PAGE, TASK_RUNS, TASKS_PAGE

FULL = {"tasks": 10_000, "runs": 1_000_000, "requests": 50, "ticking": 100, "rounds": 3, "round_seconds": 25}
QUICK = {"tasks": 1_000, "runs": 100_000, "requests": 20, "ticking": 20, "rounds": 1, "round_seconds": 6}
FULL["rate"] = QUICK["rate"] = 10  # dashboard requests a second in (b)
BOUND_P95_MS = 300.0
BOUND_LAG_CHANGE = 0.10
IN_FLIGHT = 4  # dashboard requests at once in (b)
TIMEOUT = 30.0  # any one request
TEMPLATES = 28  # distinct task files (bench.common's 4 kinds × 7 teams); each row gets its own URL
LOAD_PATHS = ("/", "/tasks/{id}", "/runs", "/timeline")


def template_specs() -> list[str]:
    """The canonical JSON apply stores for TEMPLATES generated task files (bench.common.task_text)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for index in range(TEMPLATES):
            (root / "bench").mkdir(exist_ok=True)
            (root / "bench" / f"t{index:02d}.toml").write_text(task_text(index))
        loaded = load_dir(root)
    assert not loaded.errors and len(loaded.tasks) == TEMPLATES, loaded.errors[:3]
    return [task.canonical for task in sorted(loaded.tasks, key=lambda t: t.id)]


def task_id(index: int) -> str:
    return f"bench/task{index:05d}"


def seed(dsn: str, tasks: int, runs: int) -> dict[str, float]:
    """TASKS tasks (due in 1–2 days: no engine fires them here) and RUNS runs, ids in time order; seconds taken."""
    took: dict[str, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = time.perf_counter()
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, spec_digest, timezone, next_run_at, revision) "
            "SELECT id, 'bench', spec, md5(spec::text), md5(spec::text), COALESCE(spec ->> 'timezone', 'UTC'), "
            "       now() + interval '1 day' + interval '1 second' * (g * 8.64 %% 86400), 'bench-seed' "
            "  FROM generate_series(0, %(tasks)s - 1) g, "
            "       LATERAL (SELECT 'bench/task' || lpad(g::text, 5, '0') AS id) i, "
            "       LATERAL (SELECT jsonb_set(jsonb_set((%(specs)s::jsonb[])[g %% %(n)s + 1], '{target,url}', "
            "                    to_jsonb('http://127.0.0.1:9/hook/' || g)), '{description}', "
            "                    to_jsonb('generated task ' || g)) AS spec) s",
            {"tasks": tasks, "specs": template_specs(), "n": TEMPLATES},
        )
        took["tasks"] = time.perf_counter() - start
        start = time.perf_counter()
        conn.execute("SELECT setseed(0.42)")
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, engine_id, claimed_at, "
            "                            started_at, finished_at, http_status, error, duration_ms) "
            "SELECT 'bench/task' || lpad(t::text, 5, '0'), at, "
            "       CASE WHEN n %% 97 = 0 THEN 'catchup' ELSE 'scheduled' END, st, 1, 'bench-engine-' || (n %% 3), at, "
            "       CASE WHEN st IN ('succeeded', 'failed') THEN at + interval '1 millisecond' * (5 + n %% 40) END, "
            "       at + interval '1 millisecond' * (50 + n %% 400), "
            "       CASE st WHEN 'succeeded' THEN 200 WHEN 'failed' THEN 500 END, "
            "       CASE st WHEN 'failed' THEN 'HTTP 500 from the target' "
            "               WHEN 'missed' THEN 'missed: past misfire_grace_seconds' END, "
            "       CASE WHEN st IN ('succeeded', 'failed') THEN 40 + n %% 400 END "
            "  FROM generate_series(0, %(runs)s - 1) n, "
            "       LATERAL (SELECT n %% %(tasks)s AS t, "
            "                       now() - interval '30 days' * ((%(runs)s - n)::float8 / %(runs)s) AS at, "
            "                       random() AS r) x, "
            "       LATERAL (SELECT CASE WHEN x.t %% 50 = 7 AND n > %(runs)s * 0.8 THEN 'failed' "
            "                            WHEN r < 0.85 THEN 'succeeded' WHEN r < 0.93 THEN 'failed' "
            "                            WHEN r < 0.97 THEN 'missed' ELSE 'skipped' END AS st) s",
            {"tasks": tasks, "runs": runs},
        )
        took["runs"] = time.perf_counter() - start
        start = time.perf_counter()
        conn.execute("VACUUM ANALYZE scheduler.tasks, scheduler.runs")
        took["vacuum_analyze"] = time.perf_counter() - start
    return {k: round(v, 1) for k, v in took.items()}


def pages(tasks: int) -> dict[str, str]:
    """The measured pages: name → path. The task page's task has ~100 runs, its newest failed."""
    shown = task_id(tasks // 2 // 50 * 50 + 7)
    return {
        "/": "/",
        "/?format=json": "/?format=json",
        "/tasks/<id>": f"/tasks/{shown}",
        "/runs": "/runs",
        "/timeline": "/timeline",
        "/?status=none": "/?status=none",
        "/runs?status=lost": "/runs?status=lost",
    }


def page_queries(tasks: int) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Each page's heavy statements (as web/dashboard.py passes them), for EXPLAIN ANALYZE."""
    shown = pages(tasks)["/tasks/<id>"].removeprefix("/tasks/")
    listing: dict[str, Any] = {"after": None, "source": None, "labels": None, "status": None, "now": None, "id": None}
    runs: dict[str, Any] = {k: None for k in ("task_id", "before", "status", "kind", "since", "until")}
    index = [("dashboard_tasks", {**listing, "limit": TASKS_PAGE + 1}), ("dashboard_counts", {})]
    return {
        "/": index,
        "/?format=json": index,
        "/tasks/<id>": [
            ("dashboard_tasks", {**listing, "id": shown, "limit": 1}),
            ("runs_list", {"task_id": shown, "status": None, "limit": TASK_RUNS}),
        ],
        "/runs": [("dashboard_runs", {**runs, "limit": RUNS_PAGE + 1})],
        "/timeline": [("dashboard_timeline_tasks", {"after": None, "source": None, "limit": TASKS_PAGE + 1})],
        "/?status=none": [("dashboard_tasks", {**listing, "status": "none", "limit": TASKS_PAGE + 1})],
        "/runs?status=lost": [("dashboard_runs", {**runs, "status": "lost", "limit": RUNS_PAGE + 1})],
    }


def explain(dsn: str, tasks: int) -> dict[str, list[dict[str, Any]]]:
    """EXPLAIN (ANALYZE, BUFFERS) of each page's statements: the execution time (ms) and the plan."""
    out: dict[str, list[dict[str, Any]]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for page, statements in page_queries(tasks).items():
            for name, params in statements:
                plan = [row[0] for row in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + QUERIES[name], params)]
                ms = next(float(line.split()[2]) for line in plan if line.startswith("Execution Time"))
                out.setdefault(page, []).append({"query": name, "execution_ms": round(ms, 2), "plan": plan})
    return out


def start_logged(command: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A subprocess writing to a log file: an unread pipe fills with an engine's run lines and blocks it."""
    with log_path.open("w") as log_file:
        return subprocess.Popen(command, env=env, stdout=log_file, stderr=log_file)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a drain), bounded; then SIGKILL."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def wait_for_http(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if SINK.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {seconds:g} s")


def timed_get(client: httpx.Client, url: str) -> float:
    """Seconds for one GET, the whole body read; anything but a 200 fails the bench."""
    start = time.perf_counter()
    response = client.get(url)
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, f"{url}: {response.status_code} {response.text[:300]}"
    return elapsed


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def page_latency(dsn: str, size: dict[str, int], workdir: Path) -> dict[str, Any]:
    """(a) A `reconciler dashboard` process; `requests` sequential GETs of each page, interleaved."""
    addr = f"127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "reconciler", "dashboard", "--addr", addr, "--dsn", dsn]
    proc = start_logged(command, workdir / "dashboard.log")
    results: dict[str, Any] = {}
    try:
        base = f"http://{addr}"
        wait_for_http(f"{base}/static/app.js")
        measured = pages(size["tasks"])
        times: dict[str, list[float]] = {name: [] for name in measured}
        with httpx.Client(timeout=TIMEOUT) as client:
            cold = {name: ms(timed_get(client, base + path)) for name, path in measured.items()}
            for _ in range(size["requests"]):
                for name, path in measured.items():
                    times[name].append(timed_get(client, base + path))
        cpu = cpu_seconds(proc.pid)
    finally:
        stop(proc)
    for name, values in times.items():
        values.sort()
        p95 = ms(percentile(values, 0.95))
        results[name] = {
            "path": measured[name],
            "requests": len(values),
            "p50_ms": ms(statistics.median(values)),
            "p95_ms": p95,
            "max_ms": ms(values[-1]),
            "cold_ms": cold[name],
            "within_bound": p95 <= BOUND_P95_MS,
        }
    results["dashboard_cpu_seconds"] = round(cpu, 1)
    return results


class Traffic:
    """RATE dashboard GETs a second on a fixed schedule, cycling LOAD_PATHS, at most IN_FLIGHT at once."""

    def __init__(self, base: str, paths: list[str], rate: int) -> None:
        self.base, self.paths, self.rate = base, paths, rate
        self.client = httpx.Client(timeout=TIMEOUT)
        self.pool = ThreadPoolExecutor(IN_FLIGHT)
        self.in_flight = threading.Semaphore(IN_FLIGHT)
        self.sent = 0

    def _one(self, path: str) -> tuple[float, int]:
        start = time.perf_counter()
        try:
            status = self.client.get(self.base + path).status_code
        except httpx.HTTPError:
            status = 0  # counted among the errors
        finally:
            self.in_flight.release()
        return time.perf_counter() - start, status

    def run(self, seconds: int) -> dict[str, Any]:
        futures: list[Future[tuple[float, int]]] = []
        skipped = 0
        started = time.monotonic()
        for slot in range(seconds * self.rate):
            time.sleep(max(0.0, started + slot / self.rate - time.monotonic()))
            if not self.in_flight.acquire(blocking=False):
                skipped += 1
                continue
            futures.append(self.pool.submit(self._one, self.paths[self.sent % len(self.paths)]))
            self.sent += 1
        time.sleep(max(0.0, started + seconds - time.monotonic()))
        done = sorted(f.result(timeout=TIMEOUT) for f in futures)
        latencies = [d for d, _ in done]
        return {
            "requests": len(done),
            "skipped": skipped,
            "errors": sum(status != 200 for _, status in done),
            "p50_ms": ms(statistics.median(latencies)) if latencies else None,
            "p95_ms": ms(percentile(latencies, 0.95)) if latencies else None,
        }

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.client.close()


def lag_round(sink: str, engine: int, traffic: Traffic | None, seconds: int) -> dict[str, Any]:
    """One round of `seconds`: the sink's lags, with the dashboard traffic or none; the engine's CPU."""
    SINK.post(f"{sink}/_reset")
    cpu = cpu_seconds(engine)
    if traffic is not None:
        load = traffic.run(seconds)
    else:
        time.sleep(seconds)
        load = None
    lags = sorted(sink_get(sink, "_stats")["lags"])
    return {
        "dashboard": traffic is not None,
        "fires": len(lags),
        "p50_ms": ms(statistics.median(lags)) if lags else None,
        "p99_ms": ms(percentile(lags, 0.99)) if lags else None,
        "engine_cpu_share": round((cpu_seconds(engine) - cpu) / seconds, 3),
        "traffic": load,
    }


def fire_lag(dsn: str, size: dict[str, int], workdir: Path) -> dict[str, Any]:
    """(b) One engine with --metrics-addr firing TICKING 1-second tasks; rounds alternate without and with traffic."""
    command = [sys.executable, "-m", "bench.sink", str(free_port())]
    sink_proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)  # it prints its URL, then nothing
    assert sink_proc.stdout is not None
    sink = sink_proc.stdout.readline().strip()
    metrics = f"127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "reconciler", "engine", "--max-sleep", "1", "--metrics-addr", metrics]
    env = {**os.environ, "RECONCILER_DSN": dsn}
    engine = start_logged([*command, "--engine-id", "dashboard-bench"], workdir / "engine.log", env)
    shown = pages(size["tasks"])["/tasks/<id>"].removeprefix("/tasks/")
    traffic = Traffic(f"http://{metrics}", [p.format(id=shown) for p in LOAD_PATHS], size["rate"])
    rounds = []
    try:
        wait_for_heartbeat(dsn, 1)
        wait_for_http(f"http://{metrics}/healthz")
        root = workdir / "ticking"
        write_files(root, size["ticking"], sink, ticking_text)
        asyncio.run(apply_dir(dsn, root))
        traffic.run(2)  # the first ticks' catch-up, the dashboard's pool and spec cache: in no round
        time.sleep(2)
        for index in range(size["rounds"]):
            order = (False, True) if index % 2 == 0 else (True, False)  # ABBA: a drift weighs on both
            for loaded in order:
                rounds.append(lag_round(sink, engine.pid, traffic if loaded else None, size["round_seconds"]))
                print(f"    round {len(rounds)}: {rounds[-1]}", flush=True)
    finally:
        traffic.close()
        stop(engine)
        sink_proc.kill()
        sink_proc.wait(timeout=10)
    quiet = [r["p99_ms"] for r in rounds if not r["dashboard"] and r["p99_ms"] is not None]
    busy = [r["p99_ms"] for r in rounds if r["dashboard"] and r["p99_ms"] is not None]
    baseline, loaded = statistics.median(quiet), statistics.median(busy)
    change = loaded / baseline - 1 if baseline else None
    p50_quiet = statistics.median(r["p50_ms"] for r in rounds if not r["dashboard"] and r["p50_ms"] is not None)
    p50_busy = statistics.median(r["p50_ms"] for r in rounds if r["dashboard"] and r["p50_ms"] is not None)
    return {
        "rounds": rounds,
        "p50_without_dashboard_ms": p50_quiet,
        "p50_with_dashboard_ms": p50_busy,
        "p50_ratio": round(p50_busy / p50_quiet, 3) if p50_quiet else None,
        "p99_without_dashboard_ms": baseline,
        "p99_with_dashboard_ms": loaded,
        "ratio": round(loaded / baseline, 3) if baseline else None,
        "within_bound": change is not None and change <= BOUND_LAG_CHANGE,
        "fires_without": statistics.median(r["fires"] for r in rounds if not r["dashboard"]),
        "fires_with": statistics.median(r["fires"] for r in rounds if r["dashboard"]),
        "dashboard_requests_per_round": statistics.median(r["traffic"]["requests"] for r in rounds if r["traffic"]),
        "dashboard_p95_ms_under_load": statistics.median(r["traffic"]["p95_ms"] for r in rounds if r["traffic"]),
    }


def sizes() -> tuple[dict[str, int], bool]:
    """The sizes from argv: FULL, QUICK with --quick, either with single sizes overridden."""
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 tasks, 100,000 runs, short rounds")
    for key in FULL:
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, dest=key)
    args = parser.parse_args()
    size = dict(QUICK if args.quick else FULL)
    overridden = {k: getattr(args, k) for k in FULL if getattr(args, k) is not None}
    return {**size, **overridden}, args.quick or bool(overridden)


def main() -> None:
    if "--busy" in sys.argv[1:]:  # issue 49's scenario, with its own sizes
        from bench.dashboard_busy import main as busy

        busy()
        return
    tune_gc()
    size, reduced = sizes()
    load_before = load_average()
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    dsn = fresh_database(admin, "reconciler_bench_dashboard")

    async def init() -> None:
        async with Store(dsn) as store:
            await store.init_schema()

    asyncio.run(init())
    seeded = seed(dsn, size["tasks"], size["runs"])
    print(f"seeded {size['tasks']:,} tasks and {size['runs']:,} runs: {seeded} s")
    results: dict[str, Any] = {"size": size, "seed_seconds": seeded, "bound_p95_ms": BOUND_P95_MS}
    with tempfile.TemporaryDirectory() as tmp:
        got = page_latency(dsn, size, Path(tmp))
        plans = explain(dsn, size["tasks"])
        print(f"(a) `reconciler dashboard`, {size['requests']} sequential requests a page (ms):")
        for name in pages(size["tasks"]):
            row = got[name]
            queries = ", ".join(f"{q['query']} {q['execution_ms']}" for q in plans[name])
            print(
                f"    {name:<20} p50 {row['p50_ms']:>7}  p95 {row['p95_ms']:>7} (bound {BOUND_P95_MS:g}: "
                f"{'ok' if row['within_bound'] else 'OVER'})  max {row['max_ms']:>7}  cold {row['cold_ms']:>7}"
                f"  | EXPLAIN ANALYZE ms: {queries}"
            )
            row["queries"] = [{k: v for k, v in q.items() if row["within_bound"] or k != "plan"} for q in plans[name]]
            if not row["within_bound"]:
                for query in plans[name]:
                    print(f"\n    -- {query['query']} ({name}):\n" + "\n".join(query["plan"]) + "\n")
        results["pages"] = got
        print(
            f"(b) engine --metrics-addr, {size['ticking']} 1-second tasks, {size['rounds']} rounds of "
            f"{size['round_seconds']} s each condition, {size['rate']} dashboard requests/s in the loaded ones:"
        )
        lag = fire_lag(dsn, size, Path(tmp))
    results["fire_lag"] = lag
    change = (lag["ratio"] - 1) * 100 if lag["ratio"] else float("nan")
    print(
        f"(b) fire lag p99: {lag['p99_without_dashboard_ms']} ms without dashboard traffic, "
        f"{lag['p99_with_dashboard_ms']} ms with {size['rate']} requests/s: ratio {lag['ratio']} ({change:+.1f} %; "
        f"bound +{BOUND_LAG_CHANGE * 100:g} %: {'ok' if lag['within_bound'] else 'OVER'}); p50 "
        f"{lag['p50_without_dashboard_ms']} / {lag['p50_with_dashboard_ms']} ms ({lag['p50_ratio']}); fires a round "
        f"{lag['fires_without']} / {lag['fires_with']}; dashboard requests a round "
        f"{lag['dashboard_requests_per_round']}, their p95 {lag['dashboard_p95_ms_under_load']} ms"
    )
    load = {"load_average_before": load_before, "load_average_after": load_average()}
    print(f"load average {load_before} → {load['load_average_after']}")
    print(f"wrote {write_results('dashboard-quick' if reduced else 'dashboard', {**load, **results})}")


if __name__ == "__main__":
    main()
