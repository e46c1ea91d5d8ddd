"""schemata.toml → database: idempotent, upgrades without dropping."""

from __future__ import annotations

from pathlib import Path

import psycopg

from reconciler.db import schema
from reconciler.db.store import Store


async def test_init_twice_is_a_noop(dsn: str) -> None:
    async with Store(dsn) as store:
        first = await store.init_schema()
        second = await store.init_schema()
    assert first > 5
    assert second == 0
    with psycopg.connect(dsn) as conn:
        tables = {  # not the partitions of runs
            r[0]
            for r in conn.execute(
                "SELECT relname FROM pg_class WHERE relnamespace = 'scheduler'::regnamespace"
                " AND relkind IN ('r', 'p') AND NOT relispartition"
            )
        }
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'scheduler'")}
    declared = {
        "tasks",
        "runs",
        "run_leases",
        "engines",
        "applies",
        "notifiers",
        "calendars",
        "notifications",
        "notify_state",
    }
    assert tables == declared | {"leader", "pauses", "audit", "backfills", "limits", "declared"}
    assert {"tasks_due_idx", "runs_occurrence_uniq"} <= indexes


async def test_new_column_upgrades_without_dropping(dsn: str, tmp_path: Path) -> None:
    async with Store(dsn) as store:
        await store.init_schema()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO scheduler.engines (engine_id, host, pid) VALUES ('e1', 'h', 1)")
    newer = tmp_path / "schemata.toml"
    newer.write_text(
        schema.SCHEMATA.read_text().replace(
            '{ name = "last_seen", type = "timestamptz", null = false, default = "now()" },',
            '{ name = "last_seen", type = "timestamptz", null = false, default = "now()" },\n'
            '  { name = "version", type = "text", default = "\'dev\'" },',
        )
    )
    decl = schema.load_schemata(newer)
    async with Store(dsn) as store, store.connection() as conn:
        todo = schema.statements(decl, await store.compared(conn, decl, await store.existing(conn, "scheduler")))
        assert [s.as_string(conn) for s in todo] == [
            'ALTER TABLE "scheduler"."engines" ADD COLUMN IF NOT EXISTS "version" text DEFAULT \'dev\''
        ]
        for statement in todo:
            await conn.execute(statement)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT engine_id, version FROM scheduler.engines").fetchall() == [("e1", "dev")]


def definitions(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        indexes = conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'scheduler'").fetchall()
        checks = conn.execute(
            "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
            " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'scheduler' AND contype = 'c'"
        ).fetchall()
    return dict(indexes + checks)


async def test_an_older_index_or_check_is_replaced_and_undeclared_ones_are_left(dsn: str) -> None:
    async with Store(dsn) as store:
        await store.init_schema()
    current = definitions(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:  # an older reconciler's definitions, and one of our own
        conn.execute("DROP INDEX scheduler.runs_status_idx")
        conn.execute("CREATE INDEX runs_status_idx ON scheduler.runs (status) WHERE status = 'running'")
        conn.execute("DROP INDEX scheduler.tasks_source_idx")
        conn.execute("CREATE UNIQUE INDEX tasks_source_idx ON scheduler.tasks (source, id)")
        conn.execute(
            "ALTER TABLE scheduler.notifications DROP CONSTRAINT notifications_event_check,"
            " ADD CONSTRAINT notifications_event_check CHECK (event IN ('failure', 'recovery'))"
        )
        conn.execute("CREATE INDEX runs_mine_idx ON scheduler.runs (engine_id)")
        conn.execute("ALTER TABLE scheduler.runs ADD CONSTRAINT runs_mine_check CHECK (attempt < 1000)")
        conn.execute("COMMENT ON SCHEMA scheduler IS 'reconciler schema sha256:older'")  # the older declaration's
    older = definitions(dsn)
    assert older["runs_status_idx"] != current["runs_status_idx"]
    async with Store(dsn) as store:
        assert await store.init_schema() == 5  # two indexes dropped and created, one CHECK replaced
        assert await store.init_schema() == 0
    after = definitions(dsn)
    assert {k: v for k, v in after.items() if k in current} == current
    partitions = ("runs_before_", "runs_p")  # each partition's copy of runs_mine_idx
    assert {name for name in after.keys() - current.keys() if not name.startswith(partitions)} == {
        "runs_mine_idx",
        "runs_mine_check",
    }
    with psycopg.connect(dsn) as conn:  # the replaced CHECK is enforced
        conn.execute(
            "INSERT INTO scheduler.notifications (source, notifier, task_id, event, payload)"
            " VALUES ('s', 'n', 't', 'late', '{}')"
        )


async def test_unreachable_server_is_a_clear_error() -> None:
    import pytest

    from reconciler.errors import DatabaseUnavailable

    with pytest.raises(DatabaseUnavailable) as info:
        async with Store("postgresql://nobody:s3cret-pw@127.0.0.1:1/nowhere?connect_timeout=2"):
            pass
    message = str(info.value)
    assert "cannot connect to PostgreSQL" in message and "port=1" in message
    assert "s3cret-pw" not in message
