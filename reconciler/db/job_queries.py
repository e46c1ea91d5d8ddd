"""The jobs' queries, typed (docs/jobs.md): a callback attempt's token and acceptance, a callback's run, its
heartbeat and end, and the upkeep's scan of jobs past their deadline (one function or statement builder per
named statement of queries.sql)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict, cast
from uuid import UUID

from reconciler.db.queries import released
from reconciler.db.rows import Conn, RunHead
from reconciler.db.statements import Statement, pipelined, send


class JobRow(RunHead):
    """A job's run as a callback or the overdue scan reads it."""

    deadline_at: datetime | None
    heartbeat_seconds: float | None
    accepted_at: datetime | None
    started_at: datetime | None  # when its first attempt's request left (a span's start)
    trace_id: UUID | None  # its trace (tracing.RunTrace)
    traceparent: str | None
    policy: Any  # the task's stored `policy` JSON (None: the task was deleted)
    notify: Any  # the task's stored `notify` JSON
    now: datetime


class CallbackRow(JobRow):
    callback_hash: str | None
    claimed_at: datetime
    output: Any
    error: str | None
    retry_at: datetime | None
    target: Any  # the task's stored `target` JSON: the variables whose values are scrubbed from what is stored


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


async def job_attempt(
    conn: Conn, *, run_id: int, attempt: int, token_hash: str, deadline: float, heartbeat: float | None
) -> bool:
    """Record an attempt's token, deadline and heartbeat timeout before its request leaves; False when the
    run is not running any more (it must not be sent)."""
    params = {
        "run_id": run_id,
        "attempt": attempt,
        "hash": token_hash,
        "deadline": deadline,
        "heartbeat": heartbeat,
        "now": None,
    }
    [rows] = await pipelined(conn, [Statement("job_attempt", params)])
    return bool(rows)


async def job_accepted(
    conn: Conn,
    *,
    run_id: int,
    token_hash: str,
    http_status: int | None,
    excerpt: str | None,
    started_at: datetime | None,
    duration_ms: int,
) -> bool:
    """The target accepted the job: the run's lease becomes the job's. False when it had completed already."""
    params = {
        "run_id": run_id,
        "hash": token_hash,
        "http_status": http_status,
        "excerpt": excerpt,
        "started_at": started_at,
        "duration_ms": duration_ms,
        "now": None,
    }
    [rows] = await pipelined(conn, [Statement("job_accepted", params)])
    return bool(rows)


async def job_get(conn: Conn, *, run_id: int, now: datetime | None = None) -> CallbackRow | None:
    [rows] = await pipelined(conn, [Statement("job_get", {"run_id": run_id, "now": now})])
    return cast(CallbackRow, rows[0]) if rows else None


async def job_lock(conn: Conn, *, run_id: int) -> tuple[str, str | None] | None:
    """Lock a job's run row (the callback's transaction); its status and token hash, None when gone."""
    [rows] = await pipelined(conn, [Statement("job_lock", {"run_id": run_id})])
    return (rows[0]["status"], rows[0]["callback_hash"]) if rows else None


def job_heartbeat(*, run_id: int, progress: Any, now: datetime | None = None) -> Statement:
    return Statement("job_heartbeat", {"run_id": run_id, "progress": _json(progress), "now": now})


def job_end(
    *, run_id: int, status: str, error: str | None, output: Any, now: datetime | None = None
) -> list[Statement]:
    """A job's final status, its lease released and the engines woken for the slot it frees."""
    params = {"run_id": run_id, "status": status, "error": error, "output": _json(output), "now": now}
    return [Statement("job_end", params), *released([run_id])]


def job_retry(
    *, run_id: int, wait: float, error: str | None, output: Any, timed_out: bool, now: datetime | None = None
) -> list[Statement]:
    """A job queued again for its next attempt in `wait` seconds; its lease released meanwhile."""
    params = {"run_id": run_id, "wait": wait, "error": error, "output": _json(output), "timed_out": timed_out}
    return [Statement("job_retry", {**params, "now": now}), *released([run_id])]


async def jobs_overdue(conn: Conn, *, limit: int, now: datetime | None = None) -> list[JobRow]:
    [rows] = await pipelined(conn, [Statement("jobs_overdue", {"limit": limit, "now": now})])
    return cast(list[JobRow], rows)


class JobsHealthRow(TypedDict):
    running: int
    oldest_seconds: float
    stalest_heartbeat_seconds: float


async def jobs_health(conn: Conn, *, now: datetime | None, sources: Sequence[str]) -> JobsHealthRow:
    [rows] = await pipelined(conn, [Statement("jobs_health", {"now": now, "sources": list(sources)})])
    return cast(JobsHealthRow, rows[0])


async def write(conn: Conn, statements: list[Statement]) -> None:
    """Statements of a pipelined transaction, sent with its COMMIT."""
    await send(conn, statements)
