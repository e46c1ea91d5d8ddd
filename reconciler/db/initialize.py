"""`reconciler db init` and `db maintain`: the schema created or upgraded, an unpartitioned table of an older
release converted (db/conversion.py), and the partitions made ahead (and, for `maintain`, retired by age)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.db import conversion, partition_store, schema
from reconciler.db.conversion import Converted
from reconciler.db.partition_store import Maintenance
from reconciler.db.store import Store


@dataclass
class Initialized:
    statements: int = 0
    converted: list[Converted] = field(default_factory=list)
    maintenance: Maintenance = field(default_factory=Maintenance)
    maintained: bool = True  # False: this role may not make partitions (their owner's `db init` does)


async def database_now(store: Store) -> datetime:
    async with store.connection() as conn:
        cursor = await conn.execute("SELECT now() AS now")
        row = await cursor.fetchone()
    assert row is not None
    value: datetime = row["now"]
    return value


async def initialize(store: Store, say: Callable[[str], None] = lambda line: None) -> Initialized:
    """The schema up to date, converted where it must be, with partitions ahead; `say` hears each step first."""
    decl = schema.load_schemata()
    done = Initialized()
    now = await database_now(store)
    async with store.connection() as conn:
        have = await store.existing(conn, decl.schema)
    for table in schema.unconverted(decl, have):
        say(
            f"converting {decl.schema}.{table.name} to partitions by {table.partition and table.partition.column}: "
            "its rows become the partition of everything before tomorrow (an index built concurrently, a CHECK "
            "validated while engines write, then a switch of a moment under the table's lock)"
        )
        done.converted.append(await conversion.convert(store, decl, table, now))
    done.statements = await store.init_schema()
    await maintain(store, now, None, done)
    return done


async def maintain(store: Store, now: datetime, keep_days: float | None, done: Initialized) -> None:
    """Partitions made ahead of `now`, and those older than `keep_days` retired, when this role may."""
    decl = schema.load_schemata()
    async with store.connection() as conn:
        done.maintained = await partition_store.may_maintain(conn, decl)
    if done.maintained:
        cutoff = None if keep_days is None else now - timedelta(days=keep_days)
        done.maintenance = await partition_store.maintain(store, decl, now, cutoff)
