"""Claim-query cost as scheduler.tasks grows: 1k, 100k and 1M rows, of which 100 are due;
and the reads of the metrics and the read commands as scheduler.runs grows: 10k and 1M runs.

For each size: EXPLAIN (ANALYZE, BUFFERS) of the engine's own claim query (from
reconciler/db/queries.sql) and the median wall time of the claim statement in a
transaction (rolled back, so every repetition sees the same 100 due rows).
Reads: 10,000 tasks, every run of 50 of them (half failing since their first runs), so most
tasks have no recent run and some a very old last success; the median wall time of the
per-task health refresh, `status`, `runs ID`, `explain ID` and the late scan, as each reads.
Results: bench/results/scale.json.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.common import write_results
from bench.reconcile import fresh_database
from reconciler.db.embedded import embedded_dsn
from reconciler.db.store import QUERIES, Store

SIZES = (1_000, 100_000, 1_000_000)
DUE = 100
BATCH = 100
REPEAT = 200
SPEC = '{"trigger": {"kind": "interval", "every": "1h"}, "target": {"url": "http://127.0.0.1:9/x"}}'
LATE_SPEC = SPEC[:-1] + ', "notify": {"late": ["oncall"]}}'
READ_TASKS, BUSY = 10_000, 50
RUN_SIZES = (10_000, 1_000_000)
READ_REPEAT = 20
READ_BOUND_MS = 500.0


async def init(dsn: str) -> None:
    async with Store(dsn) as store:
        await store.init_schema()


def fill(conn: psycopg.Connection[Any], rows: int, now: datetime) -> None:
    """`rows` tasks: DUE due now, a tenth disabled, the rest due within the next day."""
    conn.execute("TRUNCATE scheduler.tasks")
    conn.execute(
        "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, enabled, next_run_at) "
        "SELECT 'bench/' || g, 'bench', %(spec)s::jsonb, md5(g::text), g %% 10 <> 0, "
        "       CASE WHEN g <= %(due)s THEN %(now)s - interval '1 second' * g "
        "            ELSE %(now)s + interval '1 second' * (1 + g %% 86400) END "
        "  FROM generate_series(1, %(rows)s) g",
        {"spec": SPEC, "due": DUE, "now": now, "rows": rows},
    )
    # g % 10 <> 0 keeps 90 of the 100 due rows enabled; make all 100 due rows enabled.
    conn.execute("UPDATE scheduler.tasks SET enabled = true WHERE next_run_at <= %s", (now,))
    conn.execute("VACUUM ANALYZE scheduler.tasks")


def measure(conn: psycopg.Connection[Any], now: datetime) -> dict[str, Any]:
    params = {"now": now, "batch": BATCH, "sources": []}
    claim = QUERIES["claim_due"]
    with conn.transaction(force_rollback=True):
        plan = [row[0] for row in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + claim, params)]
    times, whole = [], []
    for _ in range(REPEAT):
        with conn.transaction(force_rollback=True):
            start = time.perf_counter()
            got = conn.execute(claim, params).fetchall()
            times.append(time.perf_counter() - start)
            # The rest of the claim transaction: run rows and next_run_at, as the engine writes them.
            ids, due = [r[0] for r in got], [r[2] for r in got]
            n = len(ids)
            conn.execute(
                QUERIES["runs_insert"],
                {"task_ids": ids, "scheduled": due, "kinds": ["scheduled"] * n, "statuses": ["running"] * n,
                 "errors": [None] * n, "engine_id": "bench", "now": now, "lease_ids": ids, "lease_seconds": [60.0] * n},
            )  # fmt: skip
            conn.execute(
                QUERIES["tasks_advance"], {"ids": ids, "nexts": [now + timedelta(hours=1)] * n, "waits": [None] * n}
            )
            whole.append(time.perf_counter() - start)
    assert len(got) == DUE, len(got)
    return {
        "median_ms": round(statistics.median(times) * 1000, 3),
        "p95_ms": round(sorted(times)[int(len(times) * 0.95)] * 1000, 3),
        "transaction_median_ms": round(statistics.median(whole) * 1000, 3),
        "uses_index": any("tasks_due_idx" in line for line in plan),
        "plan": plan,
    }


def fill_runs(conn: psycopg.Connection[Any], runs: int, now: datetime) -> None:
    """READ_TASKS tasks (a tenth with `late` subscribers, half of all due) and `runs` runs, one a minute
    up to `now`, all of BUSY tasks: the odd ones failed after their first hundredth."""
    conn.execute("TRUNCATE scheduler.tasks, scheduler.runs")
    conn.execute(
        "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, next_run_at) "
        "SELECT 'bench/' || g, 'bench', CASE WHEN g %% 10 = 0 THEN %(late)s ELSE %(spec)s END::jsonb, md5(g::text), "
        "       %(now)s + interval '1 second' * (g %% 3600 - 1800) "
        "  FROM generate_series(1, %(tasks)s) g",
        {"spec": SPEC, "late": LATE_SPEC, "now": now, "tasks": READ_TASKS},
    )
    conn.execute(
        "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, claimed_at, finished_at) "
        "SELECT 'bench/' || (n %% %(busy)s + 1), %(now)s - interval '1 minute' * (%(runs)s - n), 'scheduled', "
        "       CASE WHEN n > %(runs)s / 100 AND n %% %(busy)s %% 2 = 0 THEN 'failed' ELSE 'succeeded' END, 1, "
        "       %(now)s - interval '1 minute' * (%(runs)s - n), %(now)s - interval '1 minute' * (%(runs)s - n) "
        "  FROM generate_series(1, %(runs)s) n",
        {"busy": BUSY, "runs": runs, "now": now},
    )
    conn.execute("VACUUM ANALYZE scheduler.tasks, scheduler.runs")


def reads(now: datetime) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Each measured read: the statements it runs (as the metrics and the commands do)."""
    busy, idle = "bench/1", f"bench/{READ_TASKS}"  # a failing task with runs; one that never ran
    explain = [
        ("task_get", {"id": busy}),
        ("runs_between", {"task_id": busy, "lo": now - timedelta(hours=3), "hi": now}),
        ("notifications_of_runs", {"run_ids": []}),
    ]
    return {
        "health": [("task_health", {"now": now, "sources": [], "limit": READ_TASKS})],
        "status": [("status_rows", {}), ("engines_live", {"since": now}), ("applies_live_sources", {})],
        "runs_busy": [("runs_list", {"task_id": busy, "status": None, "limit": 20})],
        "runs_idle": [("runs_list", {"task_id": idle, "status": None, "limit": 20}), ("task_get", {"id": idle})],
        "explain": explain,
        "late": [("tasks_late", {"now": now, "floor": 60.0})],
    }


