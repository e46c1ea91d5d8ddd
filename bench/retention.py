"""Retention at scale: how fast the engine retires a run history of millions of rows (whole daily partitions,
detached CONCURRENTLY and dropped), and what that does to the claim meanwhile.

In one run, on the embedded PostgreSQL:

1. RUNS finished runs older than the default retention (30 days), of TASKS tasks, in daily partitions;
2. the engine's own claim (`Claimer.claim`, batch BATCH of interval tasks due each time),
   CLAIMS times without retention: its median latency;
3. the engine's own partition maintenance (`Engine.maintain_partitions`, in a process of its own, as the
   leading replica runs it beside its claims) over that history, and the same claims meanwhile;
4. the rows removed per second over the whole pass, and the claim's median latency while
   it runs as a ratio of the one without.

Results: bench/results/retention.json.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg

from bench.common import write_results
from bench.reconcile import bench_database
from reconciler.db import partition_store
from reconciler.db.schema import load_schemata
from reconciler.db.store import Store
from reconciler.engine.claim import Claimer
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine

RUNS = int(os.environ.get("BENCH_RETENTION_RUNS", "3000000"))
TASKS = 1_000
BATCH = 100  # due tasks per claim
CLAIMS = 200
SAMPLE_SECONDS = 0.005  # how often the lock sampler looks
KEEP_DAYS = 30.0
SPEC = '{"trigger": {"kind": "interval", "every": "1m"}, "target": {"url": "http://127.0.0.1:9/x"}}'


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def partitioned(dsn: str, now: datetime) -> None:
    """Daily partitions of runs from 121 days ago, as the leading engine would have made them."""
    async with Store(dsn) as store:
        await partition_store.backdated(store, load_schemata(), now - timedelta(days=121), now + timedelta(days=1))


def seed(dsn: str, now: datetime) -> float:
    """TASKS tasks (BATCH of them due every minute) and RUNS finished runs 31-120 days old; seconds taken."""
    start = time.perf_counter()
    asyncio.run(partitioned(dsn, now))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, next_run_at) "
            "SELECT 'bench/' || g, 'bench', %(spec)s::jsonb, md5(g::text), "
            "       CASE WHEN g <= %(due)s THEN %(now)s ELSE %(now)s + interval '1 day' END "
            "  FROM generate_series(1, %(tasks)s) g",
            {"spec": SPEC, "due": BATCH, "now": now, "tasks": TASKS},
        )
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, claimed_at, finished_at, "
            "                            http_status, duration_ms) "
            "SELECT 'bench/' || (1 + g %% %(tasks)s), at, 'scheduled', 'succeeded', 1, at, at, 204, 3 "
            "  FROM generate_series(1, %(runs)s) g, "
            "       LATERAL (SELECT %(now)s - interval '31 days'"
            "                       - interval '1 second' * (g::float8 * 7776000 / %(runs)s)) t(at)",
            {"tasks": TASKS, "runs": RUNS, "now": now},
        )
        conn.execute("VACUUM ANALYZE scheduler.runs")
        conn.execute("VACUUM ANALYZE scheduler.tasks")
    return time.perf_counter() - start


async def claims(dsn: str, start: datetime, count: int) -> list[float]:
    """`count` claims of BATCH due tasks, one minute of injected time apart; each one's seconds."""
    async with Store(dsn) as store:
        claimer = Claimer(store, "bench-claim", BATCH)
        times = []
        for step in range(count):
            report = await claimer.claim(start + timedelta(minutes=step))
            assert report.claimed_tasks == BATCH, report
            times.append(report.seconds)
    return times


def latency(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[int(len(ordered) * 0.95)] * 1000, 2),
    }


async def prune(dsn: str, now: datetime) -> dict[str, float]:
    """The engine's partition maintenance over the history: every partition past the cut-off retired."""
    async with Store(dsn) as store:
        engine = Engine(store, EngineConfig("bench-prune", keep_runs_days=KEEP_DAYS))
        async with store.connection() as conn:
            cursor = await conn.execute("SELECT count(*) AS n FROM scheduler.runs")
            before = (await cursor.fetchone() or {"n": 0})["n"]
        start = time.perf_counter()
        done = (await engine.maintain_partitions(now)).maintenance
        elapsed = time.perf_counter() - start
        async with store.connection() as conn:
            cursor = await conn.execute("SELECT count(*) AS n FROM scheduler.runs")
            after = (await cursor.fetchone() or {"n": 0})["n"]
        await engine.firer.close()
    return {"deleted": before - after, "seconds": round(elapsed, 2), "partitions": len(done.dropped)}


