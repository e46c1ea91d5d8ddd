"""`reconciler db init` converting an unpartitioned run history (a release before partitions) at size: how long
it takes, and how long the table is locked, while a claim loop writes runs beside it.

In one run, on the embedded PostgreSQL, for each size of BENCH_CONVERSION_RUNS (default 1,000,000): the schema
as the previous release made it (tests/fixtures/schemata-before-partitions.toml), that many finished runs over
the last 30 days, then `initialize` (what `db init` runs) while a loop inserts a run every 10 ms as a claim
would; the conversion's whole time and lock window, and the longest that loop's insert waited.

Results: bench/results/conversion.json.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.common import write_results
from bench.reconcile import fresh_database
from reconciler.db import schema
from reconciler.db.embedded import embedded_dsn
from reconciler.db.initialize import initialize
from reconciler.db.store import Store

PREVIOUS = Path(__file__).parents[1] / "tests" / "fixtures" / "schemata-before-partitions.toml"
SIZES = [int(n) for n in os.environ.get("BENCH_CONVERSION_RUNS", "1000000").split(",")]
WRITE_EVERY = 0.01


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def previous_release(dsn: str, runs: int) -> float:
    """The older schema and `runs` finished runs of 1,000 tasks over 30 days; seconds taken."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in schema.statements(schema.load_schemata(PREVIOUS), schema.Existing(False, {}, set())):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, claimed_at, finished_at, "
            "                            http_status, duration_ms) "
            "SELECT 'bench/' || (g %% 1000), at, 'scheduled', 'succeeded', 1, at, at, 204, 3 "
            "  FROM generate_series(1, %(runs)s) g, "
            "       LATERAL (SELECT now() - interval '1 second' * (g::float8 * 2592000 / %(runs)s)) t(at)",
            {"runs": runs},
        )
        conn.execute("VACUUM ANALYZE scheduler.runs")
    return time.perf_counter() - started


class Writer(threading.Thread):
    """A run inserted every WRITE_EVERY seconds, as claims write them; the longest one took."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.longest, self.written = dsn, 0.0, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopped.wait(WRITE_EVERY):
                started = time.perf_counter()
                conn.execute(
                    "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status) "
                    "VALUES ('writer', clock_timestamp(), 'manual', 'succeeded')"
                )
                self.longest = max(self.longest, time.perf_counter() - started)
                self.written += 1


async def convert(dsn: str) -> dict[str, Any]:
    async with Store(dsn) as store:
        done = await initialize(store)
    [converted] = done.converted
    return {"seconds": round(converted.seconds, 2), "locked_ms": round(converted.locked_seconds * 1000, 1)}


def main() -> None:
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    results: dict[str, Any] = {"load_average_before": load_average(), "sizes": []}
    for runs in SIZES:
        dsn = fresh_database(admin, "reconciler_bench_conversion")
        seeded = previous_release(dsn, runs)
        writer = Writer(dsn)
        writer.start()
        time.sleep(0.5)
        found = asyncio.run(convert(dsn))
        writer.stopped.set()
        writer.join()
        with psycopg.connect(dsn) as conn:
            kept = conn.execute("SELECT count(*) FROM scheduler.runs WHERE task_id <> 'writer'").fetchone()
        assert kept == (runs,), kept
        row = {"runs": runs, "seed_seconds": round(seeded, 1), **found, "writes": writer.written}
        row["longest_write_ms"] = round(writer.longest * 1000, 1)
        results["sizes"].append(row)
        print(
            f"{runs:,} runs converted in {row['seconds']} s, the table locked {row['locked_ms']} ms; "
            f"a write every {WRITE_EVERY * 1000:g} ms beside it: {writer.written} written, the longest "
            f"{row['longest_write_ms']} ms; all {runs:,} rows kept"
        )
    results["load_average_after"] = load_average()
    results["at"] = datetime.now(UTC).isoformat(timespec="seconds")
    print(f"wrote {write_results('conversion', results)}")


if __name__ == "__main__":
    main()
