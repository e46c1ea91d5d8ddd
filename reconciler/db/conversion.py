"""An unpartitioned table of an older release (runs) made partitioned, without losing a row and with engines firing.

The table becomes the new table's lowest partition, bounded by MINVALUE and the end of today (UTC): every row it
holds, or gets before the switch, is older (a claim writes an occurrence that is due). Slow work happens first,
while engines write: the unique index the new primary key needs (CREATE INDEX CONCURRENTLY) and the CHECK that
proves the bound (added NOT VALID, then VALIDATEd under SHARE UPDATE EXCLUSIVE, which writes do not wait for).
Then one short transaction under an ACCESS EXCLUSIVE lock of the table: rename it, make the partitioned table in
its place (its identity continuing the old one's), attach the old table as a partition (no scan: the CHECK proves
the bound), attach its indexes to the new ones (same definitions: no build), copy its grants, and create the
partitions from tomorrow on. Engines' statements wait for that transaction only (measured in the docs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from reconciler.db import partitions, schema
from reconciler.db.partitions import Bound, Partition
from reconciler.db.rows import Conn
from reconciler.db.schema import Schemata, Table
from reconciler.db.store import Store
from reconciler.errors import UserError

SWITCH_LOCK_TIMEOUT = "5s"  # the switch's wait for the table's lock (behind long transactions), per try
SWITCH_TRIES = 5


@dataclass(frozen=True)
class Converted:
    """What a conversion did: the table, its old rows' partition, the rows it held (as counted in the switch),
    the whole time and the time the table was locked."""

    table: str
    partition: str
    rows: int
    seconds: float
    locked_seconds: float


async def convert(store: Store, decl: Schemata, table: Table, now: datetime) -> Converted:
    """`table`, unpartitioned, made partitioned (see the module's docstring)."""
    assert table.partition is not None
    started = time.monotonic()
    spec = table.partition
    old = sql.Identifier(decl.schema, table.name)
    bound = Bound(table.name, None, spec.floor(now) + spec.interval)
    key = sql.Identifier(decl.schema, f"{bound.name}_pkey")
    check = sql.Identifier(f"{table.name}_partition_bound")
    async with store.connection() as conn:  # autocommit: CONCURRENTLY runs outside a transaction block
        if await _fetch_one(
            conn, "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", key.as_string(None)
        ):
            await conn.execute(sql.SQL("DROP INDEX CONCURRENTLY {}").format(key))  # an interrupted build's
        await conn.execute(
            sql.SQL("CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {} ON {} ({})").format(
                sql.Identifier(f"{bound.name}_pkey"), old, sql.SQL(", ").join(map(sql.Identifier, table.primary_key))
            )
        )
        await conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}").format(old, check))
        await conn.execute(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK ({} < {}) NOT VALID").format(
                old, check, sql.Identifier(spec.column), sql.Literal(bound.upper)
            )
        )
        try:
            await conn.execute(sql.SQL("ALTER TABLE {} VALIDATE CONSTRAINT {}").format(old, check))
        except psycopg.errors.CheckViolation:
            raise UserError(
                f"{decl.schema}.{table.name} holds rows with {spec.column} after {bound.upper:%Y-%m-%d %H:%M} UTC "
                "(the database's clock behind them?); it was left unpartitioned: check the clock and run "
                "`reconciler db init` again"
            ) from None
        for attempt in range(SWITCH_TRIES):
            try:
                locked = time.monotonic()
                async with conn.transaction():
                    rows = await _switch(conn, decl, table, bound, now)
                return Converted(table.name, bound.name, rows, time.monotonic() - started, time.monotonic() - locked)
            except psycopg.errors.LockNotAvailable:
                if attempt == SWITCH_TRIES - 1:
                    raise UserError(
                        f"{decl.schema}.{table.name} stayed locked by other transactions for {SWITCH_TRIES} tries of "
                        f"{SWITCH_LOCK_TIMEOUT}: end the long ones (pg_stat_activity) and run `reconciler db init` "
                        "again; nothing was changed but an index and a CHECK it keeps"
                    ) from None
    raise AssertionError("unreachable")


async def _switch(conn: Conn, decl: Schemata, table: Table, bound: Bound, now: datetime) -> int:
    """The locked part: the new table in the old one's place, the old one its lowest partition."""
    assert table.partition is not None
    old = sql.Identifier(decl.schema, table.name)
    part = sql.Identifier(decl.schema, bound.name)
    await conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(SWITCH_LOCK_TIMEOUT)))
    await conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(old))
    qualified = old.as_string(None)
    rows = int(await _fetch_one(conn, sql.SQL("SELECT count(*) FROM {}").format(old)) or 0)
    starts = [
        await _fetch_one(conn, "SELECT nextval(pg_get_serial_sequence(%s, %s))", qualified, column)
        for column in schema.identity_columns(table)
    ]
    indexes = await Store.fetch(conn, "catalog_table_indexes", {"table": qualified})
    grants = await Store.fetch(conn, "catalog_grants", {"table": qualified})
    await conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(old, sql.Identifier(bound.name)))
    mine = f"{bound.name}_pkey"
    for row in indexes:  # named as a partition's are (its declared ones attach to the new table's)
        if row["name"] != mine and not row["constraint"]:
            renamed = sql.Identifier(partitions.index_name(table.name, bound.name, row["name"]))
            await conn.execute(
                sql.SQL("ALTER INDEX {} RENAME TO {}").format(sql.Identifier(decl.schema, row["name"]), renamed)
            )
    for row in indexes:
        if row["constraint"]:  # the old primary key, replaced by the one the partitioned table needs
            await conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(part, sql.Identifier(row["name"])))
    await conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY USING INDEX {}").format(
            part, sql.Identifier(mine), sql.Identifier(mine)
        )
    )
    for column in schema.identity_columns(table):
        await conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP IDENTITY").format(part, sql.Identifier(column)))
    await conn.execute(schema.create_table(old, table, int(starts[0]) if starts else None))
    await conn.execute(partitions.attach(decl.schema, table.name, Partition(bound.name, None, bound.upper)))
    for index in table.indexes:
        await conn.execute(schema.create_index(old, index))
    for row in grants:
        await conn.execute(_grant(old, row))
    await Store.create_partitions(conn, decl, table, now)
    return rows


def _grant(table: sql.Identifier, row: dict[str, object]) -> sql.Composed:
    """One privilege the old table had, given on the new one (a column's, when `column` is set)."""
    grantee = sql.SQL("PUBLIC") if row["grantee"] is None else sql.Identifier(str(row["grantee"]))
    columns = sql.SQL("") if row["column"] is None else sql.SQL(" ({})").format(sql.Identifier(str(row["column"])))
    return sql.SQL("GRANT {}{} ON {} TO {}").format(sql.SQL(str(row["privilege"])), columns, table, grantee)


async def _fetch_one(conn: Conn, query: str | sql.Composed, *params: object) -> Any:
    cursor = await conn.execute(query, params or None)
    row = await cursor.fetchone()
    return None if row is None else next(iter(row.values()))
