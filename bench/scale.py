"""Claim-query cost as scheduler.tasks grows: 1k, 100k and 1M rows, of which 100 are due.

For each size: EXPLAIN (ANALYZE, BUFFERS) of the engine's own claim query (from
reconciler/sql/queries.sql) and the median wall time of the claim statement in a
transaction (rolled back, so every repetition sees the same 100 due rows).
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
from reconciler.embedded import embedded_dsn
from reconciler.store import QUERIES, Store

SIZES = (1_000, 100_000, 1_000_000)
DUE = 100
BATCH = 100
REPEAT = 200
SPEC = '{"trigger": {"kind": "interval", "every": "1h"}, "target": {"url": "http://127.0.0.1:9/x"}}'


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
    params = {"now": now, "batch": BATCH}
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
            ids, due = [r[0] for r in got], [r[3] for r in got]
            n = len(ids)
            conn.execute(
                QUERIES["runs_insert"],
                {"task_ids": ids, "scheduled": due, "kinds": ["scheduled"] * n, "statuses": ["running"] * n,
                 "errors": [None] * n, "engine_id": "bench", "now": now, "lease_ids": ids, "lease_seconds": [60.0] * n},
            )  # fmt: skip
            conn.execute(QUERIES["tasks_advance"], {"ids": ids, "nexts": [now + timedelta(hours=1)] * n})
            whole.append(time.perf_counter() - start)
    assert len(got) == DUE, len(got)
    return {
        "median_ms": round(statistics.median(times) * 1000, 3),
        "p95_ms": round(sorted(times)[int(len(times) * 0.95)] * 1000, 3),
        "transaction_median_ms": round(statistics.median(whole) * 1000, 3),
        "uses_index": any("tasks_due_idx" in line for line in plan),
        "plan": plan,
    }


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
    print(f"wrote {write_results('scale', results)}")


if __name__ == "__main__":
    main()
