"""The rows of a declared kind stored whole (notifiers, calendars, limits, and any kind without a table of its own in
scheduler.declared): a row per source and name with its normalized spec, its hash and the kind's own columns.

One set of statements serves every such kind: composed here from the kind's table (and, in the shared table, its
name) with psycopg.sql.Identifier, so a new kind needs no SQL of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

from psycopg import sql

from reconciler.db.errors import named
from reconciler.db.rows import Conn
from reconciler.db.store import Store

SCHEMA = "scheduler"
SHARED = "declared"  # the table of kinds without one of their own: one more key column, `kind`


class StoredItemRow(TypedDict):
    source: str
    name: str
    spec: Any  # the stored spec (JSON)
    spec_hash: str


def _table(table: str) -> sql.Identifier:
    return sql.Identifier(SCHEMA, table)


def _of_kind(table: str, kind: str) -> tuple[sql.Composable, dict[str, Any]]:
    """The extra condition (and its parameter) that picks one kind's rows out of the shared table."""
    if table != SHARED:
        return sql.SQL(""), {}
    return sql.SQL(" AND kind = %(kind)s"), {"kind": kind}


async def _run(conn: Conn, statement: sql.Composed, params: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    with named(conn, name):
        cursor = await conn.execute(statement, params)
        return await cursor.fetchall() if cursor.description else []


async def stored_items(conn: Conn, *, table: str, kind: str) -> list[StoredItemRow]:
    """Every stored item of the kind (every source's), by source and name."""
    where, params = _of_kind(table, kind)
    statement = sql.SQL("SELECT source, name, spec, spec_hash FROM {} WHERE true{} ORDER BY source, name").format(
        _table(table), where
    )
    return cast(list[StoredItemRow], await _run(conn, statement, params, f"{table}: read"))


async def item_upsert(
    conn: Conn,
    *,
    table: str,
    kind: str,
    source: str,
    name: str,
    spec: str,
    spec_hash: str,
    columns: Mapping[str, Any],
    created: Mapping[str, Any],
    then: str | None = None,
) -> None:
    """Create or change one item: its spec, its hash and `columns` (the kind's own) always; `created` only when the
    row is new (a changed row keeps what it holds there); then run the named statement `then` (queries.sql) with
    (source, name), when given."""
    values: dict[str, Any] = {"source": source, "name": name, "spec": spec, "spec_hash": spec_hash}
    if table == SHARED:
        values["kind"] = kind
    keys = ["kind", "source", "name"] if table == SHARED else ["source", "name"]
    written = {**values, **columns, **created}
    changed = ["spec", "spec_hash", *columns]
    casts = {"spec": "::jsonb"}
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}, updated_at = now()").format(
        _table(table),
        sql.SQL(", ").join(sql.Identifier(column) for column in written),
        sql.SQL(", ").join(
            sql.SQL("%({})s{}").format(sql.SQL(column), sql.SQL(casts.get(column, ""))) for column in written
        ),
        sql.SQL(", ").join(sql.Identifier(key) for key in keys),
        sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(column)) for column in changed),
    )
    await _run(conn, statement, written, f"{table}: write")
    if then is not None:
        await Store.execute(conn, then, {"source": source, "name": name})


async def item_delete(conn: Conn, *, table: str, kind: str, source: str, name: str, then: str | None = None) -> None:
    """Delete one item; then run the named statement `then` (queries.sql) with (source, name), when given."""
    where, params = _of_kind(table, kind)
    statement = sql.SQL("DELETE FROM {} WHERE source = %(source)s AND name = %(name)s{}").format(_table(table), where)
    await _run(conn, statement, {"source": source, "name": name, **params}, f"{table}: delete")
    if then is not None:
        await Store.execute(conn, then, {"source": source, "name": name})
