"""Partition upkeep against the database: partitions created ahead, whole partitions retired by age, each step in
a transaction of its own with a short lock_timeout (a lock it cannot take at once is tried at the next pass, never
waited for behind claims). What to create and drop is db/partitions.py's; the conversion of an unpartitioned table
is db/conversion.py's.

Only a role that owns the tables (or is a member of their owner) may do it: the leader engine does when its role
can, `reconciler db init` and `reconciler db maintain` (run as the owner) otherwise.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg
from psycopg import sql

from reconciler.db import partitions, queries, schema
from reconciler.db.partitions import Partition, Partitioning
from reconciler.db.rows import Conn
from reconciler.db.schema import Schemata, Table
from reconciler.db.store import Store

log = logging.getLogger("reconciler.db")

# A maintenance statement waits at most this long for its lock; it is tried again at the next pass.
LOCK_TIMEOUT = "500ms"
# pg_advisory_xact_lock key of partition creation: "partit" in ASCII.
MAINTENANCE_LOCK_KEY = 0x706172746974
# The lease (a scheduler.leader row) a maintenance pass holds, and for how long at most (each of its steps waits
# LOCK_TIMEOUT at most for a lock, so a pass takes seconds).
MUTEX = "partition maintenance"
MUTEX_SECONDS = 300.0


@dataclass
class Maintenance:
    """What one pass did: partitions created and dropped, and those it found busy (kept or locked)."""

    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)


def partitioned(decl: Schemata) -> list[tuple[Table, Partitioning]]:
    return [(t, t.partition) for t in decl.tables if t.partition is not None]


def qualified(decl: Schemata, table: str) -> str:
    return sql.Identifier(decl.schema, table).as_string(None)


async def listed(conn: Conn, decl: Schemata, table: str) -> list[Partition]:
    """The table's partitions (those being detached included)."""
    return await Store.partitions_of(conn, decl, table)


async def may_maintain(conn: Conn, decl: Schemata) -> bool:
    """Whether this role may create and drop the partitions of every partitioned table."""
    for table, _ in partitioned(decl):
        rows = await Store.fetch(conn, "partition_maintainer", {"table": qualified(decl, table.name)})
        if not rows or not rows[0]["allowed"]:
            return False
    return True


async def ensure(store: Store, decl: Schemata, now: datetime, done: Maintenance) -> None:
    """Every partitioned table covered to AHEAD intervals past `now`: one partition per transaction, each under
    the maintenance lock (two passes at once make each partition once) and a short lock_timeout."""
    for table, spec in partitioned(decl):
        async with store.connection() as conn:
            while True:
                bounds: list[partitions.Bound] = []
                try:
                    async with conn.transaction():
                        await _locked(conn)
                        bounds = partitions.missing(table.name, await listed(conn, decl, table.name), spec, now)
                        if not bounds:
                            break
                        for statement in schema.partition_statements(decl.schema, table, bounds[0]):
                            await conn.execute(statement)
                except psycopg.errors.LockNotAvailable:
                    done.busy.append(bounds[0].name if bounds else table.name)
                    break  # the next ones would leave a hole: the next pass makes them in order
                done.created.append(bounds[0].name)


async def retire(store: Store, decl: Schemata, cutoff: datetime, done: Maintenance) -> None:
    """Whole partitions older than `cutoff` detached (CONCURRENTLY) and dropped, oldest first; one holding a run
    still queued or running, or one that finished after `cutoff`, is kept (partitions.retirable decides). A
    detach that does not get its lock at once waits for the next pass (an interrupted one is finished then);
    one another pass detached is that pass's."""
    for table, _ in partitioned(decl):
        async with store.connection() as conn:
            old = partitions.expired(await listed(conn, decl, table.name), cutoff)
            verdicts = {part.name: await _verdict(conn, decl, table, part, cutoff) for part in old}
            done.kept += [name for name, verdict in verdicts.items() if verdict == "keep"]
            for part in partitions.retirable(old, verdicts):
                try:
                    await conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
                    await conn.execute(partitions.detach(decl.schema, table.name, part.name, finalize=part.detaching))
                except (
                    psycopg.errors.LockNotAvailable,
                    psycopg.errors.QueryCanceled,
                    psycopg.errors.ObjectNotInPrerequisiteState,  # another pass is detaching it
                ):
                    done.busy.append(part.name)
                    break
                except psycopg.errors.UndefinedTable:
                    continue  # detached (and dropped) by another pass meanwhile
                finally:
                    await conn.execute("RESET lock_timeout")
                # A backfill may have queued a run in it between the verdict and the detach: put it back then.
                if await _verdict(conn, decl, table, part, cutoff) == "keep":
                    await conn.execute(partitions.attach(decl.schema, table.name, part))
                    done.kept.append(part.name)
                    continue
                await conn.execute(partitions.drop(decl.schema, part.name))
                done.dropped.append(part.name)


