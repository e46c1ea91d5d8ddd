"""The store: the connection pool of one database (following a failover), its transactions, and the generic
ways to send named statements (db/queries.sql, read by db/sqlfile.py). The typed query modules of db/ call
these; nothing outside db/ imports psycopg.

Every error leaves through one boundary (`Store.connection`), translated by db/errors.py: the database not
there is DatabaseUnavailable, a cancelled statement StatementCancelled, a missing privilege PermissionDenied,
no schema yet SchemaMissing, any other refusal DatabaseRefused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.rows import dict_row
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout, TooManyRequests

from reconciler.db import partitions, schema
from reconciler.db.embedded import DsnOrigin
from reconciler.db.errors import READ_LIMITS, busy, cancelled, denied, named, refused, unavailable
from reconciler.db.failover import FailoverPool, reports_read_only, writable_dsn, wrong_server
from reconciler.db.listening import Listening
from reconciler.db.rows import Conn, Row, TaskRow
from reconciler.db.sqlfile import QUERIES
from reconciler.errors import DatabaseUnavailable, PermissionDenied, UserError

# pg_advisory_xact_lock key shared by every apply (and schema upgrade): "reconc" in ASCII.
APPLY_LOCK_KEY = 0x7265636F6E63
NOTIFY_CHANNEL = "scheduler_tasks"
# A pooled connection that completed a statement this recently is not checked on checkout (see _check).
FRESH_SECONDS = 1.0
# A read command's bounds (see Store.reading), where the server, the role and the connection set none.
READ_LOCK_SECONDS = 5.0
READ_STATEMENT_SECONDS = 30.0


# Every timestamptz the database returns comes back in UTC, whatever the session's TimeZone (a
# server initialized on a host in Europe/Berlin answers in Berlin time): the engine does arithmetic
# on the database's `now()` and `next_run_at`, and Python's arithmetic on two datetimes of one zone,
# or a timedelta added to one, is wall-clock arithmetic, an hour off across a DST night.
class _UtcTimestamptzLoader(TimestamptzLoader):
    def load(self, data: Any) -> datetime:
        return super().load(data).astimezone(UTC)


class _UtcTimestamptzBinaryLoader(TimestamptzBinaryLoader):
    def load(self, data: Any) -> datetime:
        return super().load(data).astimezone(UTC)


psycopg.adapters.register_loader("timestamptz", _UtcTimestamptzLoader)
psycopg.adapters.register_loader("timestamptz", _UtcTimestamptzBinaryLoader)


class Store:
    """A connection pool plus the named queries."""

    def __init__(
        self,
        dsn: str,
        *,
        origin: DsnOrigin | None = None,
        min_size: int = 1,
        max_size: int = 4,
        timeout: float = 10.0,
        max_waiting: int = 0,
        prepare_threshold: int | None = None,
    ) -> None:
        self.dsn = writable_dsn(dsn)  # a multi-host DSN reaches its primary (see db/failover.py)
        self.origin = origin or DsnOrigin()  # named by the errors of a database that does not answer
        # No server-side prepared statements unless asked for (--prepare-threshold): behind a pooler in
        # transaction mode (PgBouncer) a statement psycopg prepared on one server connection is looked
        # up on another, where it is missing or is another client's statement of the same name.
        self.connect_kwargs: dict[str, Any] = {"prepare_threshold": prepare_threshold}
        self.pool: AsyncConnectionPool[Conn] = FailoverPool(
            self.dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,  # the longest a caller waits for a connection
            max_waiting=max_waiting,  # callers that may wait at once (0: any number); more are PoolBusy at once
            check=self._check,
            configure=self._configure,
            open=False,
            kwargs={"row_factory": dict_row, "autocommit": True, **self.connect_kwargs},
            connection_class=AsyncConnection[Row],
        )
        self._used: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        self._born: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        self._drained_at = -1.0  # when the pool was last emptied because its server could not take writes
        self._answered_at = -float("inf")  # when a pooled connection last completed its work (see `connection`)
        self._in_use = 0  # pooled connections callers hold now

    async def _configure(self, conn: Conn) -> None:
        """Note when each pooled connection was made (see `_wrong_server`)."""
        self._born[conn] = time.monotonic()

    async def _check(self, conn: Conn) -> None:
        """The pool's check on checkout: after a server restart, a dead pooled connection is replaced
        instead of failing the statement that drew it, and a connection whose server says it is read-only
        now (a demoted primary) is dropped with every other one (see `_wrong_server`). A connection whose
        last use ended well within FRESH_SECONDS is not pinged: the ping is a round trip, and on a busy
        engine every claim and every result batch waited a loop turn for it. (A restart within that
        second fails one claim, which the engine backs off from and `recover`s.)"""
        if time.monotonic() - self._used.get(conn, -FRESH_SECONDS) >= FRESH_SECONDS:
            await AsyncConnectionPool.check_connection(conn)
        if reports_read_only(conn):
            await self._wrong_server(conn)
            raise psycopg.OperationalError("the server is read-only now (a failover?)")

    async def _wrong_server(self, conn: Conn) -> None:
        """`conn` reached a server that cannot take writes: close it (the pool discards a closed
        connection) and every other connection made before it (`drain`: they reached the same server),
        once per such event; the pool's new connections go to the writable host."""
        with contextlib.suppress(Exception):
            await conn.close()
        if self._born.get(conn, 0.0) > self._drained_at:
            self._drained_at = time.monotonic()
            await self.pool.drain()

    async def connect(self, dsn: str | None = None, **kwargs: Any) -> AsyncConnection[Any]:
        """A connection of its own (not pooled) to `dsn` (default: the store's), as the pool's are made:
        the listener's, the health probe's."""
        return await psycopg.AsyncConnection.connect(dsn or self.dsn, **{**self.connect_kwargs, **kwargs})

    async def open(self) -> None:
        """Check the server answers (with its own error message), then open the pool."""
        try:
            probe = await self.connect(connect_timeout=10)
            await probe.close()
            await self.pool.open(wait=True, timeout=15)
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
            raise unavailable(self.dsn, exc, self.origin) from None
        except Exception as exc:  # PoolTimeout and friends
            if exc.__class__.__module__.startswith("psycopg"):
                raise unavailable(self.dsn, exc, self.origin) from None
            raise

    async def close(self) -> None:
        await self.pool.close()

    def unavailable(self, exc: BaseException) -> BaseException:
        """A database fault as one line naming this database and where its DSN came from (a
        DatabaseUnavailable says so already; a connection lost mid-statement, e.g. the listener's, does not)."""
        return exc if isinstance(exc, DatabaseUnavailable) else unavailable(self.dsn, exc, self.origin)

    async def recover(self) -> None:
        """After a fault, replace every broken idle connection at once.

        After a server restart all idle connections are dead; the check on checkout would
        find them one by one, backing off 1, 2, 4 … s between them, and a claim would wait
        out the whole pool timeout although the server is back.
        """
        with contextlib.suppress(Exception):
            await self.pool.check()

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled connection in autocommit mode; connection failures become DatabaseUnavailable."""
        try:
            async with self.pool.connection() as conn:
                self._in_use += 1
                try:
                    yield conn
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise denied(exc, conn.info.user) from None
                except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:  # not named
                    raise cancelled(exc, conn, None) from None
                except psycopg.Error as exc:
                    if wrong_server(exc):  # a read-only or stopping server: the statement's caller retries
                        await self._wrong_server(conn)
                        raise unavailable(self.dsn, exc, self.origin) from None
                    if isinstance(exc, psycopg.OperationalError):  # named below, with the database's DSN
                        raise
                    raise refused(exc) from exc
                finally:
                    self._in_use -= 1
                self._used[conn] = self._answered_at = time.monotonic()
        except (psycopg.OperationalError, PoolTimeout) as exc:
            # No connection for this caller: the pool's were busy if other callers held them, or the database
            # answered one of them while it waited (or the queue was full); else the database is what is missing.
            waiting = self.pool.get_stats().get("requests_waiting", 0)
            if isinstance(exc, TooManyRequests):
                raise busy(self.pool.max_size, waiting, None) from None
            answered = time.monotonic() - self._answered_at <= self.pool.timeout
            if isinstance(exc, PoolTimeout) and (self._in_use > 0 or answered):
                raise busy(self.pool.max_size, waiting, self.pool.timeout) from None
            raise unavailable(self.dsn, exc, self.origin) from None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """One transaction: committed on success, rolled back on any exception."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Conn]:
        """A transaction for a read command, bounded: a lock wait of at most READ_LOCK_SECONDS and a
        statement of at most READ_STATEMENT_SECONDS, unless the server, the role or the connection
        (PGOPTIONS) set their own, which stand; so `status` behind a migration's lock says so in
        seconds instead of hanging for minutes."""
        async with self.transaction() as conn:
            defaults = {"lock": READ_LOCK_SECONDS * 1000, "statement": READ_STATEMENT_SECONDS * 1000}
            rows = await self.fetch(conn, "read_limits", {f"{k}_ms": str(round(v)) for k, v in defaults.items()})
            READ_LIMITS[conn] = {row["name"]: row["ms"] for row in rows}
            try:
                yield conn
            finally:
                READ_LIMITS.pop(conn, None)

    @asynccontextmanager
    async def pipelined_transaction(self) -> AsyncIterator[Conn]:
        """One transaction in pipeline mode: its BEGIN goes with the first statements and its COMMIT
        with the last (see `send`), so a transaction of n round trips of statements takes n, not n + 2."""
        async with self.connection() as conn, conn.pipeline(), conn.transaction():
            yield conn

    # ------------------------------------------------------------ generic helpers

    @staticmethod
    async def fetch(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        with named(conn, name):
            cursor = await conn.execute(QUERIES[name], params or {})
            return await cursor.fetchall() if cursor.description else []

    @staticmethod
    async def execute(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> int:
        with named(conn, name):
            cursor = await conn.execute(QUERIES[name], params or {})
            return cursor.rowcount

    @staticmethod
    async def execute_many(conn: Conn, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        if params:
            with named(conn, name):
                async with conn.cursor() as cursor:
                    await cursor.executemany(QUERIES[name], params)

    @staticmethod
    async def pipelined(conn: Conn, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> list[list[Row]]:
        """The named statements sent together, in order, in one round trip; each one's rows.

        The engine's claim and result writes are chains of short statements: one round trip
        each would wait on a busy event loop every time."""
        if not statements:
            return []
        with named(conn, ", ".join(name for name, _ in statements)):
            async with conn.pipeline():
                cursors = [await Store._queue(conn, name, params) for name, params in statements]
            return [await c.fetchall() if c.description else [] for c in cursors]

    @staticmethod
    async def send(conn: Conn, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> list[AsyncCursor[Row]]:
        """The named statements queued in the pipeline of a `pipelined_transaction`: they go, and their
        errors and rows come back, with the COMMIT. Their cursors, to read once the transaction's
        block has ended."""
        with named(conn, ", ".join(name for name, _ in statements)):
            return [await Store._queue(conn, name, params) for name, params in statements]

    @staticmethod
    async def _queue(conn: Conn, name: str, params: Mapping[str, Any]) -> AsyncCursor[Row]:
        """The named statement sent on a cursor of its own; its rows come back in binary (the
        engine's claim and result paths: psycopg parses binary timestamps much faster)."""
        cursor = conn.cursor(binary=True)
        await cursor.execute(QUERIES[name], params)
        return cursor

    @staticmethod
    async def copy(conn: Conn, name: str, rows: Iterable[Sequence[Any]]) -> None:
        """The named `COPY … FROM STDIN`, one row per item of `rows`."""
        with named(conn, name):
            async with conn.cursor() as cursor, cursor.copy(QUERIES[name]) as copy:
                for row in rows:
                    await copy.write_row(row)

    # ------------------------------------------------------------ schema

    async def init_schema(self) -> int:
        """Create or upgrade the schema from schemata.toml; returns the number of statements run.

        Reads the catalog first and writes only when something is missing, so a role without
        CREATE works on a database its owner initialized.
        """
        decl = schema.load_schemata()
        mark = sql.SQL("COMMENT ON SCHEMA {} IS {}").format(sql.Identifier(decl.schema), sql.Literal(decl.fingerprint))
        async with self.connection() as conn:
            found = await self.fetch(conn, "schema_fingerprint", {"schema": decl.schema})
            if found and found[0]["fingerprint"] == decl.fingerprint:
                return 0  # initialized from this very declaration: nothing to compare
            have = await self.compared(conn, decl, await self.existing(conn, decl.schema))
            if waiting := schema.unconverted(decl, have):
                names = ", ".join(f"{decl.schema}.{t.name}" for t in waiting)
                raise UserError(
                    f"{names} is not partitioned yet (an older release made it): run `reconciler db init` once, "
                    "as the owner, to convert it (online: docs/operations.md#partitions)"
                )
            if not schema.statements(decl, have):
                with contextlib.suppress(psycopg.errors.InsufficientPrivilege):  # its owner marks it later
                    await conn.execute(mark)  # up to date: the next start need not compare
                return 0
            try:
                async with conn.transaction():
                    await self.execute(conn, "lock_key", {"key": APPLY_LOCK_KEY})
                    now = await self.compared(conn, decl, await self.existing(conn, decl.schema))
                    todo = schema.statements(decl, now)
                    for statement in todo:
                        await conn.execute(statement)
                    await self.cover(conn, decl)
                    await conn.execute(mark)
            except psycopg.errors.InsufficientPrivilege:
                state = "does not exist" if not have.schema else "is out of date"
                raise PermissionDenied(
                    f"schema {decl.schema} {state} and role {conn.info.user!r} may not "
                    f"{'create' if not have.schema else 'upgrade'} it; run `reconciler db init` as the owner"
                ) from None
        return len(todo)

    @classmethod
    async def cover(cls, conn: Conn, decl: schema.Schemata) -> None:
        """In the schema's transaction: a partitioned table it just made gets its partitions, MINVALUE to a few days
        ahead by the database's clock (the engines' leader and `db init` keep them ahead; see db/partitions.py)."""
        for table in decl.tables:
            if table.partition is not None and not await cls.partitions_of(conn, decl, table.name):
                await cls.create_partitions(conn, decl, table, None)

    @classmethod
    async def partitions_of(cls, conn: Conn, decl: schema.Schemata, table: str) -> list[partitions.Partition]:
        """The table's partitions (those being detached included)."""
        qualified = sql.Identifier(decl.schema, table).as_string(None)
        rows = await cls.fetch(conn, "catalog_partitions", {"table": qualified})
        return [partitions.Partition(r["name"], r["lower"], r["upper"], r["detaching"]) for r in rows]

    @classmethod
    async def create_partitions(
        cls, conn: Conn, decl: schema.Schemata, table: schema.Table, now: datetime | None
    ) -> list[str]:
        """In the caller's transaction: the partitions `table` lacks to cover MINVALUE to a few days past `now`
        (None: the database's clock); their names."""
        assert table.partition is not None
        if now is None:
            cursor = await conn.execute("SELECT now() AS now")
            row = await cursor.fetchone()
            assert row is not None
            now = row["now"]
        assert now is not None
        made = []
        for bound in partitions.missing(
            table.name, await cls.partitions_of(conn, decl, table.name), table.partition, now
        ):
            for statement in schema.partition_statements(decl.schema, table, bound):
                await conn.execute(statement)
            made.append(bound.name)
        return made

    async def existing(self, conn: Conn, name: str = "scheduler") -> schema.Existing:
        """What the catalog holds of schema `name` (readable by any role that can connect)."""
        columns: dict[str, set[str]] = {}
        for row in await self.fetch(conn, "catalog_table_columns", {"schema": name}):
            columns.setdefault(row["table_name"], set()).add(row["column_name"])
        shapes = {
            row["indexname"]: schema.IndexShape(
                row["table_name"], list(row["columns"]), row["is_unique"], row["btree"], row["predicate"]
            )
            for row in await self.fetch(conn, "catalog_indexes", {"schema": name})
        }
        checks = {
            row["conname"]: schema.check_expression(row["definition"])
            for row in await self.fetch(conn, "catalog_checks", {"schema": name})
        }
        present = bool(await self.fetch(conn, "catalog_schema", {"schema": name}))
        split = frozenset(row["name"] for row in await self.fetch(conn, "catalog_partitioned", {"schema": name}))
        return schema.Existing(present, columns, set(shapes), shapes, checks, partitioned=split)

    @staticmethod
    async def compared(conn: Conn, decl: schema.Schemata, have: schema.Existing) -> schema.Existing:
        """`have`, knowing which declared and catalog expressions PostgreSQL reads alike: each pair is
        written back by the planner (EXPLAIN VERBOSE), which deparses both the same way. No DDL.

        A role that may not read a table cannot tell: its expressions count as unchanged (it could not
        replace them anyway; the owner's `db init` does)."""
        same: set[tuple[str, str]] = set()
        for table, pairs in schema.expression_pairs(decl, have).items():
            ordered = sorted(pairs)
            listed = [sql.SQL("({})").format(sql.SQL(text)) for pair in ordered for text in pair]
            # LIMIT: a node with the output list on top, a partitioned table's Append having none
            query = sql.SQL("EXPLAIN (VERBOSE, COSTS OFF, FORMAT JSON) SELECT {} FROM {} LIMIT 1").format(
                sql.SQL(", ").join(listed), sql.Identifier(decl.schema, table)
            )
            try:
                async with conn.transaction():  # a savepoint inside init's transaction
                    cursor = await conn.execute(query)
                    row = await cursor.fetchone()
            except psycopg.errors.InsufficientPrivilege:
                same |= pairs
                continue
            assert row is not None
            output = next(iter(row.values()))[0]["Plan"]["Output"]
            same |= {pair for i, pair in enumerate(ordered) if output[2 * i] == output[2 * i + 1]}
        return dataclasses.replace(have, same=frozenset(same))

    # ------------------------------------------------------------ tasks

    @classmethod
    async def tasks(cls, conn: Conn) -> list[TaskRow]:
        return [TaskRow.from_row(row) for row in await cls.fetch(conn, "tasks_all")]

    @staticmethod
    def jsonb(value: Any) -> Jsonb:
        return Jsonb(value)

    @classmethod
    async def lock_apply(cls, conn: Conn) -> None:
        await cls.execute(conn, "lock_key", {"key": APPLY_LOCK_KEY})

    @classmethod
    async def notify(cls, conn: Conn, payload: str) -> None:
        await cls.execute(conn, "notify_tasks", {"payload": payload})

    async def listen(self, dsn: str | None = None) -> Listening:
        """A dedicated autocommit connection LISTENing on scheduler_tasks, to `dsn` (default the store's)."""
        target = dsn or self.dsn
        try:
            conn = await self.connect(dsn and writable_dsn(dsn), autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            raise unavailable(target, exc, self.origin) from None
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, psycopg.Error):
                raise unavailable(target, exc, self.origin) from None
            raise
        return Listening(conn, target, self.origin)


DB_FAULTS = (DatabaseUnavailable, psycopg.OperationalError)
"""What a caller backs off from and retries: the database away (a fault on a connection of its own included)."""
