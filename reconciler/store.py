"""The only module that talks to PostgreSQL. Named queries live in sql/queries.sql.

psycopg errors that mean "the database is not there" become DatabaseUnavailable here,
at one boundary; everything else is a bug and propagates.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from reconciler import schema
from reconciler.errors import DatabaseUnavailable

QUERIES_FILE = Path(__file__).parent / "sql" / "queries.sql"
# pg_advisory_xact_lock key shared by every apply (and schema upgrade): "reconc" in ASCII.
APPLY_LOCK_KEY = 0x7265636F6E63
NOTIFY_CHANNEL = "scheduler_tasks"

Row = dict[str, Any]
Conn = AsyncConnection[Row]


def load_queries(path: Path = QUERIES_FILE) -> dict[str, str]:
    """`-- name: foo` sections of a .sql file → {name: statement}."""
    queries: dict[str, str] = {}
    for block in re.split(r"^-- name: ", path.read_text(), flags=re.M)[1:]:
        name, _, body = block.partition("\n")
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        queries[name.strip()] = "\n".join(lines).strip().rstrip(";")
    return queries


QUERIES = load_queries()


def redact(dsn: str) -> str:
    """A DSN without its password, for error messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    shown = {k: v for k, v in params.items() if k in ("host", "port", "dbname", "user") and v}
    return " ".join(f"{k}={v}" for k, v in shown.items()) or "<default>"


def _unavailable(dsn: str, exc: BaseException) -> DatabaseUnavailable:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    reason = reason.replace(dsn, redact(dsn))
    return DatabaseUnavailable(f"cannot connect to PostgreSQL ({redact(dsn)}): {reason}; check --dsn / RECONCILER_DSN")


@dataclass(frozen=True)
class TaskRow:
    """One row of scheduler.tasks (spec parsed on first use)."""

    id: str
    source: str
    spec_text: str
    spec_hash: str
    enabled: bool
    timezone: str
    next_run_at: datetime | None
    version: str = ""
    tampered: bool | None = None  # None: no digest to compare (row not written by apply)

    @cached_property
    def spec(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.spec_text)
        return parsed

    @classmethod
    def from_row(cls, row: Row) -> TaskRow:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


class Store:
    """A connection pool plus the named queries."""

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 4, timeout: float = 10.0) -> None:
        self.dsn = dsn
        self.pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            # Checked on checkout: after a server restart, a dead pooled connection is replaced
            # instead of failing the claim that drew it.
            check=AsyncConnectionPool.check_connection,
            open=False,
            kwargs={"row_factory": dict_row, "autocommit": True},
            connection_class=AsyncConnection[Row],
        )

    async def open(self) -> None:
        """Check the server answers (with its own error message), then open the pool."""
        try:
            probe = await psycopg.AsyncConnection.connect(self.dsn, connect_timeout=10)
            await probe.close()
            await self.pool.open(wait=True, timeout=15)
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
            raise _unavailable(self.dsn, exc) from None
        except Exception as exc:  # PoolTimeout and friends
            if exc.__class__.__module__.startswith("psycopg"):
                raise _unavailable(self.dsn, exc) from None
            raise

    async def close(self) -> None:
        await self.pool.close()

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
                yield conn
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise _unavailable(self.dsn, exc) from None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """One transaction: committed on success, rolled back on any exception."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    # ------------------------------------------------------------ generic helpers

    @staticmethod
    async def fetch(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        cursor = await conn.execute(QUERIES[name], params or {})
        return await cursor.fetchall() if cursor.description else []

    @staticmethod
    async def execute(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> int:
        cursor = await conn.execute(QUERIES[name], params or {})
        return cursor.rowcount

    @staticmethod
    async def execute_many(conn: Conn, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        if params:
            async with conn.cursor() as cursor:
                await cursor.executemany(QUERIES[name], params)

    # ------------------------------------------------------------ schema

    async def init_schema(self) -> int:
        """Create or upgrade the schema from schemata.toml; returns the number of statements run."""
        decl = schema.load_schemata()
        async with self.connection() as conn:
            if not schema.statements(decl, await self._existing(conn, decl.schema)):
                return 0
            async with conn.transaction():
                await self.execute(conn, "lock_key", {"key": APPLY_LOCK_KEY})
                todo = schema.statements(decl, await self._existing(conn, decl.schema))
                for statement in todo:
                    await conn.execute(statement)
        return len(todo)

    async def _existing(self, conn: Conn, name: str) -> schema.Existing:
        columns: dict[str, set[str]] = {}
        for row in await self.fetch(conn, "catalog_columns", {"schema": name}):
            columns.setdefault(row["table_name"], set()).add(row["column_name"])
        indexes = {row["indexname"] for row in await self.fetch(conn, "catalog_indexes", {"schema": name})}
        present = bool(await self.fetch(conn, "catalog_schema", {"schema": name}))
        return schema.Existing(present, columns, indexes)

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

    async def listen(self) -> AsyncConnection[Any]:
        """A dedicated autocommit connection LISTENing on scheduler_tasks."""
        try:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.dsn, exc) from None
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
        return conn