def measure_reads(conn: psycopg.Connection[Any], now: datetime) -> dict[str, float]:
    """The median ms of each read (its statements in one transaction, as `Store.reading` runs them)."""
    medians = {}
    for name, statements in reads(now).items():
        times = []
        for _ in range(READ_REPEAT):
            start = time.perf_counter()
            with conn.transaction():
                for query, params in statements:
                    conn.execute(QUERIES[query], params).fetchall()
            times.append(time.perf_counter() - start)
        medians[name] = round(statistics.median(times) * 1000, 3)
    return medians


def main() -> None:
    import asyncio

    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    dsn = fresh_database(admin, "reconciler_bench_scale")
    asyncio.run(init(dsn))
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    results: dict[str, Any] = {"due": DUE, "batch": BATCH, "repeat": REPEAT, "sizes": []}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for rows in SIZES:
            start = time.perf_counter()
            fill(conn, rows, now - timedelta(days=1))
            filled = time.perf_counter() - start
            found = measure(conn, now - timedelta(days=1))
            found = {"rows": rows, "fill_seconds": round(filled, 1), **found}
            results["sizes"].append(found)
            print(
                f"\n== {rows:,} rows ({DUE} due): claim query median {found['median_ms']} ms, "
                f"p95 {found['p95_ms']} ms; whole claim transaction median {found['transaction_median_ms']} ms"
            )
            print("\n".join(found["plan"]))
    first, last = results["sizes"][0], results["sizes"][-1]
    results["ratio_1m_vs_1k"] = round(last["median_ms"] / first["median_ms"], 2)
    results["transaction_ratio_1m_vs_1k"] = round(last["transaction_median_ms"] / first["transaction_median_ms"], 2)
    print(
        f"\nclaim query cost at {last['rows']:,} rows / at {first['rows']:,} rows: {results['ratio_1m_vs_1k']}x; "
        f"whole claim transaction: {results['transaction_ratio_1m_vs_1k']}x"
    )
    read_sizes = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for runs in RUN_SIZES:
            start = time.perf_counter()
            fill_runs(conn, runs, now)
            filled = time.perf_counter() - start
            found = {"runs": runs, "tasks": READ_TASKS, "fill_seconds": round(filled, 1), **measure_reads(conn, now)}
            read_sizes.append(found)
            print(f"\n== reads, {runs:,} runs of {BUSY} of {READ_TASKS:,} tasks (median ms): {found}")
    small, large = read_sizes
    read_ratios = {name: round(large[name] / small[name], 2) for name in reads(now)}
    slowest = max(large[name] for name in reads(now))
    results["reads"] = {"repeat": READ_REPEAT, "sizes": read_sizes, "ratio_1m_vs_10k": read_ratios}
    results["reads"]["within_bound"] = slowest <= READ_BOUND_MS
    print(
        f"reads at {large['runs']:,} runs / at {small['runs']:,} runs: {read_ratios}; "
        f"slowest {slowest} ms (bound {READ_BOUND_MS:g} ms)"
    )
    print(f"wrote {write_results('scale', results)}")


if __name__ == "__main__":
    main()
