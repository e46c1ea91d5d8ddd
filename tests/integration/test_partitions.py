"""The run history partitioned by day (SPEC §13): retention by whole partitions that never drops a run in flight,
partitions made ahead and on any hole, maintenance that waits for no claim, and the conversion of an older
release's unpartitioned runs with every row kept while an engine fires."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reconciler.db import partition_store, partitions, schema
from reconciler.db.initialize import initialize
from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.errors import UserError
from reconciler.targets.http import Firer
from tests.builders import interval_trigger, task_text
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import setup
from tests.partitioning import partitioned_since

PREVIOUS = Path(__file__).parents[1] / "fixtures" / "schemata-before-partitions.toml"
INSERT = (
    "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, finished_at) "
    "VALUES (%s, %s, %s, %s, %s) RETURNING id"
)


def insert(dsn: str, *rows: tuple[Any, ...]) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [conn.execute(INSERT, row).fetchone()[0] for row in rows]  # type: ignore[index]


def task_ids(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return sorted(r[0] for r in conn.execute("SELECT task_id FROM scheduler.runs"))


async def uncovered(store: Store) -> list[partitions.Bound]:
    """What a pass would still create for runs as of now: nothing, when the cover has no hole."""
    decl = schema.load_schemata()
    spec = decl.tables[1].partition
    assert spec is not None and decl.tables[1].name == "runs"
    async with store.connection() as conn:
        parts = await partition_store.listed(conn, decl, "runs")
    return partitions.missing("runs", parts, spec, datetime.now(UTC))


async def test_retention_drops_whole_days_past_the_cutoff_but_never_a_run_in_flight(store: Store, dsn: str) -> None:
    now = datetime.now(UTC)
    await partitioned_since(store, now - timedelta(days=40))
    day = timedelta(days=1)
    insert(
        dsn,
        ("old", now - 35 * day, "scheduled", "succeeded", now - 35 * day),
        ("in-flight", now - 34 * day, "scheduled", "running", None),
        ("queued-backfill", now - 33 * day, "backfill", "queued", None),
        ("finished-lately", now - 32 * day, "backfill", "succeeded", now - day),
        ("recent", now - 10 * day, "scheduled", "failed", now - 10 * day),
    )
    engine = Engine(store, EngineConfig("keeper", keep_runs_days=30))
    done = (await engine.maintain_partitions(now)).maintenance
    assert task_ids(dsn) == ["finished-lately", "in-flight", "queued-backfill", "recent"]
    assert len(done.kept) == 3 and not done.busy, done
    # MINVALUE's and the 10 days past the cut-off but the 3 kept, and the empty one above them (it would be made
    # again to fill the hole: it goes with the kept ones)
    assert len(done.dropped) == 11 - 3 - 1, done
    assert await uncovered(store) == []  # MINVALUE covered again, holes filled
    again = (await engine.maintain_partitions(now)).maintenance
    assert again.dropped == [] and again.created == []


async def test_the_longest_retention_of_the_live_engines_wins(store: Store, dsn: str) -> None:
    now = datetime.now(UTC)
    await partitioned_since(store, now - timedelta(days=40))
    insert(dsn, ("twenty-days", now - timedelta(days=20), "scheduled", "succeeded", now - timedelta(days=20)))
    keeps_forever = Engine(store, EngineConfig("forever"))
    await keeps_forever.heartbeat()
    short = Engine(store, EngineConfig("short", keep_runs_days=7))
    assert (await short.maintain_partitions(now)).maintenance.dropped == []
    assert task_ids(dsn) == ["twenty-days"]
    async with store.connection() as conn:
        await Store.execute(conn, "engine_gone", {"engine_id": "forever"})
    longer = Engine(store, EngineConfig("longer", keep_runs_days=25))
    await longer.heartbeat()
    await short.maintain_partitions(now)
    assert task_ids(dsn) == ["twenty-days"]  # 25 days asked by a live engine
    async with store.connection() as conn:
        await Store.execute(conn, "engine_gone", {"engine_id": "longer"})
    await short.maintain_partitions(now)
    assert task_ids(dsn) == []


async def test_passes_at_once_drop_each_partition_once(store: Store, dsn: str) -> None:
    now = datetime.now(UTC)
    await partitioned_since(store, now - timedelta(days=20))
    insert(
        dsn, *(("old", now - timedelta(days=d), "scheduled", "succeeded", now - timedelta(days=d)) for d in (12, 15))
    )
    engines = [Engine(store, EngineConfig(f"m{i}", keep_runs_days=5)) for i in range(3)]
    passes = await asyncio.gather(*(e.maintain_partitions(now) for e in engines))
    dropped = [name for done in passes for name in done.maintenance.dropped]
    assert len(dropped) == len(set(dropped)) and task_ids(dsn) == []
    for _ in range(3):  # one that found a partition busy (another pass detaching it) finishes at a later pass
        await engines[0].maintain_partitions(now)
    assert await uncovered(store) == []


async def test_a_detach_that_cannot_take_its_lock_leaves_claims_alone_and_finishes_later(
    store: Store, dsn: str
) -> None:
    now = datetime.now(UTC)
    await partitioned_since(store, now - timedelta(days=10))
    insert(dsn, ("old", now - timedelta(days=9), "scheduled", "succeeded", now - timedelta(days=9)))
    with psycopg.connect(dsn) as reader:  # a long read of the history: a transaction that sees the partitions
        reader.execute("SELECT count(*) FROM scheduler.runs").fetchone()
        done = (await Engine(store, EngineConfig("m", keep_runs_days=5)).maintain_partitions(now)).maintenance
        assert done.busy and not done.dropped
        # meanwhile a claim writes today's runs at once: nothing waits behind the detach
        with psycopg.connect(dsn, options="-c lock_timeout=2s") as claim:
            claim.execute(INSERT, ("today", now, "scheduled", "running", None))
        reader.rollback()
    done = (await Engine(store, EngineConfig("m", keep_runs_days=5)).maintain_partitions(now)).maintenance
    assert done.dropped and task_ids(dsn) == ["today"]
    assert await uncovered(store) == []


async def test_a_backfill_of_last_year_and_a_catch_up_after_an_outage_find_their_partition(
    store: Store, dsn: str
) -> None:
    now = datetime.now(UTC)
    ids = insert(
        dsn,
        ("last-year", now - timedelta(days=365), "backfill", "queued", None),
        ("long-ago", datetime(1971, 1, 1, tzinfo=UTC), "backfill", "queued", None),
        ("tomorrow", now + timedelta(days=1), "manual", "queued", None),
    )
    assert len(ids) == 3
    with pytest.raises(psycopg.errors.CheckViolation, match="no partition"):
        insert(dsn, ("far-future", now + timedelta(days=400), "manual", "queued", None))


def old_schema(dsn: str) -> None:
    """The schema as the release before partitioning made it (its schemata.toml, kept as a fixture)."""
    decl = schema.load_schemata(PREVIOUS)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in schema.statements(decl, schema.Existing(False, {}, set())):
            conn.execute(statement)


def history(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT * FROM scheduler.runs WHERE task_id LIKE 'history/%%' ORDER BY id").fetchall()


async def test_db_init_converts_an_unpartitioned_runs_with_every_row_while_an_engine_fires(
    dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    old_schema(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, engine_id, claimed_at, "
            "  started_at, finished_at, http_status, error, duration_ms, response_excerpt, progress, output, trace_id)"
            " SELECT 'history/' || (g % 37), now() - interval '1 minute' * g, "
            "        (ARRAY['scheduled','catchup','manual','retry','backfill'])[1 + g % 5], "
            "        (ARRAY['succeeded','failed','missed','skipped','lost','timed_out'])[1 + g % 6], "
            "        g % 4, 'e' || g, "
            "        now() - interval '1 minute' * g, now() - interval '1 minute' * g, now(), 200 + g % 300, "
            "        CASE WHEN g % 3 = 0 THEN 'erreur — ünïcode ' || g END, g, repeat('x', g % 50), "
            "        jsonb_build_object('done', g), CASE WHEN g % 2 = 0 THEN '{\"deep\": [[1]]}'::jsonb END, "
            "        gen_random_uuid() FROM generate_series(1, 5000) g"
        )
        # The engine firing beside the conversion is this release's: it writes the columns this release adds to
        # other tables (an older engine, which upgrades run beside, does not know them)
        conn.execute("ALTER TABLE scheduler.run_leases ADD COLUMN scheduled_for timestamptz")
        conn.execute("ALTER TABLE scheduler.engines ADD COLUMN keep_runs_days double precision")
        conn.execute("GRANT SELECT ON scheduler.runs TO PUBLIC")
        conn.execute("GRANT UPDATE (status, error) ON scheduler.runs TO PUBLIC")
    kept = history(dsn)
    url, recorder = http
    async with Store(dsn) as store:
        with pytest.raises(UserError, match=r"not partitioned yet .* run `reconciler db init`"):
            await store.init_schema()  # any other command refuses, naming the one that converts
        await setup(store, tmp_path, {"tick": task_text(trigger=interval_trigger("1s"), url=f"{url}/tick")})
        engine = Engine(store, EngineConfig("firing", max_sleep=0.2), Firer(concurrency=10))
        stop = asyncio.Event()
        serving = asyncio.create_task(engine.serve(stop))
        try:
            assert await async_wait_until(lambda: len(recorder.paths()) >= 2, 30)
            lines: list[str] = []
            done = await initialize(store, say=lines.append)
            fired = len(recorder.paths())
            assert await async_wait_until(lambda: len(recorder.paths()) >= fired + 2, 30)  # it fires on
        finally:
            stop.set()
            await serving
            await engine.firer.close()
        [converted] = done.converted
        assert lines and "converting scheduler.runs" in lines[0]
        assert converted.partition.startswith("runs_before_") and converted.rows >= 5000
        assert history(dsn) == kept  # every row, every field
        again = await initialize(store)
        assert again.converted == [] and again.statements == 0
    with psycopg.connect(dsn) as conn:
        relkind = conn.execute("SELECT relkind FROM pg_class WHERE oid = 'scheduler.runs'::regclass").fetchone()
        assert relkind == ("p",)
        ticks = conn.execute(
            "SELECT scheduled_for, count(*) FROM scheduler.runs WHERE task_id = 'tick' GROUP BY 1 HAVING count(*) > 1"
        ).fetchall()
        assert ticks == []  # one run row per occurrence, across the switch
        granted = conn.execute(
            "SELECT has_table_privilege('public', 'scheduler.runs', 'SELECT'), "
            "       has_column_privilege('public', 'scheduler.runs', 'status', 'UPDATE'), "
            "       has_column_privilege('public', 'scheduler.runs', 'kind', 'UPDATE')"
        ).fetchone()
        assert granted == (True, True, False)
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status) VALUES ('n', now(), 'manual', 'queued')"
        )
        top = conn.execute("SELECT max(id) FROM scheduler.runs").fetchone()
        assert top is not None and top[0] > max(row[0] for row in kept)  # ids go on, never reused
    assert len(recorder.paths()) == len({r.headers.get("Idempotency-Key") for r in recorder.paths()})
