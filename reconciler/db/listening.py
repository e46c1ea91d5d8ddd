"""A LISTEN connection as the engine's listener holds it: its notifications, and a check that its server still
answers and still takes writes. psycopg stays behind it: what goes wrong leaves as DatabaseUnavailable."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import AsyncConnection

from reconciler.db.embedded import DsnOrigin
from reconciler.db.errors import redact, unavailable
from reconciler.db.failover import reports_read_only
from reconciler.errors import DatabaseUnavailable


class Listening:
    """A dedicated autocommit connection that LISTENs on scheduler_tasks (made by `Store.listen`)."""

    def __init__(self, conn: AsyncConnection[Any], dsn: str, origin: DsnOrigin) -> None:
        self._conn = conn
        self._dsn = dsn
        self._origin = origin

    @property
    def where(self) -> str:
        """The database it listens on, without its password."""
        return redact(self._dsn)

    async def notifications(self, timeout: float) -> AsyncIterator[str]:
        """The payload of each NOTIFY that arrives within `timeout` seconds."""
        try:
            async for notify in self._conn.notifies(timeout=timeout):
                yield notify.payload
        except psycopg.Error as exc:
            raise unavailable(self._dsn, exc, self._origin) from None

    async def check(self) -> None:
        """A round trip: raises DatabaseUnavailable when the connection is gone or its server no longer takes
        writes (a failover: the writes, and so the NOTIFYs, go to another server now, while this one still
        takes LISTEN and hears nothing more)."""
        try:
            await self._conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise unavailable(self._dsn, exc, self._origin) from None
        if reports_read_only(self._conn):
            raise DatabaseUnavailable(
                f"the database {self.where} does not take writes any more (a failover); listening again"
            )

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._conn.close()
