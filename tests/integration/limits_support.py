"""Limits for engine tests: a limit file's text validated and written as apply writes it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from reconciler.db.store import Store
from reconciler.files.kinds import validate
from reconciler.files.limits import LIMITS
from reconciler.reconcile.declared import write_changes
from reconciler.reconcile.diff import ItemChange


async def add_limit(store: Store, name: str, *, source: str = "default", **numbers: Any) -> None:
    """Create (or change) the limit `name` of `source` as apply writes limits.d/NAME.toml saying `numbers`."""
    text = "".join(f"{key} = {value!r}\n" for key, value in numbers.items())
    limit, errors = validate(LIMITS, name, f"limits.d/{name}.toml", text)
    assert limit is not None, errors
    async with store.transaction() as conn:
        await write_changes(conn, LIMITS, [ItemChange("create", name, item=limit)], source)


def refill_at(dsn: str, name: str, moment: datetime) -> None:
    """Say the limit's bucket was last counted at `moment` (tests inject their own now)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE scheduler.limits SET refilled_at = %s WHERE name = %s", (moment, name))


def limit_row(dsn: str, name: str) -> dict[str, Any]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        row = conn.execute("SELECT * FROM scheduler.limits WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return row


def waiting(dsn: str) -> dict[str, str]:
    """Task id → the limit its due occurrence waits for."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, limit_wait FROM scheduler.tasks WHERE limit_wait IS NOT NULL").fetchall()
    return {task_id: limit for task_id, limit in rows}
