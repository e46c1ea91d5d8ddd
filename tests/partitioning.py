"""Test setups of the time-partitioned tables: a history of daily partitions as an engine leading them since
`start` would have made them (the schema's own start makes them from today on)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from reconciler.db import partition_store
from reconciler.db.schema import load_schemata
from reconciler.db.store import Store


async def partitioned_since(store: Store, start: datetime, table: str = "runs") -> list[str]:
    """`table`'s partitions (empty ones, as a new schema has) replaced by one per day from `start`'s to a few days
    past today, and one from MINVALUE below them; their names, oldest first."""
    decl = load_schemata()
    await partition_store.backdated(store, decl, start, datetime.now(UTC) + timedelta(days=1))
    async with store.connection() as conn:
        return [part.name for part in await partition_store.listed(conn, decl, table)]


def scanned_whole(dsn: str, plan: str, scans: str = "Seq Scan") -> list[str]:
    """The partitions of runs a plan reads by `scans` (a regular expression: "Seq Scan|Bitmap Heap Scan") that hold
    a row: a partition the planner scans because it is empty (days ahead, before any statistics) costs nothing."""
    names = set(re.findall(rf"(?:{scans}) on (runs\w*)", plan))
    with psycopg.connect(dsn) as conn:
        return sorted(
            name
            for name in names
            if conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier("scheduler", name))
            ).fetchone()
            == (True,)
        )
