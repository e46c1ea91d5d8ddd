"""Results and history: results kept through a database outage, concurrent flushes, pooled connections
checked, retention pruning.

run_once(now) with injected time against a real PostgreSQL and a real local HTTP server.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.errors import DatabaseUnavailable
from reconciler.targets.http import Firer
from tests.builders import cron
from tests.helpers import async_wait_until, leases
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, runs, setup
from tests.partitioning import partitioned_since


async def test_result_kept_while_database_is_away_and_written_after(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/slow", delay=1.5)
    await setup(store, tmp_path, {"s": cron(f"{url}/slow")})
    async with Store(dsn, timeout=2) as quick:  # a short pool timeout: the outage is noticed in 2 s, not 10
        engine = Engine(quick, EngineConfig("test-engine"), Firer(concurrency=1))
        try:
            await _result_survives_outage(engine, dsn, rec)
        finally:
            await engine.firer.close()
    [run] = runs(dsn)
    assert (run["status"], run["http_status"]) == ("succeeded", 200)
    assert leases(dsn) == 0


async def _result_survives_outage(engine: Engine, dsn: str, rec: Recorder) -> None:
    report = await engine.claim(NOW + timedelta(minutes=5))
    [claimed] = report.runs
    firing = asyncio.create_task(engine.execute(claimed))
    assert await async_wait_until(lambda: rec.in_flight.get("/slow") == 1, 30), "the request never started"
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True, dbname="postgres") as admin:  # the database goes away
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(dbname)))
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )
    try:
        outcome = await firing
        assert outcome.status == "succeeded"
        with pytest.raises(DatabaseUnavailable):
            await engine.results.flush()
        assert len(engine.results.pending) == 1  # kept, not lost
    finally:
        with psycopg.connect(dsn, autocommit=True, dbname="postgres") as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(dbname)))
    await engine.store.recover()  # what the serve loop does after a fault
    assert await engine.results.flush() == 0


async def test_concurrent_flushes_never_drop_a_result(store: Store, dsn: str, engine: Engine) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [
            row[0]
            for row in conn.execute(
                "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status) "
                "SELECT 't', %s + interval '1 minute' * g, 'scheduled', 'running' FROM generate_series(1, 3) g "
                "RETURNING id",
                (NOW,),
            )
        ]

    def result(run_id: int) -> dict[str, object]:
        return {"run_id": run_id, "status": "succeeded", "attempt": 1, "started_at": NOW, "finished_at": NOW,
                "http_status": 204, "error": None, "duration_ms": 1, "excerpt": ""}  # fmt: skip

    # The serve loop and the background writer both flush; results keep arriving meanwhile.
    engine.results.add(result(ids[0]))
    first = asyncio.create_task(engine.results.flush())
    await asyncio.sleep(0)
    engine.results.add(result(ids[1]))
    second = asyncio.create_task(engine.results.flush())
    await asyncio.sleep(0)
    engine.results.add(result(ids[2]))
    await asyncio.gather(first, second)
    await engine.results.flush()
    assert engine.results.pending == []
    assert [r["status"] for r in runs(dsn, "t")] == ["succeeded"] * 3


async def test_a_pooled_connection_is_checked_on_checkout_unless_used_in_the_last_second(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check is a round trip a busy engine waits a loop turn for; a connection used in the
    last second skips it (a server restart within that second fails one statement, which the
    engine backs off from)."""
    monkeypatch.setattr("reconciler.db.store.FRESH_SECONDS", 3600.0)  # "the last second", however loaded the machine
    async with Store(dsn, min_size=1, max_size=1) as store:
        async with store.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))  # returns once it is gone
        with pytest.raises(DatabaseUnavailable):  # just used: not checked, and found dead by its statement
            async with store.connection() as conn:
                await conn.execute("SELECT 1")
        async with store.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))  # returns once it is gone
        monkeypatch.setattr("reconciler.db.store.FRESH_SECONDS", 0.0)  # as if idle for longer than that
        async with store.connection() as conn:  # checked: replaced, and the statement works
            assert conn.info.backend_pid != pid
            await conn.execute("SELECT 1")


async def test_retention_keeps_the_newest_runs_per_task(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await setup(
        store,
        tmp_path,
        {"kept": cron(f"{url}/k", "* * * * *", policy="keep_runs = 3"), "all": cron(f"{url}/a", "* * * * *")},
    )
    firer = Firer(concurrency=5)
    engine = Engine(store, EngineConfig("pruner", keep_runs_days=1, prune_batch=2), firer)
    try:
        for minute in range(1, 7):
            await engine.run_once(NOW + timedelta(minutes=minute))
        deleted = await engine.prune_runs(NOW + timedelta(minutes=7))
    finally:
        await firer.close()
    assert deleted == 3
    kept = [r["scheduled_for"] for r in runs(dsn, "kept")]
    assert kept == [NOW + timedelta(minutes=m) for m in (4, 5, 6)]  # the newest three
    assert len(runs(dsn, "all")) == 6  # by age, runs go by whole days (tests/integration/test_partitions.py)
    assert await engine.prune_runs(NOW + timedelta(minutes=7)) == 0


async def test_serve_prunes_the_history_beside_its_claims(store: Store, dsn: str) -> None:
    await partitioned_since(store, datetime.now(UTC) - timedelta(days=40))
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, finished_at) VALUES "
            "('old', %(old)s, 'scheduled', 'failed', %(old)s), ('new', %(new)s, 'scheduled', 'succeeded', %(new)s)",
            {"old": datetime.now(UTC) - timedelta(days=31), "new": datetime.now(UTC) - timedelta(days=29)},
        )
    engine = Engine(store, EngineConfig("pruning", keep_runs_days=30, max_sleep=0.2))
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop))
    try:
        assert await async_wait_until(lambda: not runs(dsn, "old"), 30)
        assert len(runs(dsn, "new")) == 1  # inside the 30 days
    finally:
        stop.set()
        await serving
