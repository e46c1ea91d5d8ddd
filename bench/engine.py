"""Engine throughput, burst lag and slow targets against one local sink, with the ceilings beside them.

In one run, on the same sink (`bench/sink.py`, a raw asyncio server on 127.0.0.1):

(a) fires/s with 1 and 3 `reconciler engine` processes for 10,000 due one-shot tasks;
(b) the client ceiling: one aiohttp session sending the same requests at the same concurrency;
    the 1-engine run, the client and the raw claim loop alternate ROUNDS times and their medians
    are compared;
(c) the bare claim loops over 10,000 due rows, no HTTP: the raw SQL of a claim (lock, insert
    runs, advance) and the engine's own claim transaction (`Claimer.claim`: leases, decisions,
    the next occurrence); fires/s is given as a ratio of each;
(d) the top-of-the-hour burst: 10,000 tasks on one cron minute, 3 engines, fire lag p50/p99/max;
(e) slow targets: 2,000 tasks due at once, the sink answering after 200 ms, one engine with
    --concurrency 500: fires/s against the bound concurrency / latency;
(f) the peak RSS (VmHWM) of every engine process;
(g) the cost of limits: the 1-engine run of (a) again with every task counted against one limit that never binds
    (max_in_flight and rate_per_second far above what the run reaches), alternated with (a) ROUNDS times: the
    claim locks and reads the limit, shares its room and writes its bucket back, where (a) skips all of that;
(h) the cost of tracing: the 1-engine run of (a) again with the OTEL_* variables set (OpenTelemetry's SDK exporting
    a span per run and per attempt over OTLP/HTTP to the sink, which counts them), alternated with (a) ROUNDS times;
    (a) itself has tracing off (every request carries a traceparent, nothing of OpenTelemetry is loaded), and its
    ratio to the client ceiling (b) is compared with the same ratio in the results file this run replaces.
Results: bench/results/engine.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import psycopg

from bench.common import write_results
from bench.reconcile import fresh_database
from bench.sink import SLOW_SECONDS
from reconciler.cli.parser import tune_gc
from reconciler.db import partition_store
from reconciler.db.embedded import embedded_dsn
from reconciler.db.schema import load_schemata
from reconciler.db.store import Store
from reconciler.engine.claim import Claimer
from reconciler.files.limits import load_limits
from reconciler.files.tasks import load_dir
from reconciler.reconcile.apply import apply_tasks
from reconciler.targets.http import new_session

TASKS = 10_000
BURST_TASKS = 10_000
SLOW_TASKS = 2_000
CONCURRENCY = 100  # the engines' --concurrency, and the client ceiling's
BATCH = 1000  # the engines' --batch, and the bare claim loops'
SLOW_CONCURRENCY = 500
LEAD_SECONDS = 6.0  # tasks fall due this long (plus 1 s per 600 files) after the apply starts: every engine waits
ROUNDS = 5  # the 1-engine run, the client ceiling and the raw claim loop alternate this many times (medians compared)
PAIRED = ("fire1", "client", "raw_claim", "fire1_limited", "fire1_traced")
WIDE = "wide"  # (g)'s limit: never binding
WIDE_FILE = "max_in_flight = 100000\nrate_per_second = 100000.0\n"  # limits.d/wide.toml
QUIET_SECONDS = 15.0  # a scenario ends when everything arrived, or nothing arrived for this long
MIB = 1024 * 1024

TaskText = Callable[[int, str], str]
Due = tuple[TaskText, datetime]  # the task files' text, and when they all fall due


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def due_soon(count: int) -> datetime:
    # Due after the apply has surely committed (10,000 files take ~5 s to load and write).
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=LEAD_SECONDS + count / 600)


def once_soon(count: int, path: str = "fire", policy: str = "") -> Due:
    """One-shot tasks all due at one second, shortly after their apply."""
    at = due_soon(count)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        lambda index, url: (
            f'[trigger]\nkind = "once"\nat = {stamp}\n[target]\nurl = "{url}/{path}/{index}"\n'
            f"timeout_seconds = 30\n[policy]\nmisfire_grace_seconds = 3600\n{policy}"
        ),
        at,
    )


def hourly_soon(count: int) -> Due:
    """A `0 * * * *`-like schedule (every hour at the first whole minute after the apply), in UTC and
    in zones a whole hour away: all fall due at one instant."""
    at = (due_soon(count) + timedelta(minutes=1)).replace(second=0)
    zones = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")
    return (
        lambda index, url: (
            f'timezone = "{zones[index % len(zones)]}"\n[trigger]\nkind = "cron"\nexpr = "{at.minute} * * * *"\n'
            f'[target]\nurl = "{url}/burst/{index}"\ntimeout_seconds = 30\n[policy]\nmisfire_grace_seconds = 600\n'
        ),
        at,
    )


def write_files(root: Path, count: int, url: str, text: TaskText) -> None:
    for index in range(count):
        folder = root / f"g{index // 500:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"t{index:05d}.toml").write_text(text(index, url))


# One client for the bench's own calls to the sink: a new httpx client per call builds a TLS
# context (~30 ms of CPU), and wait_for_arrivals polls 10 times a second beside the engines.
SINK = httpx.Client(timeout=10)


def sink_get(url: str, what: str) -> Any:
    return SINK.get(f"{url}/{what}").json()


async def init_schema(dsn: str) -> None:
    """The schema; with BENCH_HISTORY_DAYS=N, runs partitioned by day over the last N days too, as a fleet
    keeping N days of history has them (a new schema has today's and the days ahead only)."""
    async with Store(dsn) as store:
        await store.init_schema()
        days = int(os.environ.get("BENCH_HISTORY_DAYS", "0"))
        if days:
            now = datetime.now(UTC)
            await partition_store.backdated(store, load_schemata(), now - timedelta(days=days), now)


async def apply_dir(dsn: str, root: Path) -> None:
    """Apply the task files below `root`, with the limits of `limits.d` beside it ((g)'s)."""
    loaded = load_dir(root)
    assert not loaded.errors, loaded.errors[:3]
    limits = load_limits(root.parent / "limits.d")
    assert not limits.errors, limits.errors
    async with Store(dsn) as store:
        await apply_tasks(store, loaded.tasks, "default", datetime.now(UTC), declared=[limits])


def peak_rss_mib(pid: int) -> float:
    """The process's high-water resident set (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def neighbours_cpu() -> dict[str, float]:
    """CPU seconds used so far by PostgreSQL's processes and by the sink: they share the 2 cores."""
    used = {"postgres": 0.0, "sink": 0.0}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes()
            kind = "postgres" if comm == "postgres" else "sink" if b"bench.sink" in cmdline else None
            if kind:
                used[kind] += cpu_seconds(int(entry.name))
        except (OSError, ValueError):
            continue  # gone meanwhile
    return used


def per_fire_ms(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
    return {k: round((after[k] - before[k]) * 1000 / count, 3) for k in before}


def wait_for_arrivals(url: str, count: int) -> None:
    """Until `count` requests arrived, or none arrived for QUIET_SECONDS (bounded either way)."""
    last_change, seen = time.monotonic(), -1
    while time.monotonic() - last_change < QUIET_SECONDS:
        fired = int(sink_get(url, "_count"))
        if fired >= count:
            return
        if fired != seen:
            last_change, seen = time.monotonic(), fired
        time.sleep(0.1)


def wait_for_engines(dsn: str, engines: int) -> None:
    """Until every engine has sent its first heartbeat (it has made the schema and is claiming)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(dsn) as conn:
                [(live,)] = conn.execute("SELECT count(*) FROM scheduler.engines").fetchall()
            if live >= engines:
                return
        except psycopg.Error:
            pass  # the schema is not there yet
        time.sleep(0.1)
    raise RuntimeError("the engines did not start within 60 s; see their log")


def spy(pid: int, name: str) -> subprocess.Popen[bytes] | None:
    """When BENCH_SPY names a folder: py-spy samples the engine's firing (10 s from the due instant)
    into NAME.txt there, in flamegraph's folded format."""
    folder = os.environ.get("BENCH_SPY")
    if not folder:
        return None
    command = ["py-spy", "record", "--pid", str(pid), "-o", f"{folder}/{name}.txt", "-f", "raw", "-r", "250"]
    return subprocess.Popen([*command, "--duration", "10", "--nonblocking"], stdout=subprocess.DEVNULL)


def percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, max(0, round(len(values) * share) - 1))]


