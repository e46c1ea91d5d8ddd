"""Claim-query cost as scheduler.tasks grows: 1k, 100k and 1M rows, of which 100 are due;
and what the engine, the commands and the dashboard send as the run history grows (BENCH_SCALE_RUNS: 1M and 10M
runs by default, 100M when asked), partitioned by day over 30 days as a fleet keeping 30 days has it.

For each size: EXPLAIN (ANALYZE, BUFFERS) of the engine's own claim query (from
reconciler/db/queries.sql) and the median wall time of the claim statement in a
transaction (rolled back, so every repetition sees the same 100 due rows).
History: 10,000 tasks, the runs spread evenly over them and over 30 days (one task in 50 failing throughout);
median and p95 wall time of the claim's first round trip, a result write, `status`, `runs ID`, `explain ID`, the
health gauges' refresh and the dashboard's `/` and `/tasks/<id>` statements, each group in a rolled-back
transaction; the ratio of the largest size's medians to the smallest's (flat: within 1.5x).
Results: bench/results/scale.json.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.common import write_results
from bench.reconcile import fresh_database
from reconciler.db import partition_store
from reconciler.db.embedded import embedded_dsn
from reconciler.db.schema import load_schemata
from reconciler.db.sqlfile import QUERIES
from reconciler.db.store import Store

SIZES = (1_000, 100_000, 1_000_000)
DUE = 100
BATCH = 100
REPEAT = 200
SPEC = '{"trigger": {"kind": "interval", "every": "1h"}, "target": {"url": "http://127.0.0.1:9/x"}}'
LATE_SPEC = SPEC[:-1] + ', "notify": {"late": ["oncall"]}}'
READ_TASKS, BUSY = 10_000, 50
# Runs of the history measured (BENCH_SCALE_RUNS, comma-separated; the 100,000,000 point takes hours and ~40 GB).
RUN_SIZES = tuple(int(n) for n in os.environ.get("BENCH_SCALE_RUNS", "1000000,10000000").split(","))
HISTORY_DAYS = 30
READ_REPEAT = 20


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
                 "errors": [None] * n, "trace_ids": [None] * n, "engine_id": "bench", "now": now, "lease_ids": ids,
                 "lease_seconds": [60.0] * n},
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


def fill_history(dsn: str, runs: int, now: datetime) -> None:
    """READ_TASKS tasks (a tenth with `late` subscribers, half of all due) and `runs` finished runs spread evenly
    over the HISTORY_DAYS days before `now`, in daily partitions as a fleet keeping that many days has them; the
    tasks of one BUSY-th failed since the history began. One INSERT per day, so each fills one partition."""
    import asyncio

    async def partitioned() -> None:
        async with Store(dsn) as store:
            await store.init_schema()
            await partition_store.backdated(store, load_schemata(), now - timedelta(days=HISTORY_DAYS), now)

    asyncio.run(partitioned())
    per_day = runs // HISTORY_DAYS
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, next_run_at) "
            "SELECT 'bench/' || g, 'bench', CASE WHEN g %% 10 = 0 THEN %(late)s ELSE %(spec)s END::jsonb, "
            "       md5(g::text), %(now)s + interval '1 second' * (g %% 3600 - 1800) "
            "  FROM generate_series(1, %(tasks)s) g",
            {"spec": SPEC, "late": LATE_SPEC, "now": now, "tasks": READ_TASKS},
        )
        for day in range(HISTORY_DAYS, 0, -1):
            start = now - timedelta(days=day)
            conn.execute(
                "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, claimed_at, finished_at, "
                "                            http_status, duration_ms) "
                "SELECT 'bench/' || (1 + n %% %(tasks)s), at, 'scheduled', "
                "       CASE WHEN n %% %(tasks)s %% %(busy)s = 0 THEN 'failed' ELSE 'succeeded' END, 1, at, at, 200, 3 "
                "  FROM generate_series(1, %(per_day)s) n, "
                "       LATERAL (SELECT %(start)s + interval '1 second' * (n::float8 * 86400 / %(per_day)s)) t(at)",
                {"tasks": READ_TASKS, "busy": BUSY, "per_day": per_day, "start": start},
            )
            print(f"  {runs:,} runs: day {HISTORY_DAYS - day + 1} of {HISTORY_DAYS} filled", flush=True)
        conn.execute("VACUUM ANALYZE scheduler.tasks, scheduler.runs")


def reads(conn: psycopg.Connection[Any], now: datetime) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Each measured statement group, as the engine, the commands and the dashboard send them."""
    busy, idle = "bench/2", "bench/none"  # a task with runs in every day; one with no run at all
    newest = conn.execute(
        "SELECT id, scheduled_for FROM scheduler.runs WHERE task_id = %s ORDER BY id DESC LIMIT 1", (busy,)
    ).fetchone()
    assert newest is not None
    run_id, scheduled_for = newest
    page: dict[str, Any] = {"after": None, "source": None, "labels": None, "status": None, "now": now, "limit": 50}
    page |= {"id": None, "statuses": ["succeeded", "failed"]}
    one_task = {**page, "id": busy, "limit": 1}
    finished = {
        "run_ids": [run_id], "scheduled": [scheduled_for], "statuses": ["succeeded"], "attempts": [1],
        "started": [now], "finished": [now], "http": [200], "errors": [None], "durations": [3], "excerpts": [None],
    }  # fmt: skip
    runs_of = {"task_id": busy, "before": None, "status": None, "kind": None, "since": None, "until": None}
    return {
        "claim": [
            ("clock_now", {"now": now}),
            ("leases_expired", {"now": now}),
            ("claim_due", {"now": now, "batch": BATCH, "sources": []}),
            ("claim_queued", {"now": now, "batch": BATCH, "sources": []}),
        ],
        "result_write": [
            ("runs_finish_many", finished),
            ("runs_finish_notify", {"run_ids": [run_id], "scheduled": [scheduled_for]}),
        ],
        "status": [("status_rows", {}), ("engines_live", {"seconds": 60.0}), ("applies_live_sources", {})],
        "runs_id": [("run_get", {"run_id": run_id})],
        "explain": [
            ("task_get", {"id": busy}),
            ("runs_between", {"task_id": busy, "lo": now - timedelta(hours=3), "hi": now}),
        ],
        "health": [("task_health", {"sources": [], "limit": READ_TASKS})],
        "dashboard_tasks": [("dashboard_tasks", page)],
        "dashboard_task_page": [("dashboard_tasks", one_task), ("dashboard_runs", {**runs_of, "limit": 50})],
        "runs_idle": [("runs_list", {"task_id": idle, "status": None, "limit": 20})],
    }


