"""The queries of pauses and the audit log, typed (pause, resume, audit; the pause lines of plan, status and
explain; the audit row every operator action writes): one function per named statement of queries.sql.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict, cast

from reconciler.db.rows import Conn
from reconciler.db.store import Store


class PauseRow(TypedDict):
    """A pause in force, as plan, status and explain show it."""

    task_id: str
    paused_at: datetime
    paused_by: str
    reason: str
    paused_until: datetime | None


class OperatorTaskRow(TypedDict):
    """A task an operator command names, locked, with its pause (None's when it has none)."""

    id: str
    source: str
    spec_text: str
    enabled: bool
    next_run_at: datetime | None
    paused_at: datetime | None
    paused_by: str | None
    paused_reason: str | None
    paused_until: datetime | None
    in_force: bool  # it has a pause not past its paused_until


class AuditRow(TypedDict):
    id: int
    at: datetime
    actor: str
    action: str
    source: str | None
    task_ids: list[str]
    reason: str | None
    details: Any  # the stored JSON object


class AuditIdRow(TypedDict):
    id: int


class NameRow(TypedDict):
    name: str


async def pauses_in_force(conn: Conn, *, ids: Sequence[str] | None) -> list[PauseRow]:
    """The pauses in force (by the database's clock) of tasks `ids`, or of every task when None."""
    params = {"ids": None if ids is None else list(ids)}
    return cast(list[PauseRow], await Store.fetch(conn, "pauses_in_force", params))


async def operator_tasks(conn: Conn, *, ids: Sequence[str], source: str | None) -> list[OperatorTaskRow]:
    """The tasks `ids` and those of `source` (when given), locked, by id."""
    params = {"ids": list(ids), "source": source}
    return cast(list[OperatorTaskRow], await Store.fetch(conn, "operator_tasks", params))


async def pause_upsert(conn: Conn, *, ids: Sequence[str], actor: str, reason: str, until: datetime | None) -> int:
    """Pause tasks `ids` (a pause in force keeps its start); how many rows were written."""
    params = {"ids": list(ids), "actor": actor, "reason": reason, "until": until}
    return await Store.execute(conn, "pause_upsert", params)


async def pauses_clear(conn: Conn, *, ids: Sequence[str]) -> int:
    """The pauses of tasks `ids` deleted; how many."""
    return await Store.execute(conn, "pauses_clear", {"ids": list(ids)})


async def audit_insert(
    conn: Conn,
    *,
    actor: str,
    action: str,
    source: str | None,
    task_ids: Sequence[str],
    reason: str | None,
    details: Mapping[str, Any],
) -> list[AuditIdRow]:
    """One row of scheduler.audit; its id."""
    params = {
        "actor": actor,
        "action": action,
        "source": source,
        "task_ids": list(task_ids),
        "reason": reason,
        "details": Store.jsonb(dict(details)),
    }
    return cast(list[AuditIdRow], await Store.fetch(conn, "audit_insert", params))


async def audit_list(conn: Conn, *, task_id: str | None, limit: int) -> list[AuditRow]:
    """The audit log, newest first (only the actions that named `task_id`, when given)."""
    return cast(list[AuditRow], await Store.fetch(conn, "audit_list", {"task_id": task_id, "limit": limit}))


async def tables_readable(conn: Conn, *, names: Sequence[str]) -> set[str]:
    """Which of the tables `names` (of schema scheduler) this role may read."""
    rows = cast(list[NameRow], await Store.fetch(conn, "tables_readable", {"names": list(names)}))
    return {row["name"] for row in rows}


async def pauses_readable(conn: Conn, *, ids: Sequence[str] | None) -> dict[str, PauseRow]:
    """The pauses in force by task id, or none where this role (or database) has no pauses to read: a
    planner granted before pauses existed still plans and reads status."""
    if "pauses" not in await tables_readable(conn, names=["pauses"]):
        return {}
    return {row["task_id"]: row for row in await pauses_in_force(conn, ids=ids)}
