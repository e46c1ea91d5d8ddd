"""A named statement with its parameters, as the typed query functions build it to send in a batch.

The claim, the result writer and the notification events send chains of short statements together
(pipelined, one round trip); the query modules build them (`Statement`) and only they name a query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncCursor

from reconciler.db.rows import Conn, Row
from reconciler.db.store import Store


@dataclass(frozen=True)
class Statement:
    """One named query of queries.sql and its parameters, not sent yet."""

    name: str
    params: Mapping[str, Any]


async def pipelined(conn: Conn, statements: Sequence[Statement]) -> list[list[Row]]:
    """The statements sent together in one round trip; each one's rows (see Store.pipelined)."""
    return await Store.pipelined(conn, [(s.name, s.params) for s in statements])


async def send(conn: Conn, statements: Sequence[Statement]) -> list[AsyncCursor[Row]]:
    """The statements queued in a pipelined transaction, sent with its COMMIT (see Store.send)."""
    return await Store.send(conn, [(s.name, s.params) for s in statements])


async def execute(conn: Conn, statement: Statement) -> int:
    """One statement on its own; the rows it changed."""
    return await Store.execute(conn, statement.name, statement.params)
