"""The engine's queries, typed: one function per named statement of queries.sql (keyword parameters,
typed rows), like procrastinate's JobManager. Only the db/*queries modules name a statement.

`now` is the instant a test injects (`run_once(now)`); production passes None and the statements
read the database's clock (`COALESCE(%(now)s::timestamptz, now())`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict, cast
from uuid import UUID

from psycopg import AsyncCursor

from reconciler.db.grants import AUDIT_FLOOR_DAYS
from reconciler.db.rows import Conn, Row
from reconciler.db.statements import Statement, pipelined, send
from reconciler.db.store import Store


class ClockRow(TypedDict):
    now: datetime


class LostRow(TypedDict):
    id: int
    task_id: str
    scheduled_for: datetime
    error: str | None
    notify: Any  # the task's stored `notify` JSON


class DueRow(TypedDict):
    id: str
    spec_key: int  # the 64-bit hash of the stored spec text
    next_run_at: datetime
    paused_by: str | None  # its pause (`reconciler pause`), in force or ended; None when it has none
    paused_reason: str | None
    paused_until: datetime | None
    source: str
    limits: list[str] | None  # the limits the task names ([policy] limits), as stored
    limit_wait: str | None  # the limit its due occurrence waits for (a claim found it full)


class QueuedRow(TypedDict):
    run_id: int
    task_id: str
    scheduled_for: datetime
    kind: str  # manual | backfill; scheduled | catchup: a job's retry (job_retry)
    attempt: int  # the attempts made (a job's retry goes on from there)
    spec_text: str
    spec_key: int
    source: str
    limits: list[str] | None
    trace_id: UUID | None  # its trace (None: a row written before traces were)
    traceparent: str | None  # a manual run's caller's (`trigger --traceparent`)


class SpecKeyRow(TypedDict):
    id: str
    spec_key: int


class SpecRow(TypedDict):
    id: str
    spec_text: str
    spec_key: int


class InDoubtRow(TypedDict):
    run_id: int
    task_id: str
    scheduled_for: datetime
    kind: str
    attempt: int
    spec_text: str
    spec_key: int
    source: str
    lease_left: float  # seconds
    trace_id: UUID | None
    traceparent: str | None


class HeldRow(TypedDict):
    task_id: str
    held: int


class OccurrenceRow(TypedDict):
    task_id: str
    scheduled_for: datetime


class InsertedRow(TypedDict):
    id: int
    n: int  # its place (from 1) in runs_insert's arrays


class LimitRow(TypedDict):
    source: str
    name: str
    max_in_flight: int | None
    rate_per_second: float | None
    burst: float | None
    in_flight: int
    tokens: float
    at: datetime  # the instant the tokens are counted at (limits_take writes it back)


class HeartbeatRow(TypedDict):
    database_now: datetime


class NearestRow(TypedDict):
    next_run_at: datetime | None
    now: datetime
    queued: bool


class LeaderRow(TypedDict):
    engine_id: str


def _rows(rows: list[Row]) -> Any:
    """Rows as the TypedDict the caller declares (the statement's columns)."""
    return rows


# ------------------------------------------------------------ the claim


class ExpiredRow(TypedDict):
    run_id: int
    engine_id: str
    scheduled_for: datetime | None  # None: a lease an older engine took


async def claim_first(
    conn: Conn, *, now: datetime | None, batch: int, sources: Sequence[str]
) -> tuple[list[ClockRow], list[ExpiredRow], list[DueRow], list[QueuedRow]]:
    """The claim's first round trip: the clock, the leases expired (their runs are lost: mark_lost), the due tasks
    and the queued manual runs."""
    scope = {"now": now, "batch": batch, "sources": list(sources)}
    clock, expired, due, queued = await pipelined(
        conn,
        [
            Statement("clock_now", scope),
            Statement("leases_expired", scope),
            Statement("claim_due", scope),
            Statement("claim_queued", scope),
        ],
    )
    return _rows(clock), _rows(expired), _rows(due), _rows(queued)


async def mark_lost(conn: Conn, *, expired: Sequence[ExpiredRow], now: datetime | None) -> list[LostRow]:
    """The runs of expired leases recorded lost (a lost backfill run queued again), each in its partition."""
    params = {
        "run_ids": [e["run_id"] for e in expired],
        "engines": [e["engine_id"] for e in expired],
        "scheduled": partitions_of([e["scheduled_for"] for e in expired]),
        "now": now,
    }
    [rows] = await pipelined(conn, [Statement("runs_mark_lost", params)])
    return cast(list[LostRow], rows)


def partitions_of(scheduled: Sequence[datetime | None]) -> list[datetime] | None:
    """The scheduled_for of runs a statement names by id, which confine it to their partitions (in_partitions in
    queries.sql); None when one is not known (every partition is read)."""
    known = [at for at in scheduled if at is not None]
    return known if len(known) == len(scheduled) else None


async def claim_locks(
    conn: Conn,
    *,
    ids: Sequence[str],
    now: datetime,
    finished: Sequence[int],
    cold: Sequence[str],
    limits: Sequence[tuple[str, str]] = (),
    at: datetime | None = None,
    occurrences: Sequence[tuple[str, datetime]] = (),
) -> tuple[list[HeldRow], list[SpecRow], list[LimitRow], list[OccurrenceRow]]:
    """The claim's second round trip: lock the tasks `ids`, count their live leases (not those of runs
    `finished`), read the specs of tasks `cold` (none when empty), and lock and read the `limits` (source, name)
    the tasks name (none when empty: a claim of tasks without limits costs what it did). `at` is the instant a
    test injects (None: the database's clock as the limits are locked, see limits_read). `occurrences`: those of
    the queued backfill runs (task, scheduled_for); the ones with a run in flight come back (occurrences_in_flight)."""
    fetch = [Statement("tasks_specs", {"ids": list(cold)})] if cold else []
    if limits:
        groups = {"sources": [s for s, _ in limits], "names": [n for _, n in limits]}
        fetch += [
            Statement("limits_lock", groups),
            Statement("limits_read", {**groups, "now": at, "finished": list(finished)}),
        ]
    if occurrences:
        pairs = {"task_ids": [t for t, _ in occurrences], "scheduled": [m for _, m in occurrences]}
        fetch.append(Statement("occurrences_in_flight", pairs))
    _, leases, *fetched = await pipelined(
        conn,
        [
            Statement("lock_tasks", {"ids": list(ids)}),
            Statement("leases_held", {"ids": list(ids), "now": now, "finished": list(finished)}),
            *fetch,
        ],
    )
    busy = fetched.pop() if occurrences else []
    specs = fetched[0] if cold else []
    read = fetched[-1] if limits else []
    return _rows(leases), _rows(specs), _rows(read), _rows(busy)


def runs_insert(
    *,
    engine_id: str,
    now: datetime,
    task_ids: list[str],
    scheduled: list[datetime],
    kinds: list[str],
    statuses: list[str],
    errors: list[str | None],
    lease_ids: list[str],
    lease_seconds: list[float],
    trace_ids: list[str],
) -> Statement:
    """Insert run rows (an occurrence recorded already is not) and the leases of those running;
    its rows are InsertedRow."""
    return Statement(
        "runs_insert",
        {
            "engine_id": engine_id,
            "now": now,
            "task_ids": task_ids,
            "scheduled": scheduled,
            "kinds": kinds,
            "statuses": statuses,
            "errors": errors,
            "lease_ids": lease_ids,
            "lease_seconds": lease_seconds,
            "trace_ids": trace_ids,
        },
    )


def runs_start_queued(*, run_id: int, status: str, engine_id: str, now: datetime, error: str | None) -> Statement:
    return Statement(
        "runs_start_queued", {"run_id": run_id, "status": status, "engine_id": engine_id, "now": now, "error": error}
    )


def leases_insert(
    *,
    engine_id: str,
    now: datetime,
    task_ids: list[str],
    run_ids: list[int],
    seconds: list[float],
    scheduled: list[datetime],
) -> Statement:
    params = {"engine_id": engine_id, "now": now, "task_ids": task_ids, "run_ids": run_ids, "seconds": seconds}
    return Statement("leases_insert", {**params, "scheduled": scheduled})


def tasks_advance(*, ids: list[str], nexts: list[datetime | None], waits: list[str | None]) -> Statement:
    """Move claimed tasks on (next_run_at), and say which limit each one's due occurrence waits for."""
    return Statement("tasks_advance", {"ids": ids, "nexts": nexts, "waits": waits})


async def tasks_due_before(conn: Conn, *, until: datetime, limit: int, sources: Sequence[str]) -> list[SpecKeyRow]:
    scope = {"until": until, "limit": limit, "sources": list(sources)}
    return cast(list[SpecKeyRow], await Store.fetch(conn, "tasks_due_before", scope))


async def tasks_specs(conn: Conn, *, ids: Sequence[str]) -> list[SpecRow]:
    return cast(list[SpecRow], await Store.fetch(conn, "tasks_specs", {"ids": list(ids)}))


async def runs_in_doubt(conn: Conn, *, engine_id: str, since: datetime, known: Sequence[int]) -> list[InDoubtRow]:
    """Runs of this engine's claims that it never saw commit (see queries.sql)."""
    params = {"engine_id": engine_id, "since": since, "known": list(known)}
    return cast(list[InDoubtRow], await Store.fetch(conn, "runs_in_doubt", params))


async def clock_now(conn: Conn) -> list[ClockRow]:
    """The database's clock (the transaction's time)."""
    return cast(list[ClockRow], await Store.fetch(conn, "clock_now", {"now": None}))


# ------------------------------------------------------------ results


async def run_attempt(
    conn: Conn,
    *,
    run_id: int,
    scheduled_for: datetime,
    attempt: int,
    started_at: datetime | None,
    http_status: int | None,
    error: str | None,
    duration_ms: int | None,
    excerpt: str | None,
) -> int:
    """One attempt's progress on its run's row (between retries)."""
    return await Store.execute(
        conn,
        "run_attempt",
        {
            "run_id": run_id,
            "scheduled_for": scheduled_for,
            "attempt": attempt,
            "started_at": started_at,
            "http_status": http_status,
            "error": error,
            "duration_ms": duration_ms,
            "excerpt": excerpt,
        },
    )


async def finish_runs(
    conn: Conn,
    *,
    run_ids: list[int],
    scheduled: list[datetime] | None,
    statuses: list[str],
    attempts: list[int],
    started: list[datetime | None],
    finished: list[datetime],
    http: list[int | None],
    errors: list[str | None],
    durations: list[int | None],
    excerpts: list[str | None],
) -> None:
    """Queue, in a pipelined transaction, the results of runs, their leases' release, and the NOTIFY of
    a freed slot: sent with its COMMIT."""
    columns = {
        "run_ids": run_ids,
        "scheduled": scheduled,
        "statuses": statuses,
        "attempts": attempts,
        "started": started,
        "finished": finished,
        "http": http,
        "errors": errors,
        "durations": durations,
        "excerpts": excerpts,
    }
    await send(conn, [Statement("runs_finish_many", columns), *released(run_ids, scheduled)])


def released(run_ids: list[int], scheduled: list[datetime] | None = None) -> list[Statement]:
    """After runs' ends are written: their leases released, and the NOTIFY of the slots they free (`scheduled`:
    the runs' scheduled_for, to read their partitions alone; None: not known)."""
    ids = {"run_ids": run_ids}
    return [Statement("leases_release_many", ids), Statement("runs_finish_notify", {**ids, "scheduled": scheduled})]


# ------------------------------------------------------------ upkeep


async def runs_prune_keep(conn: Conn, *, batch: int, sources: Sequence[str]) -> int:
    """At most `batch` finished runs beyond their task's policy.keep_runs deleted; how many."""
    return await Store.execute(conn, "runs_prune_keep", {"batch": batch, "sources": list(sources)})


async def notifications_prune_age(conn: Conn, *, before: datetime, batch: int, sources: Sequence[str]) -> int:
    """At most `batch` delivered or given-up notifications created before `before` deleted; how many."""
    params = {"before": before, "batch": batch, "sources": list(sources)}
    return await Store.execute(conn, "notifications_prune_age", params)


async def audit_prune_age(conn: Conn, *, before: datetime, batch: int, sources: Sequence[str]) -> int:
    """At most `batch` audit rows written before `before` deleted, none younger than AUDIT_FLOOR_DAYS; how many."""
    params = {"before": before, "batch": batch, "sources": list(sources), "floor_days": AUDIT_FLOOR_DAYS}
    return await Store.execute(conn, "audit_prune_age", params)


async def engine_heartbeat(
    conn: Conn,
    *,
    engine_id: str,
    host: str,
    pid: int,
    now: datetime | None,
    database: str | None,
    listening: bool | None = None,
    keep_runs_days: float | None = None,
) -> list[HeartbeatRow]:
    """`database`: host:port as this engine's libpq connected (of a multi-host DSN, the host it chose);
    `listening`: whether its LISTEN connection is up; `keep_runs_days`: its retention (None: keep every run)."""
    params = {"engine_id": engine_id, "host": host, "pid": pid, "now": now, "database": database}
    params |= {"listening": listening, "keep_runs_days": keep_runs_days}
    return cast(list[HeartbeatRow], await Store.fetch(conn, "engine_heartbeat", params))


async def engines_keep_runs_days(conn: Conn, *, engine_id: str) -> list[float | None]:
    """The retention of the other live engines (None: keep every run)."""
    rows = await Store.fetch(conn, "engines_keep_runs_days", {"engine_id": engine_id})
    return [row["keep_runs_days"] for row in rows]


async def engine_gone(conn: Conn, *, engine_id: str) -> int:
    return await Store.execute(conn, "engine_gone", {"engine_id": engine_id})


async def nearest_due(conn: Conn, *, now: datetime | None, sources: Sequence[str]) -> list[NearestRow]:
    return cast(list[NearestRow], await Store.fetch(conn, "nearest_due", {"now": now, "sources": list(sources)}))


async def leader_take(conn: Conn, *, name: str, engine_id: str, seconds: float) -> list[LeaderRow]:
    """A row when this engine holds (took or renewed) the lease `name`; none when another does."""
    params = {"name": name, "engine_id": engine_id, "seconds": seconds}
    return cast(list[LeaderRow], await Store.fetch(conn, "leader_take", params))


# ------------------------------------------------------------ metrics


class BacklogRow(TypedDict):
    due: int


class HealthRow(TypedDict):
    id: str
    next_run_at: datetime | None
    last_success: datetime | None
    failing: bool | None


class EngineSeenRow(TypedDict):
    engine_id: str
    last_seen: datetime


class OutboxHealthRow(TypedDict):
    pending: int
    failed: int
    oldest_due_seconds: float


class IdRow(TypedDict):
    id: str


async def due_backlog(conn: Conn, *, now: datetime | None, sources: Sequence[str]) -> list[BacklogRow]:
    return cast(list[BacklogRow], await Store.fetch(conn, "due_backlog", {"now": now, "sources": list(sources)}))


async def task_health(conn: Conn, *, now: datetime | None, sources: Sequence[str], limit: int) -> list[HealthRow]:
    params = {"now": now, "sources": list(sources), "limit": limit}
    return cast(list[HealthRow], await Store.fetch(conn, "task_health", params))


async def engines_seen(conn: Conn, *, now: datetime | None) -> list[EngineSeenRow]:
    return cast(list[EngineSeenRow], await Store.fetch(conn, "engines_seen", {"now": now}))


async def notifications_health(conn: Conn, *, now: datetime, sources: Sequence[str]) -> list[OutboxHealthRow]:
    params = {"now": now, "sources": list(sources)}
    return cast(list[OutboxHealthRow], await Store.fetch(conn, "notifications_health", params))


async def tasks_present(conn: Conn, *, ids: Sequence[str], sources: Sequence[str]) -> list[IdRow]:
    """Which of `ids` are tasks of `sources` (a jsonb array: psycopg adapts long text arrays slowly)."""
    params = {"ids": Store.jsonb(list(ids)), "sources": list(sources)}
    return cast(list[IdRow], await Store.fetch(conn, "tasks_present", params))


async def inserted_rows(cursor: AsyncCursor[Row]) -> list[InsertedRow]:
    """runs_insert's rows, from its cursor once the claim's transaction has committed."""
    return cast(list[InsertedRow], await cursor.fetchall())
