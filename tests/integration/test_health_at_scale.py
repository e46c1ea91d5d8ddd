"""The read queries of the metrics and the read commands stay index walks however large `runs` grows.

The trap they avoid: with `task_id = X ORDER BY id DESC LIMIT 1` and a few tasks owning most runs,
the planner walks runs_pkey backwards (it expects a hit within a few rows), and a task without a
recent run then reads the whole table.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from reconciler.db.store import QUERIES, Store
from tests.partitioning import scanned_whole

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
TASKS = 2_000
BUSY = 20  # the tasks that own every run
RUNS = 20_000
SPEC = '{"trigger": {"kind": "interval", "every": "1h"}, "target": {"url": "http://127.0.0.1:9/x"}}'
LATE_SPEC = SPEC[:-1] + ', "notify": {"late": ["oncall"]}}'


def fill(dsn: str) -> None:
    """TASKS tasks (a tenth with `late` subscribers); RUNS runs, all of BUSY tasks, half of which
    have failed since their first thousand runs: the others never ran (the planner's trap)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, next_run_at) "
            "SELECT 't' || g, 'scale', CASE WHEN g %% 10 = 0 THEN %(late)s ELSE %(spec)s END::jsonb, md5(g::text), "
            "       %(now)s + interval '1 second' * (g %% 600 - 300) "
            "  FROM generate_series(1, %(tasks)s) g",
            {"spec": SPEC, "late": LATE_SPEC, "now": NOW, "tasks": TASKS},
        )
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, claimed_at, finished_at) "
            "SELECT 't' || (n %% %(busy)s + 1), "
            "       %(now)s - interval '1 minute' * (%(runs)s - n), 'scheduled', "
            "       CASE WHEN n > 1000 AND n %% %(busy)s %% 2 = 1 THEN 'failed' ELSE 'succeeded' END, "
            "       %(now)s - interval '1 minute' * (%(runs)s - n), %(now)s - interval '1 minute' * (%(runs)s - n) "
            "  FROM generate_series(1, %(runs)s) n",
            {"busy": BUSY, "runs": RUNS, "now": NOW},
        )
        conn.execute("ANALYZE scheduler.tasks, scheduler.runs")


def plan(dsn: str, query: str, params: dict[str, Any]) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return "\n".join(str(row[0]) for row in conn.execute("EXPLAIN " + QUERIES[query], params))


READS = {
    "task_health": {"now": NOW, "sources": [], "limit": 10_000},
    "status_rows": {},
    "runs_list": {"task_id": f"t{TASKS}", "status": None, "limit": 20},  # a task that never ran
    "runs_between": {"task_id": "t2", "lo": NOW - timedelta(hours=1), "hi": NOW},
    "tasks_late": {"now": NOW, "floor": 60.0},
    "backfill_runs": {"task_id": "t2", "lo": NOW - timedelta(hours=1), "hi": NOW},
}


@pytest.mark.parametrize("query", sorted(READS))
async def test_read_queries_walk_indexes_not_the_runs_table(store: Store, dsn: str, query: str) -> None:
    fill(dsn)
    found = plan(dsn, query, READS[query])
    assert scanned_whole(dsn, found) == [], found
    assert not re.search(r"using runs\w*_pkey", found), found
    assert "Seq Scan on tasks" not in found or query in ("task_health", "status_rows"), found  # those list every task


async def test_runs_of_one_status_read_that_status_index(store: Store, dsn: str) -> None:
    fill(dsn)
    found = plan(dsn, "runs_list", {"task_id": "t2", "status": "failed", "limit": 20})
    assert "_task_unsuccessful_idx" in found, found


async def test_health_tells_failing_from_the_newer_of_last_success_and_last_failure(store: Store, dsn: str) -> None:
    """failing: whether the newest run that succeeded, failed, was lost or missed failed or was lost;
    skipped, queued and running runs do not count; NULL when there is none."""
    histories = {
        "never": [],
        "ok": ["failed", "succeeded", "skipped"],
        "bad": ["succeeded", "failed", "skipped", "running"],
        "lost": ["succeeded", "lost"],
        "missed": ["failed", "missed"],
        "skips": ["skipped", "queued"],
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        for task, statuses in histories.items():
            conn.execute(
                "INSERT INTO scheduler.tasks (id, source, spec, spec_hash) VALUES (%s, 'scale', %s::jsonb, 'h')",
                (task, SPEC),
            )
            for minute, status in enumerate(statuses):
                at = NOW + timedelta(minutes=minute)
                conn.execute(
                    "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, finished_at) "
                    "VALUES (%s, %s, 'scheduled', %s, %s)",
                    (task, at, status, at),
                )
    async with store.connection() as conn:
        rows = await Store.fetch(conn, "task_health", READS["task_health"])
    got = {row["id"]: (row["failing"], row["last_success"]) for row in rows}
    assert got == {
        "never": (None, None),
        "ok": (False, NOW + timedelta(minutes=1)),
        "bad": (True, NOW),
        "lost": (True, NOW),
        "missed": (False, None),
        "skips": (None, None),
    }


async def test_a_backfill_reads_the_runs_of_its_range_not_the_task_s_history(store: Store, dsn: str) -> None:
    fill(dsn)
    found = plan(dsn, "backfill_runs", READS["backfill_runs"])
    assert "_occurrence_uniq" in found and "_backfill_idx" in found, found


QUEUED = 3_000


@pytest.mark.parametrize("analyzed", [False, True], ids=["stale-statistics", "analyzed"])
@pytest.mark.parametrize("query", ["claim_queued", "nearest_due"])
async def test_a_large_backfill_costs_each_claim_one_reading_of_the_queued_runs(
    store: Store, dsn: str, query: str, analyzed: bool
) -> None:
    """A backfill queues thousands of runs in one transaction, before ANALYZE knows of them. Planned as one
    join on statistics that say nothing is queued, the claim numbered the queued runs again for each queued
    run (9,360 of them: 7 s); on fresh statistics the wake check scanned all of `runs` for queued rows at its
    end. No plan node may run more often than there are queued runs, and `runs` is read through indexes."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, next_run_at) "
            "SELECT 't' || g, 'scale', %(spec)s::jsonb, md5(g::text), %(now)s + interval '1 hour' "
            "  FROM generate_series(1, 2) g",
            {"spec": SPEC, "now": NOW},
        )
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status) SELECT 't1', "
            "       %(now)s - interval '1 minute' * n, 'scheduled', 'succeeded' FROM generate_series(1, %(runs)s) n",
            {"now": NOW, "runs": RUNS},
        )
        conn.execute("ANALYZE scheduler.tasks, scheduler.runs")  # no run queued
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, hold_seconds) SELECT 't2', "
            "       %(now)s - interval '1 minute' * n, 'backfill', 'queued', 5 FROM generate_series(1, %(queued)s) n",
            {"now": NOW, "queued": QUEUED},
        )
        if analyzed:
            conn.execute("ANALYZE scheduler.runs")
        found = "\n".join(
            str(row[0])
            for row in conn.execute("EXPLAIN ANALYZE " + QUERIES[query], {"now": NOW, "sources": [], "batch": 100})
        )
    loops = [int(n) for n in re.findall(r"loops=(\d+)", found)]
    assert loops and max(loops) <= QUEUED, found
    assert scanned_whole(dsn, found) == [], found