def traced(url: str) -> dict[str, str]:
    """(h)'s OTEL_* variables: spans exported over OTLP/HTTP to the sink."""
    return {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{url}/v1/traces", "OTEL_SERVICE_NAME": "reconciler-bench"}


def scenario(
    dsn: str,
    url: str,
    workdir: Path,
    name: str,
    engines: int,
    count: int,
    due: Callable[[int], Due],
    *args: str,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Start `engines` processes, apply `count` tasks that `due` makes due shortly, read the sink."""
    SINK.post(f"{url}/_reset")
    root = workdir / name
    untraced = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env = {**untraced, "RECONCILER_DSN": dsn, **(extra_env or {})}
    # Logs go to a file: an unread pipe fills after ~800 run lines and blocks the engine.
    log_path = workdir / f"{name}.log"
    command = [sys.executable, "-m", "reconciler", "engine", "--max-sleep", "1", *args]
    with log_path.open("w") as log_file:
        procs = [
            subprocess.Popen(
                [*command, "--engine-id", f"{name}-{i}"],
                env=env,
                stdout=log_file,
                stderr=log_file,
            )
            for i in range(engines)
        ]
        try:
            wait_for_engines(dsn, engines)
            text, at = due(count)
            write_files(root, count, url, text)
            asyncio.run(apply_dir(dsn, root))
            assert datetime.now(UTC) < at, "the apply took longer than the lead time; raise LEAD_SECONDS"
            time.sleep((at - datetime.now(UTC)).total_seconds())  # the sink counts from the due instant on
            cpu_before = sum(cpu_seconds(proc.pid) for proc in procs)
            neighbours = neighbours_cpu()
            spies = [spy(proc.pid, f"{name}-{i}") for i, proc in enumerate(procs)]
            wait_for_arrivals(url, count)
            time.sleep(SLOW_SECONDS * 2)  # the last answers of a slow target
            rss = [peak_rss_mib(proc.pid) for proc in procs]
            cpu = sum(cpu_seconds(proc.pid) for proc in procs) - cpu_before
            others = per_fire_ms(neighbours, neighbours_cpu(), count)
            for watcher in spies:
                if watcher is not None:
                    watcher.wait(timeout=60)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(timeout=60)
    got = sink_get(url, "_stats")
    lags = sorted(got["lags"])
    span = got["last"] - got["first"]
    row = {
        "engines": engines,
        "tasks": count,
        "fired": got["count"],
        "unique_idempotency_keys": got["keys_unique"],
        "fires_per_second": round(got["count"] / span, 1) if span > 0 else None,
        "seconds_first_to_last_answer": round(got["done"] - got["first"], 3),
        "lag_p50_ms": round(statistics.median(lags) * 1000, 1),
        "lag_p99_ms": round(percentile(lags, 0.99) * 1000, 1),
        "lag_max_ms": round(lags[-1] * 1000, 1),
        "peak_rss_mib": rss,
        "engine_cpu_ms_per_fire": round(cpu * 1000 / count, 3),  # all engines' CPU from the due instant on
        "neighbours_cpu_ms_per_fire": others,  # PostgreSQL's and the sink's, in the same window
        "engine_args": args,
    }
    if got.get("trace_exports"):
        row["trace_exports"], row["trace_bytes"] = got["trace_exports"], got["trace_bytes"]
    assert got["count"] == count == got["keys_unique"], f"{name}: {got['count']} of {count} fired; see {log_path}"
    return row


async def client_ceiling(url: str, count: int, concurrency: int) -> dict[str, Any]:
    """(b) The engine's aiohttp session alone sending `count` requests like the engine's (headers, JSON body)."""
    queue = iter(range(count))
    scheduled = datetime.now(UTC)

    async def worker(session: aiohttp.ClientSession) -> None:
        for index in queue:
            headers = {
                "X-Reconciler-Task": f"g/t{index:05d}",
                "X-Reconciler-Scheduled-For": scheduled.isoformat(),
                "X-Reconciler-Attempt": "1",
                "Idempotency-Key": f"g/t{index:05d}@{scheduled:%Y-%m-%dT%H:%M:%SZ}",
            }
            async with session.post(f"{url}/fire/{index}", headers=headers, json={"n": index}) as response:
                await response.content.read(1024)

    cpu, neighbours = time.process_time(), neighbours_cpu()
    async with new_session(concurrency) as session:  # the engine's own client settings
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    cpu = time.process_time() - cpu
    others = per_fire_ms(neighbours, neighbours_cpu(), count)
    got = sink_get(url, "_stats")
    return {
        "requests": got["count"],
        "requests_per_second": round(got["count"] / (got["last"] - got["first"]), 1),
        "cpu_ms_per_request": round(cpu * 1000 / count, 3),
        "neighbours_cpu_ms_per_request": others,
    }


def raw_claim_loop(dsn: str, count: int, batch: int = 200) -> float:
    """(c) Rows per second of the claim's raw SQL alone: lock, insert run rows, advance, commit."""
    now = datetime.now(UTC)
    with psycopg.connect(dsn, autocommit=True) as conn:
        seed_due_rows(conn, count, now)
        start = time.perf_counter()
        claimed = 0
        while True:
            with conn.transaction():
                rows = conn.execute(
                    "SELECT id, next_run_at FROM scheduler.tasks WHERE enabled AND next_run_at <= %s "
                    "ORDER BY next_run_at FOR UPDATE SKIP LOCKED LIMIT %s",
                    (now, batch),
                ).fetchall()
                if not rows:
                    break
                ids = [r[0] for r in rows]
                conn.execute(
                    "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status) "
                    "SELECT unnest(%s::text[]), unnest(%s::timestamptz[]), 'scheduled', 'running' "
                    "ON CONFLICT (task_id, scheduled_for) WHERE kind NOT IN ('manual', 'backfill') DO NOTHING",
                    (ids, [r[1] for r in rows]),
                )
                conn.execute("UPDATE scheduler.tasks SET next_run_at = NULL WHERE id = ANY(%s)", (ids,))
                claimed += len(rows)
        elapsed = time.perf_counter() - start
        clear(conn)
    return claimed / elapsed


def seed_due_rows(conn: psycopg.Connection[Any], count: int, now: datetime) -> None:
    """`count` due tasks with a real stored spec (an hourly cron), as the apply writes them."""
    clear(conn)
    spec = {
        "trigger": {"kind": "cron", "expr": "0 * * * *"},
        "target": {"url": "http://127.0.0.1:9/x", "method": "POST"},
    }
    conn.execute(
        "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, next_run_at) "
        "SELECT 'bare/' || g, 'bench', %s::jsonb, 'bare', %s FROM generate_series(1, %s) g",
        (json.dumps(spec), now - timedelta(seconds=1), count),
    )


def clear(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DELETE FROM scheduler.run_leases")
    conn.execute("DELETE FROM scheduler.runs")
    conn.execute("DELETE FROM scheduler.tasks")


async def engine_claim_loop(dsn: str, count: int, batch: int = 200, prepare_threshold: int | None = None) -> float:
    """(c) Rows per second of the engine's own claim transaction (`Claimer.claim`, specs validated ahead as
    `serve` does in idle time), nothing fired; `prepare_threshold` as `engine --prepare-threshold`."""
    now = datetime.now(UTC)
    with psycopg.connect(dsn, autocommit=True) as conn:
        seed_due_rows(conn, count, now)
    async with Store(dsn, prepare_threshold=prepare_threshold) as store:
        claimer = Claimer(store, "bench-claim", batch)
        await claimer.warm(now, budget=60.0)  # as a serving engine does while it waits for the instant
        start = time.perf_counter()
        claimed = 0
        while (report := await claimer.claim(now)).claimed_tasks:
            claimed += report.claimed_tasks
        elapsed = time.perf_counter() - start
    with psycopg.connect(dsn, autocommit=True) as conn:
        clear(conn)
    return claimed / elapsed


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def ratio(part: float | None, whole: float) -> float | None:
    return round(part / whole, 3) if part else None


def measure(dsn: str, url: str, work: Path, wanted: set[str]) -> dict[str, Any]:
    """The scenarios named in `wanted` (all when empty), in an order where each leaves the database empty."""
    engine_args = ("--concurrency", str(CONCURRENCY), "--batch", str(BATCH))
    slow_args = ("--concurrency", str(SLOW_CONCURRENCY), "--batch", "500")
    steps: dict[str, Callable[[], Any]] = {
        "fire1": lambda: scenario(dsn, url, work, "fire1", 1, TASKS, once_soon, *engine_args),
        "fire3": lambda: scenario(dsn, url, work, "fire3", 3, TASKS, once_soon, *engine_args),
        "fire1_limited": lambda: scenario(
            dsn,
            url,
            work,
            "fire1_limited",
            1,
            TASKS,
            lambda n: once_soon(n, policy=f'limits = ["{WIDE}"]\n'),
            *engine_args,
        ),
        "fire1_traced": lambda: scenario(
            dsn, url, work, "fire1_traced", 1, TASKS, once_soon, *engine_args, extra_env=traced(url)
        ),
        "client": lambda: asyncio.run(client_ceiling(url, TASKS, CONCURRENCY)),
        "raw_claim": lambda: raw_claim_loop(dsn, TASKS, BATCH),
        "engine_claim": lambda: asyncio.run(engine_claim_loop(dsn, TASKS, BATCH)),
        "burst": lambda: scenario(dsn, url, work, "burst", 3, BURST_TASKS, hourly_soon, *engine_args),
        "slow": lambda: scenario(dsn, url, work, "slow", 1, SLOW_TASKS, lambda n: once_soon(n, "slow"), *slow_args),
    }
    asyncio.run(init_schema(dsn))
    (work / "limits.d").mkdir()
    (work / "limits.d" / f"{WIDE}.toml").write_text(WIDE_FILE)
    chosen = [name for name in steps if not wanted or name in wanted]
    paired = [name for name in PAIRED if name in chosen]
    if len(paired) > 1:  # alternated, ROUNDS times each: see median_round
        chosen = paired * (ROUNDS - 1) + chosen
    out: dict[str, Any] = {}
    for name in chosen:
        SINK.post(f"{url}/_reset")
        out.setdefault(f"{name}_rounds", []).append(steps[name]())
        with psycopg.connect(dsn, autocommit=True) as conn:
            clear(conn)
    for name in steps:
        rounds = out.pop(f"{name}_rounds", [])
        key = "requests_per_second" if name == "client" else "fires_per_second"
        if len(rounds) == 1:
            out[name] = rounds[0]
        elif rounds and isinstance(rounds[0], float):
            out[name], out[f"{name}_rounds"] = statistics.median(rounds), [round(r, 1) for r in rounds]
        elif rounds:
            out[name] = {**median_round(rounds, key), "rounds": [r[key] for r in rounds]}
    return out


def median_round(rounds: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The round with the median `key`: the 1-engine run and the client ceiling alternate ROUNDS
    times and their medians are compared, since one run of either moves ±20 % on this machine."""
    return dict(sorted(rounds, key=lambda r: float(r[key]))[len(rounds) // 2])


def summarize(got: dict[str, Any]) -> dict[str, Any]:
    """The figures, the ratios between them, the peak RSS; printed as they go."""
    one, client = got["fire1"]["fires_per_second"], got["client"]["requests_per_second"]
    raw, claim, burst, slow = got["raw_claim"], got["engine_claim"], got["burst"], got["slow"]
    bound = SLOW_CONCURRENCY / SLOW_SECONDS
    slow_rate = round(SLOW_TASKS / slow["seconds_first_to_last_answer"], 1)
    results = {
        "throughput": [got["fire1"], got["fire3"]],
        "client_ceiling": {**got["client"], "concurrency": CONCURRENCY},
        "raw_claim_rows_per_second": round(raw, 1),
        "raw_claim_rounds": got.get("raw_claim_rounds"),
        "engine_claim_rows_per_second": round(claim, 1),
        "one_engine_vs_client": ratio(one, client),
        "one_engine_vs_raw_claim": ratio(one, raw),
        "one_engine_vs_engine_claim": ratio(one, claim),
        "burst": burst,
        "slow": {
            **slow,
            "completed_per_second": slow_rate,
            "bound_per_second": bound,
            "vs_bound": ratio(slow_rate, bound),
        },
        "limited": got.get("fire1_limited"),
        "limited_vs_unlimited": ratio(got["fire1_limited"]["fires_per_second"], one)
        if "fire1_limited" in got
        else None,
        "traced": got.get("fire1_traced"),
        "traced_vs_untraced": ratio(got["fire1_traced"]["fires_per_second"], one) if "fire1_traced" in got else None,
        "traced_cpu_vs_untraced": ratio(
            got["fire1_traced"]["engine_cpu_ms_per_fire"], got["fire1"]["engine_cpu_ms_per_fire"]
        )
        if "fire1_traced" in got
        else None,
        "peak_rss_mib_max": max(max(got[k]["peak_rss_mib"]) for k in ("fire1", "fire3", "burst", "slow")),
    }
    for row in results["throughput"]:
        print(
            f"(a) {row['engines']} engine(s): {row['fires_per_second']} fires/s for {TASKS} tasks; "
            f"lag p50 {row['lag_p50_ms']} ms, p99 {row['lag_p99_ms']} ms; peak RSS {row['peak_rss_mib']} MiB"
        )
    print(
        f"(b) aiohttp client alone: {client} req/s at concurrency {CONCURRENCY}; "
        f"1 engine = {results['one_engine_vs_client']} of it (medians of {ROUNDS} alternated rounds: "
        f"engine {got['fire1'].get('rounds')}, client {got['client'].get('rounds')})"
    )
    print(
        f"(c) bare claim loops: raw SQL {raw:.0f} rows/s (1 engine = {results['one_engine_vs_raw_claim']}; "
        f"median of {got.get('raw_claim_rounds')}), "
        f"the engine's claim {claim:.0f} rows/s (1 engine = {results['one_engine_vs_engine_claim']})"
    )
    print(
        f"(d) burst, {BURST_TASKS} hourly tasks due at one minute, 3 engines: lag p50 {burst['lag_p50_ms']} ms, "
        f"p99 {burst['lag_p99_ms']} ms, max {burst['lag_max_ms']} ms; peak RSS {burst['peak_rss_mib']} MiB"
    )
    print(
        f"(e) slow targets, {SLOW_TASKS} tasks at {SLOW_SECONDS * 1000:.0f} ms, --concurrency {SLOW_CONCURRENCY}: "
        f"{slow_rate} runs/s completed of a bound {bound:.0f} ({results['slow']['vs_bound']}); "
        f"peak RSS {slow['peak_rss_mib']} MiB"
    )
    print(f"(f) peak RSS of any engine: {results['peak_rss_mib_max']} MiB")
    if results["limited"] is not None:
        print(
            f"(g) every task in one limit that never binds: {results['limited']['fires_per_second']} fires/s, "
            f"{results['limited_vs_unlimited']} of (a)'s 1 engine without (medians of {ROUNDS} alternated rounds: "
            f"limited {results['limited'].get('rounds')}, without {got['fire1'].get('rounds')})"
        )
    if (on := results["traced"]) is not None:
        off = got["fire1"]
        print(
            f"(h) tracing on (OTLP/HTTP to the sink, {on.get('trace_exports')} exports): "
            f"{on['fires_per_second']} fires/s, {results['traced_vs_untraced']} of (a)'s tracing off; "
            f"engine CPU {on['engine_cpu_ms_per_fire']} ms/fire vs {off['engine_cpu_ms_per_fire']} "
            f"({results['traced_cpu_vs_untraced']}) (medians of {ROUNDS} alternated rounds: traced "
            f"{on.get('rounds')}, off {off.get('rounds')})"
        )
    return results


def baseline_ratio() -> float | None:
    """(a)'s 1 engine vs the client ceiling in the results file this run replaces (the code before it)."""
    path = Path(__file__).with_name("results") / "engine.json"
    try:
        value = json.loads(path.read_text()).get("one_engine_vs_client")
    except (OSError, ValueError):
        return None
    return float(value) if isinstance(value, int | float) else None


def start_sink() -> tuple[subprocess.Popen[str], str]:
    """The sink (bench/sink.py) in a process of its own, and its URL."""
    sink = subprocess.Popen([sys.executable, "-m", "bench.sink", str(free_port())], stdout=subprocess.PIPE, text=True)
    assert sink.stdout is not None
    return sink, sink.stdout.readline().strip()


def main() -> None:
    """All scenarios; `python -m bench.engine fire1 …` runs only those named (printed, not written)."""
    tune_gc()
    wanted = set(sys.argv[1:])
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    sink, url = start_sink()
    load_before = load_average()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            got = measure(fresh_database(admin, "reconciler_bench_engine"), url, Path(tmp), wanted)
    finally:
        sink.kill()
    if wanted:
        print(json.dumps(got, indent=2, default=str))
        return
    before = baseline_ratio()
    results = summarize(got)
    results["one_engine_vs_client_before"] = before
    print(
        f"tracing off: 1 engine = {results['one_engine_vs_client']} of the client ceiling; "
        f"{before} in the results this run replaces"
    )
    load = {"load_average_before": load_before, "load_average_after": load_average()}
    print(f"load average {load_before} → {load['load_average_after']}")
    print(f"wrote {write_results('engine', {**load, **results})}")


if __name__ == "__main__":
    main()