def measure_reads(conn: psycopg.Connection[Any], now: datetime) -> dict[str, dict[str, float]]:
    """Each group's median and p95 ms (its statements in one transaction, rolled back: writes measured too)."""
    out = {}
    for name, statements in reads(conn, now).items():
        times = []
        for _ in range(READ_REPEAT):
            start = time.perf_counter()
            with conn.transaction(force_rollback=True):
                for query, params in statements:
                    conn.execute(QUERIES[query], params)
            times.append(time.perf_counter() - start)
        ordered = sorted(times)
        out[name] = {
            "median_ms": round(statistics.median(ordered) * 1000, 3),
            "p95_ms": round(ordered[int(len(ordered) * 0.95)] * 1000, 3),
        }
    return out


def main() -> None:
    """Both parts; BENCH_SCALE_ONLY=history measures the run history alone."""
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    results: dict[str, Any] = {"due": DUE, "batch": BATCH, "repeat": REPEAT, "sizes": []}
    if os.environ.get("BENCH_SCALE_ONLY") != "history":
        claim_sizes(admin, now, results)
    history_sizes(admin, now, results)
    print(f"wrote {write_results('scale', results)}")


def claim_sizes(admin: str, now: datetime, results: dict[str, Any]) -> None:
    """The claim query as scheduler.tasks grows."""
    import asyncio

    dsn = fresh_database(admin, "reconciler_bench_scale")
    asyncio.run(init(dsn))
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


def history_sizes(admin: str, now: datetime, results: dict[str, Any]) -> None:
    """What the engine, the commands and the dashboard send, as the partitioned run history grows."""
    read_sizes: list[dict[str, Any]] = []
    for runs in RUN_SIZES:
        history = fresh_database(admin, "reconciler_bench_history")
        start = time.perf_counter()
        fill_history(history, runs, now)
        filled = time.perf_counter() - start
        with psycopg.connect(history, autocommit=True) as conn:
            found = {"runs": runs, "tasks": READ_TASKS, "fill_seconds": round(filled, 1), **measure_reads(conn, now)}
        read_sizes.append(found)
        print(f"\n== {runs:,} runs over {HISTORY_DAYS} days of {READ_TASKS:,} tasks: {found}")
    small, large = read_sizes[0], read_sizes[-1]
    names = [name for name, value in large.items() if isinstance(value, dict)]
    ratios = {name: round(large[name]["median_ms"] / small[name]["median_ms"], 2) for name in names}
    results["reads"] = {"repeat": READ_REPEAT, "history_days": HISTORY_DAYS, "sizes": read_sizes, "ratios": ratios}
    results["reads"]["flat_within_1_5"] = all(ratio <= 1.5 for ratio in ratios.values())
    print(f"medians at {large['runs']:,} runs / at {small['runs']:,} runs: {ratios}")


if __name__ == "__main__":
    main()
