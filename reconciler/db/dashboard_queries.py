"""The dashboard's queries, typed: one function per named statement of queries.sql (section "dashboard")."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict, cast

from reconciler.db.command_queries import RunRow, StatusRow
from reconciler.db.rows import Conn
from reconciler.db.store import Store
from reconciler.runs import STATUSES


class DashboardTaskRow(StatusRow):
    """A task of the task list: status_rows' columns, and more of its newest run and its history."""

    run_spec_text: str  # the spec with its calendars bound: what its schedule is computed from

    last_http_status: int | None
    last_kind: str | None  # its last run's (status_rows': the schedule's newest, never a manual or backfill run)
    last_late_seconds: float | None  # its last run's start less its scheduled time
    failing_streak: int  # failed or lost runs since its newest success (at most 100 counted)
    last_day: dict[str, int]  # its schedule's runs scheduled in the last day, by status (none: no key)


class CountsRow(TypedDict):
    tasks: int
    enabled: int
    sources: list[str]


class TimelineTaskRow(TypedDict):
    id: str
    source: str
    spec_text: str
    timezone: str


async def tasks_page(
    conn: Conn,
    *,
    after: str | None,
    source: str | None,
    labels: str | None,
    status: str | None,
    now: datetime | None,
    limit: int,
    id: str | None = None,
) -> list[DashboardTaskRow]:
    """Up to `limit` tasks after `after` by id (or the task `id`); `labels` a JSON object the task's labels
    must contain; `status` the last run's status (`none`: no run yet)."""
    params: dict[str, Any] = {"after": after, "source": source, "labels": labels, "status": status, "now": now}
    params.update(limit=limit, id=id, statuses=list(STATUSES))
    return cast(list[DashboardTaskRow], await Store.fetch(conn, "dashboard_tasks", params))


async def counts(conn: Conn) -> list[CountsRow]:
    return cast(list[CountsRow], await Store.fetch(conn, "dashboard_counts"))


async def timeline_tasks(conn: Conn, *, after: str | None, source: str | None, limit: int) -> list[TimelineTaskRow]:
    params = {"after": after, "source": source, "limit": limit}
    return cast(list[TimelineTaskRow], await Store.fetch(conn, "dashboard_timeline_tasks", params))


async def runs_page(conn: Conn, **filters: Any) -> list[RunRow]:
    """Runs newest first: `task_id`, `before` (an id), `status`, `kind`, `since`, `until`, `limit`."""
    keys = ("task_id", "before", "status", "kind", "since", "until", "limit")
    return cast(list[RunRow], await Store.fetch(conn, "dashboard_runs", {key: filters.get(key) for key in keys}))
