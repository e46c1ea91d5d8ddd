"""Every statement of queries.sql that reads or writes the run history keeps an index path into each partition of a
history of 30 days (SPEC §13): planned generically (as a prepared statement is, whatever its parameters), with
sequential scans priced out, none reads a partition of runs whole; the statements that name the occurrence's time
read one partition."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from reconciler.db.sqlfile import QUERIES
from reconciler.db.store import Store
from tests.partitioning import partitioned_since

RUN_QUERIES = sorted(name for name, text in QUERIES.items() if "scheduler.runs" in text)


def generic(query: str) -> str:
    """The query with its named parameters as $1, $2… (each name one number), for EXPLAIN (GENERIC_PLAN)."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)[sb]", number, query).replace("%%", "%")


@pytest.fixture
async def month(store: Store, dsn: str) -> str:
    """A history of 30 days of daily partitions (35 with those ahead and the one from MINVALUE), a run in each."""
    now = datetime.now(UTC)
    names = await partitioned_since(store, now - timedelta(days=30))
    assert len(names) >= 35
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, finished_at) "
            "SELECT 't' || g, %(now)s - interval '1 day' * g, 'scheduled', 'succeeded', %(now)s - interval '1 day' * g "
            "  FROM generate_series(0, 30) g",
            {"now": now},
        )
        version = conn.execute("SHOW server_version_num").fetchone()
    assert version is not None
    if int(version[0]) < 160000:
        pytest.skip("EXPLAIN (GENERIC_PLAN) needs PostgreSQL 16 (the embedded server runs this test)")
    return dsn


def explain(dsn: str, query: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        return "\n".join(str(row[0]) for row in conn.execute("EXPLAIN (GENERIC_PLAN) " + generic(QUERIES[query])))


def test_the_run_history_statements_are_all_found() -> None:
    assert len(RUN_QUERIES) >= 35
    for hot in ("runs_insert", "runs_finish_many", "runs_mark_lost", "claim_queued", "run_get", "task_health"):
        assert hot in RUN_QUERIES


async def test_no_statement_reads_a_partition_of_the_history_whole(month: str) -> None:
    offenders = {}
    for query in RUN_QUERIES:
        plan = explain(month, query)
        whole = re.findall(r"Seq Scan on (runs\w*)", plan)
        # it did plan the partitions (an INSERT alone routes its rows when it runs)
        planned = "runs_p" in plan or "runs_before" in plan or "Insert on runs" in plan
        if whole or not planned:
            offenders[query] = plan
    assert offenders == {}, "\n\n".join(f"{name}:\n{plan}" for name, plan in offenders.items())


async def test_a_statement_naming_the_occurrence_reads_its_partition_alone(month: str) -> None:
    with psycopg.connect(month, autocommit=True) as conn:
        plan = "\n".join(
            str(row[0])
            for row in conn.execute(
                "EXPLAIN SELECT * FROM scheduler.runs WHERE task_id = 't3' AND scheduled_for = %s",
                (datetime.now(UTC) - timedelta(days=3),),
            )
        )
    assert len(re.findall(r"on runs_\w+", plan)) == 1, plan