def pruner(dsn: str, now: datetime) -> subprocess.Popen[str]:
    """`prune` in a process of its own (its Python does not share the claim's GIL)."""
    command = [sys.executable, "-m", "bench.retention", "--prune", dsn, now.isoformat()]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


class LockSampler(threading.Thread):
    """Every SAMPLE_SECONDS until stopped: whether a statement other than the maintenance's own DDL waits on a
    lock (pg_stat_activity's wait_event_type 'Lock'), as a claim behind a detach would."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.samples, self.waiting, self.waits = dsn, 0, 0, set[str]()
        self.stopped = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopped.wait(SAMPLE_SECONDS):
                rows = conn.execute(
                    "SELECT left(query, 60) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query NOT ILIKE 'ALTER TABLE%%' AND query NOT ILIKE 'DROP TABLE%%' AND pid <> pg_backend_pid()"
                ).fetchall()
                self.samples += 1
                self.waiting += bool(rows)
                self.waits |= {row[0] for row in rows}


def main() -> None:
    logging.getLogger("reconciler").setLevel(logging.ERROR)  # the claims' runs end `lost`: one line each
    if sys.argv[1:2] == ["--prune"]:
        print(json.dumps(asyncio.run(prune(sys.argv[2], datetime.fromisoformat(sys.argv[3])))))
        return
    dsn = bench_database("reconciler_bench_retention")
    load_before = load_average()
    now = datetime.now(UTC).replace(microsecond=0)
    seeded = seed(dsn, now)
    print(f"seeded {RUNS:,} finished runs older than {KEEP_DAYS:g} days in {seeded:.1f} s")
    quiet = asyncio.run(claims(dsn, now, CLAIMS))
    print(f"claims without pruning: {latency(quiet)}")
    sampler = LockSampler(dsn)
    sampler.start()
    proc = pruner(dsn, now + timedelta(minutes=CLAIMS))  # the claims' runs are newer than the cut-off
    started = time.perf_counter()
    busy = asyncio.run(claims(dsn, now + timedelta(minutes=CLAIMS), CLAIMS))
    claims_done = time.perf_counter() - started
    sampler.stopped.set()
    sampler.join()
    out, _ = proc.communicate(timeout=3600)
    pruned = json.loads(out)
    overlap = min(1.0, pruned["seconds"] / claims_done)  # the share of the claims that ran beside the pass
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(left,)] = conn.execute(
            "SELECT count(*) FROM scheduler.runs WHERE finished_at < %s", (now - timedelta(days=KEEP_DAYS),)
        ).fetchall()
    results = {
        "load_average_before": load_before,
        "runs": RUNS,
        "tasks": TASKS,
        "batch": BATCH,
        "claims": CLAIMS,
        "seed_seconds": round(seeded, 1),
        "prune": {**pruned, "rows_per_second": round(pruned["deleted"] / pruned["seconds"]), "left_behind": left},
        "claim_without_pruning": latency(quiet),
        "claim_while_pruning": latency(busy),
        "claims_beside_the_pass": round(overlap, 2),
        "lock_samples": {
            "taken": sampler.samples,
            "a_statement_waiting": sampler.waiting,
            "waiting": sorted(sampler.waits),
        },
        "load_average_after": load_average(),
    }
    results["claim_ratio"] = round(
        results["claim_while_pruning"]["median_ms"] / results["claim_without_pruning"]["median_ms"], 2
    )
    print(
        f"pruned {pruned['deleted']:,} runs in {pruned['seconds']} s: {results['prune']['rows_per_second']:,} rows/s "
        f"({left} older than the cut-off left; the pass beside {overlap:.0%} of the claims; "
        f"{sampler.waiting} of {sampler.samples} pg_stat_activity samples with a statement waiting on a lock); "
        f"claim median {results['claim_without_pruning']['median_ms']} ms "
        f"without pruning, {results['claim_while_pruning']['median_ms']} ms while pruning "
        f"({results['claim_ratio']}x); load average {load_before} → {results['load_average_after']}"
    )
    print(f"wrote {write_results('retention', results)}")


if __name__ == "__main__":
    main()
