"""Catch-up after downtime: the claim's time for 100 tasks that were not claimed for an hour, 3 days or
30 days, against the same claim with one occurrence due (no downtime), measured side by side.

For each trigger (cron every minute in Europe/Berlin, interval 1 s) and downtime, on the embedded
PostgreSQL: 100 tasks due since T0 are claimed at T0 + downtime by the engine's own claim
(`Claimer.claim`, time injected), REPEAT times (the rows reset between rounds), alternating with the
no-downtime claim. The claim computes the latest occurrence (SPEC: coalesce fires the latest), so its
time must not grow with the downtime; each round's fired occurrence is checked against a brute-force
forward walk of the schedule from T0. A catch-up claim writes more rows than an on-time one (the
newest 100 occurrences of each task: the latest fires, the others are recorded as coalesced into it),
so the figure to watch is the claim's time across downtimes, not against no downtime.

Results: bench/results/catchup.json.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import statistics
from datetime import UTC, datetime, timedelta

import psycopg

from bench.common import write_results
from bench.reconcile import bench_database
from reconciler.db.store import Store
from reconciler.engine.claim import Claimer
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.task import TaskSpec

TASKS = 100
REPEAT = int(os.environ.get("BENCH_CATCHUP_REPEAT", "7"))
T0 = datetime(2026, 3, 1, tzinfo=UTC)  # 30 days from here cross Europe's spring-forward night
TARGET = {"url": "http://127.0.0.1:9/x"}  # never called: the claim alone is measured
TRIGGERS = {
    "cron * * * * *": {"timezone": "Europe/Berlin", "trigger": {"kind": "cron", "expr": "* * * * *"}},
    "interval 1s": {"timezone": "UTC", "trigger": {"kind": "interval", "every": "1s"}},
}
DOWNTIMES = {
    "none": timedelta(0),
    "1 hour": timedelta(hours=1),
    "3 days": timedelta(days=3),
    "30 days": timedelta(days=30),
}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def brute_latest(spec: dict[str, object], now: datetime) -> datetime:
    """The latest occurrence at or before `now`, by walking every one from T0."""
    schedule = compile_schedule(TaskSpec.model_validate({**spec, "target": TARGET}))
    moment, latest = T0, T0
    while moment <= now:
        latest = moment
        following = schedule.next_fire_time(moment)
        assert following is not None
        moment = following
    return latest


def reset(dsn: str, spec: dict[str, object]) -> None:
    """TASKS tasks of `spec`, all due since T0, and no run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE scheduler.runs, scheduler.run_leases, scheduler.tasks")
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, next_run_at) "
            "SELECT 'bench/' || g, 'bench', %(spec)s::jsonb, md5(g::text), %(t0)s FROM generate_series(1, %(n)s) g",
            {"spec": json.dumps({**spec, "target": TARGET}), "t0": T0, "n": TASKS},
        )


def fired(dsn: str) -> tuple[set[datetime], int]:
    """The occurrences the claim fires, and how many run rows it wrote (those it coalesced included)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT scheduled_for, status FROM scheduler.runs").fetchall()
    return {at for at, status in rows if status == "running"}, len(rows)


async def claim(dsn: str, now: datetime) -> float:
    """One claim of the TASKS due tasks at `now`, by a new engine (nothing compiled ahead); its seconds."""
    async with Store(dsn) as store:
        report = await Claimer(store, "bench-catchup", TASKS).claim(now)
    assert report.claimed_tasks == TASKS and report.fired == TASKS, report
    return report.seconds


def main() -> None:
    logging.getLogger("reconciler").setLevel(logging.ERROR)  # a catch-up logs its coalesced misses
    dsn = bench_database("reconciler_bench_catchup")
    load_before = load_average()
    results: dict[str, dict[str, object]] = {}
    for name, spec in TRIGGERS.items():
        times: dict[str, list[float]] = {label: [] for label in DOWNTIMES}
        moments = {label: T0 + downtime + timedelta(milliseconds=500) for label, downtime in DOWNTIMES.items()}
        latest = {label: brute_latest(spec, now) for label, now in moments.items()}
        correct = dict.fromkeys(DOWNTIMES, True)
        written: dict[str, int] = {}
        for _ in range(REPEAT):
            for label, now in moments.items():  # alternated: the machine's noise falls on each alike
                reset(dsn, spec)
                times[label].append(asyncio.run(claim(dsn, now)))
                occurrences, written[label] = fired(dsn)
                correct[label] = correct[label] and occurrences == {latest[label]}
        base = statistics.median(times["none"])
        rows: dict[str, object] = {}
        for label in DOWNTIMES:
            median = statistics.median(times[label])
            rows[label] = {
                "claim_median_ms": round(median * 1000, 2),
                "ratio_to_no_downtime": round(median / base, 2),
                "fired_the_brute_force_latest": correct[label],
                "run_rows_written": written[label],  # the latest, and up to 99 older ones coalesced per task
            }
            print(
                f"{name:16s} downtime {label:8s}: claim of {TASKS} tasks {median * 1000:7.2f} ms "
                f"({median / base:.2f}x no downtime, {written[label]:,} run rows), "
                f"fired the brute-force latest: {correct[label]}"
            )
        results[name] = rows
    out = {
        "tasks": TASKS,
        "repeat": REPEAT,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "triggers": results,
    }
    print(f"load average {load_before} → {out['load_average_after']}; wrote {write_results('catchup', out)}")


if __name__ == "__main__":
    main()
