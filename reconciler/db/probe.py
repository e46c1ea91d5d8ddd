"""/healthz's and /readyz's check of the database: `SELECT 1` on a connection of its own, opened on demand,
kept, and made again once broken. Not the claim's pool: a probe must neither wait for a connection the claims
hold nor take one from them, and it answers within its bound whatever the database does (a dead server's
connect would otherwise wait out libpq's timeout)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg


class Probe:
    """The health probe of one database (a DSN), one probe at a time."""

    def __init__(self, dsn: str, seconds: float) -> None:
        self.dsn = dsn
        self.seconds = seconds
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.lock = asyncio.Lock()  # one probe at a time on the one connection

    async def ok(self) -> bool:
        """Whether the database answered `SELECT 1` within the bound."""
        try:
            async with asyncio.timeout(self.seconds), self.lock:
                if self.conn is None or self.conn.closed:
                    self.conn = await psycopg.AsyncConnection.connect(
                        self.dsn, autocommit=True, connect_timeout=1, prepare_threshold=None
                    )  # never prepared: a pooler in transaction mode (see db/store.py)
                await self.conn.execute("SELECT 1")
            return True
        except Exception:
            await self.close()  # in an unknown state (cut off mid-statement, or broken): made again next time
            return False

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
