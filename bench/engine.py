"""Engine throughput and fire lag, against a local 204 sink, compared with a bare claim loop.

1. fires/second with 1 and 3 `reconciler engine` processes for 10,000 due one-shot tasks;
2. fire lag (arrival at the sink − scheduled_for) p50/p99 for 1,000 tasks due in the same second;
3. the bare claim-transaction loop (raw psycopg, no HTTP) over the same 10,000 rows, so the
   engine's figure is also given as a ratio of what the database alone allows.
Results: bench/results/engine.json.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg

from bench.common import write_results
from bench.reconcile import fresh_database
from reconciler.apply import apply_tasks
from reconciler.cli import tune_gc
from reconciler.embedded import embedded_dsn
from reconciler.loader import load_dir
from reconciler.store import Store

TASKS = 10_000
LAG_TASKS = 1_000
LEAD_SECONDS = 4.0  # tasks fall due this long after the apply, so every engine is already waiting


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_once_tasks(root: Path, count: int, url: str, at: datetime) -> None:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    for index in range(count):
        folder = root / f"g{index // 500:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"t{index:05d}.toml").write_text(
            f'[trigger]\nkind = "once"\nat = {stamp}\n[target]\nurl = "{url}/fire/{index}"\n'
            "timeout_seconds = 30\n[policy]\nmisfire_grace_seconds = 3600\n"
        )


def stats(url: str) -> dict[str, object]:
    return dict(httpx.get(f"{url}/_stats", timeout=10).json())


async def apply_dir(dsn: str, root: Path) -> None:
    loaded = load_dir(root)
    assert not loaded.errors
    async with Store(dsn) as store:
        await store.init_schema()
        await apply_tasks(store, loaded.tasks, "default", datetime.now(UTC))


def run_engines(dsn: str, url: str, engines: int, count: int, workdir: Path) -> dict[str, object]:
    """Apply `count` once-tasks due shortly, let `engines` processes fire them, read the sink."""
    httpx.post(f"{url}/_reset", timeout=10)
    root = workdir / f"tasks-{engines}-{count}"
    env = {**os.environ, "RECONCILER_DSN": dsn}
    # Logs go to a file: an unread pipe fills after ~800 run lines and blocks the engine.
    log_path = workdir / f"engines-{engines}-{count}.log"
    log_file = log_path.open("w")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reconciler",
                "engine",
                "--engine-id",
                f"bench-{i}",
                "--concurrency",
                "40",
                "--batch",
                "200",
                "--max-sleep",
                "1",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
        for i in range(engines)
    ]
    try:
        time.sleep(1.5)
        # Due after the apply has surely committed (10,000 files take ~5 s to plan and write).
        due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=LEAD_SECONDS + count / 800)
        write_once_tasks(root, count, url, due)
        asyncio.run(apply_dir(dsn, root))
        assert datetime.now(UTC) < due, "apply took longer than the lead time; raise LEAD_SECONDS"
        last_change, seen = time.monotonic(), -1
        while time.monotonic() - last_change < 15:  # bounded: stop once nothing arrives for 15 s
            fired = int(httpx.get(f"{url}/_count", timeout=10).text)
            if fired >= count:
                break
            if fired != seen:
                last_change, seen = time.monotonic(), fired
            time.sleep(0.2)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
        log_file.close()
    got = stats(url)
    lags = sorted(got["lags"])  # type: ignore[call-overload]
    span = float(got["last"]) - float(got["first"])  # type: ignore[arg-type]
    return {
        "engines": engines,
        "tasks": count,
        "fired": got["count"],
        "unique_idempotency_keys": got["keys_unique"],
        "fires_per_second": round(int(got["count"]) / span, 1) if span > 0 else None,  # type: ignore[call-overload]
        "lag_p50_ms": round(statistics.median(lags) * 1000, 1),
        "lag_p99_ms": round(lags[int(len(lags) * 0.99) - 1] * 1000, 1),
    }


def bare_claim_loop(dsn: str, count: int, batch: int = 200) -> float:
    """Rows per second of the claim transaction alone: lock, insert run rows, advance, commit."""
    now = datetime.now(UTC)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM scheduler.runs")
        conn.execute("DELETE FROM scheduler.tasks WHERE id LIKE 'bare/%%'")
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, next_run_at) "
            "SELECT 'bare/' || g, 'bench', '{}'::jsonb, 'x', %s FROM generate_series(1, %s) g",
            (now - timedelta(seconds=1), count),
        )
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
                    "ON CONFLICT (task_id, scheduled_for) WHERE kind <> 'manual' DO NOTHING",
                    (ids, [r[1] for r in rows]),
                )
                conn.execute("UPDATE scheduler.tasks SET next_run_at = NULL WHERE id = ANY(%s)", (ids,))
                claimed += len(rows)
        elapsed = time.perf_counter() - start
        conn.execute("DELETE FROM scheduler.tasks WHERE id LIKE 'bare/%%'")
        conn.execute("DELETE FROM scheduler.runs")
    return claimed / elapsed


def main() -> None:
    tune_gc()
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    port = free_port()
    sink = subprocess.Popen([sys.executable, "-m", "bench.sink", str(port)], stdout=subprocess.PIPE, text=True)
    assert sink.stdout is not None
    url = sink.stdout.readline().strip()
    results: dict[str, object] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = []
            for engines in (1, 3):
                dsn = fresh_database(admin, f"reconciler_bench_engine_{engines}")
                row = run_engines(dsn, url, engines, TASKS, Path(tmp))
                row["bare_claim_rows_per_second"] = round(bare_claim_loop(dsn, TASKS), 1)
                fps, bare = row["fires_per_second"], row["bare_claim_rows_per_second"]
                row["ratio_vs_bare_claim"] = round(float(fps) / float(bare), 3) if fps else None  # type: ignore[arg-type]
                runs.append(row)
                print(
                    f"{engines} engine(s): {fps} fires/s for {TASKS} tasks (bare claim loop {bare} rows/s, "
                    f"ratio {row['ratio_vs_bare_claim']}); unique keys {row['unique_idempotency_keys']}/{TASKS}; "
                    f"lag p50 {row['lag_p50_ms']} ms, p99 {row['lag_p99_ms']} ms"
                )
            dsn = fresh_database(admin, "reconciler_bench_engine_lag")
            lag = run_engines(dsn, url, 1, LAG_TASKS, Path(tmp))
            print(
                f"fire lag, {LAG_TASKS} tasks due in one second, 1 engine: "
                f"p50 {lag['lag_p50_ms']} ms, p99 {lag['lag_p99_ms']} ms"
            )
            results = {"throughput": runs, "lag": lag}
    finally:
        sink.kill()
    print(f"wrote {write_results('engine', results)}")


if __name__ == "__main__":
    main()