async def _verdict(conn: Conn, decl: Schemata, table: Table, part: Partition, cutoff: datetime) -> str:
    """ "keep" a partition holding a row retention must keep (for runs: one queued or running, or finished since
    `cutoff`; for the outbox: a notification pending), else "full" or "empty" (gone: "empty")."""
    keep = KEEP.get(table.name, "false")
    query = sql.SQL(
        "SELECT EXISTS (SELECT 1 FROM ONLY {t} WHERE {keep}) AS kept, EXISTS (SELECT 1 FROM ONLY {t}) AS full"
    ).format(t=sql.Identifier(decl.schema, part.name), keep=sql.SQL(keep))
    try:
        async with conn.transaction():
            cursor = await conn.execute(query, {"cutoff": cutoff})
            row = await cursor.fetchone()
    except psycopg.errors.UndefinedTable:
        return "empty"  # dropped by another pass meanwhile
    assert row is not None
    return "keep" if row["kept"] else "full" if row["full"] else "empty"


async def _locked(conn: Conn) -> None:
    """In a transaction: a short lock_timeout, and the maintenance lock (creations one at a time)."""
    await conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
    await Store.execute(conn, "lock_key", {"key": MAINTENANCE_LOCK_KEY})


# Per partitioned table, the rows that keep their partition from retention (each an index read per partition).
KEEP = {
    "runs": "status IN ('queued', 'running') OR finished_at >= %(cutoff)s",
    "notifications": "status = 'pending'",
}


async def maintain(store: Store, decl: Schemata, now: datetime, cutoff: datetime | None) -> Maintenance:
    """One pass: partitions ahead made, then (in transactions of their own) those past `cutoff` retired. One
    pass at a time in the whole fleet, `db maintain` and `db init` included: a pass holds the lease row
    MUTEX (scheduler.leader, by the database's clock: it works through PgBouncer in transaction mode, where a
    session's advisory lock would not), and one that finds it held does nothing (busy)."""
    done = Maintenance()
    holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    async with store.connection() as conn:
        taken = await queries.leader_take(conn, name=MUTEX, engine_id=holder, seconds=MUTEX_SECONDS)
    if not taken:
        done.busy.append(MUTEX)
        return done
    try:
        await ensure(store, decl, now, done)
        if cutoff is not None:
            await retire(store, decl, cutoff, done)
            await ensure(store, decl, now, done)  # a retired lowest partition leaves MINVALUE uncovered until now
    finally:
        async with store.connection() as conn:
            await Store.execute(conn, "leader_release", {"name": MUTEX, "engine_id": holder})
    if done.created or done.dropped:
        log.info(
            "partitions: created %s, dropped %s",
            ", ".join(done.created) or "none",
            ", ".join(done.dropped) or "none",
            extra={"fields": {"created": done.created, "dropped": done.dropped, "kept": done.kept}},
        )
    return done


async def backdated(store: Store, decl: Schemata, start: datetime, until: datetime) -> None:
    """Partitions as passes since `start` would have made them: one a day from `start` to past `until`, for a
    history loaded from elsewhere (a benchmark's, a test's); the table's partitions must be empty, and are replaced."""
    for table, _ in partitioned(decl):
        async with store.connection() as conn:
            for part in await listed(conn, decl, table.name):
                await conn.execute(partitions.drop(decl.schema, part.name))
    day = start
    while day <= until:
        await ensure(store, decl, day, Maintenance())
        day += timedelta(days=1)
