"""schemata.toml → database: idempotent, upgrades without dropping."""

from __future__ import annotations

from pathlib import Path

import psycopg

from reconciler import schema
from reconciler.store import Store


async def test_init_twice_is_a_noop(dsn: str) -> None:
    async with Store(dsn) as store:
        first = await store.init_schema()
        second = await store.init_schema()
    assert first > 5
    assert second == 0
    with psycopg.connect(dsn) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'scheduler'")}
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'scheduler'")}
    declared = {"tasks", "runs", "run_leases", "engines", "applies", "notifiers", "notifications", "notify_state"}
    assert tables == declared | {"leader"}
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
        todo = schema.statements(decl, await store.existing(conn, "scheduler"))
        assert [s.as_string(conn) for s in todo] == [
            'ALTER TABLE "scheduler"."engines" ADD COLUMN IF NOT EXISTS "version" text DEFAULT \'dev\''
        ]
        for statement in todo:
            await conn.execute(statement)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT engine_id, version FROM scheduler.engines").fetchall() == [("e1", "dev")]


async def test_unreachable_server_is_a_clear_error() -> None:
    import pytest

    from reconciler.errors import DatabaseUnavailable

    with pytest.raises(DatabaseUnavailable) as info:
        async with Store("postgresql://nobody:s3cret-pw@127.0.0.1:1/nowhere?connect_timeout=2"):
            pass
    message = str(info.value)
    assert "cannot connect to PostgreSQL" in message and "port=1" in message
    assert "s3cret-pw" not in message
