"""What turning off server-side prepared statements costs the claim (the engine's default since it
must work behind PgBouncer in transaction mode). Measured at 0.99 of the rate with them on, within
noise, so there is no option to turn them back on.

The engine's own claim transaction (`Claimer.claim`) over 10,000 due rows, 200 a claim, with
psycopg's prepared statements off (prepare_threshold None) and on (5, psycopg's default),
alternating ROUNDS times on one embedded PostgreSQL; the medians and their ratio.
Results: bench/results/prepare.json.
"""

from __future__ import annotations

import asyncio
import statistics

from bench.common import write_results
from bench.engine import engine_claim_loop, load_average
from bench.reconcile import bench_database

ROWS = 10_000
BATCH = 200
ROUNDS = 5


def main() -> None:
    dsn = bench_database("reconciler_bench_prepare")
    load_before = load_average()
    rates: dict[str, list[float]] = {"off": [], "on": []}
    asyncio.run(engine_claim_loop(dsn, ROWS, BATCH, None))  # warm-up: caches, the table's first pages
    for _ in range(ROUNDS):
        for name, threshold in (("off", None), ("on", 5)):
            rates[name].append(asyncio.run(engine_claim_loop(dsn, ROWS, BATCH, threshold)))
    medians = {name: round(statistics.median(values)) for name, values in rates.items()}
    ratio = round(medians["off"] / medians["on"], 3)
    for name, values in rates.items():
        print(f"prepared statements {name}: median {medians[name]} rows/s claimed ({[round(v) for v in values]})")
    print(f"off / on: {ratio}")
    load = {"load_average_before": load_before, "load_average_after": load_average()}
    print(f"load average {load_before} -> {load['load_average_after']}")
    results = {**load, "rows": ROWS, "batch": BATCH, "rounds": ROUNDS, "rows_per_second": medians, "off_over_on": ratio}
    print(f"wrote {write_results('prepare', results)}")


if __name__ == "__main__":
    main()
