"""The notification queries, typed: the failing state per task, the outbox's writes, its delivery
and the dead-man's switch (one function or statement builder per named statement of queries.sql)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict, cast

from reconciler.db.rows import Conn
from reconciler.db.statements import Statement, pipelined
from reconciler.db.store import Store


class StateRow(TypedDict):
    task_id: str
    failing: bool
    failure_sent_at: datetime | None


class LateRow(TypedDict):
    id: str
    next_run_at: datetime
    late: Any  # the task's `notify.late` subscribers (JSON)
    now: datetime


class NotificationRow(TypedDict):
    """A notification claimed for sending, with its notifier's stored spec (None: deleted)."""

    id: int
    source: str
    notifier: str
    task_id: str
    event: str
    payload: dict[str, Any]
    attempts: int
    scheduled_for: datetime | None
    created_at: datetime
    spec: Any  # its notifier's stored spec (JSON); None when the notifier was deleted


async def notify_state_locked(conn: Conn, *, ids: Sequence[str]) -> list[StateRow]:
    """The failing state of tasks `ids` (sorted: replicas lock alike), made if missing and locked, in one round trip."""
    _, rows = await pipelined(
        conn, [Statement("notify_state_ensure", {"ids": list(ids)}), Statement("notify_state_lock", {"ids": list(ids)})]
    )
    return cast(list[StateRow], rows)


def notify_state_save(*, ids: list[str], failing: list[bool], sent: list[datetime | None], now: datetime) -> Statement:
    return Statement("notify_state_save", {"ids": ids, "failing": failing, "sent": sent, "now": now})


def notifications_insert(
    *,
    now: datetime,
    task_ids: list[str],
    notifiers: list[str],
    events: list[str],
    run_ids: list[int | None],
    scheduled: list[datetime | None],
    payloads: list[str],
) -> Statement:
    """Outbox rows, one per event and notifier (owned by the task's source); a `late` already raised is not."""
    return Statement(
        "notifications_insert",
        {
            "now": now,
            "task_ids": task_ids,
            "notifiers": notifiers,
            "events": events,
            "run_ids": run_ids,
            "scheduled": scheduled,
            "payloads": payloads,
        },
    )


async def tasks_late(conn: Conn, *, now: datetime | None, floor: float) -> list[LateRow]:
    return cast(list[LateRow], await Store.fetch(conn, "tasks_late", {"now": now, "floor": floor}))


async def notifications_claim(
    conn: Conn,
    *,
    now: datetime | None,
    limit: int,
    engine_id: str,
    lease: float,
    sources: Sequence[str],
    per_notifier: int,
    sending: Mapping[str, int],
) -> list[NotificationRow]:
    """Due notifications of `sources` for this engine to send, at most `per_notifier` of one notifier's
    at once counting those it is `sending` (by "source/notifier")."""
    params = {
        "now": now,
        "limit": limit,
        "engine_id": engine_id,
        "lease": lease,
        "sources": list(sources),
        "per_notifier": per_notifier,
        "sending": Store.jsonb(dict(sending)),
    }
    return cast(list[NotificationRow], await Store.fetch(conn, "notifications_claim", params))


async def notification_result(
    conn: Conn,
    *,
    id: int,
    engine_id: str,
    status: str,
    next: datetime,
    http_status: int | None,
    error: str | None,
    now: datetime,
) -> int:
    """One send's outcome on its row, if this engine still holds it (1) or not (0)."""
    params = {
        "id": id,
        "engine_id": engine_id,
        "status": status,
        "next": next,
        "http_status": http_status,
        "error": error,
        "now": now,
    }
    return await Store.execute(conn, "notification_result", params)


async def notifications_release(conn: Conn, *, ids: Sequence[int], engine_id: str, now: datetime) -> int:
    params = {"ids": list(ids), "engine_id": engine_id, "now": now}
    return await Store.execute(conn, "notifications_release", params)
