"""Execute a plan: one transaction under pg_advisory_xact_lock, one NOTIFY on commit."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reconciler.errors import UserError
from reconciler.loader import Task
from reconciler.plan import Change, Plan, make_plan
from reconciler.store import Conn, Store, TaskRow

NOTIFY_IDS_CAP = 100


@dataclass(frozen=True)
class ApplyOptions:
    prune: bool = True
    allow_empty: bool = False
    max_deletes: int | None = None  # None: 25 % of this source's tasks (at least 1)
    expect_state: str | None = None  # a saved plan's state fingerprint
    expect_files: str | None = None  # a saved plan's files fingerprint


class PlanRefused(UserError):
    """The apply was refused by a rail or a stale saved plan; nothing was written."""


def check_rails(plan: Plan, rows: list[TaskRow], options: ApplyOptions) -> None:
    """The prune rails and the saved-plan checks; raise PlanRefused before any write."""
    if plan.conflicts:
        raise PlanRefused("; ".join(str(c) for c in plan.conflicts))
    if options.expect_files is not None and options.expect_files != plan.files_fingerprint:
        raise PlanRefused("the saved plan is stale: task files changed since it was made; run plan again")
    if options.expect_state is not None and options.expect_state != plan.state_fingerprint:
        raise PlanRefused("the saved plan is stale: the database changed since it was made; run plan again")
    owned = sum(1 for r in rows if r.source == plan.source)
    deletes = [c.id for c in plan.changes if c.op == "delete"]
    if not deletes:
        return
    remaining = sum(1 for c in plan.changes if c.op != "delete")
    if remaining == 0 and not options.allow_empty:
        raise PlanRefused(
            f"this apply would delete every task of source {plan.source!r} ({len(deletes)}); "
            "pass --allow-empty if that is intended"
        )
    limit = options.max_deletes if options.max_deletes is not None else max(1, math.floor(owned * 0.25))
    if len(deletes) > limit and not (remaining == 0 and options.allow_empty):
        raise PlanRefused(
            f"this apply would delete {len(deletes)} tasks, more than --max-deletes {limit}: "
            f"{', '.join(deletes)}; raise --max-deletes or use --no-prune"
        )


def _row_values(task: Task, next_run_at: datetime | None, now: datetime) -> dict[str, Any]:
    spec = task.normalized
    return {
        "id": task.id,
        "spec": Store.jsonb(spec),
        "spec_hash": task.spec_hash,
        "enabled": task.spec.enabled,
        "timezone": task.spec.timezone,
        "next_run_at": next_run_at,
        "now": now,
    }


def next_run_for(change: Change, now: datetime) -> datetime | None:
    """Keep next_run_at unless the schedule moved (or the task was re-enabled); NULL while disabled."""
    task = change.task
    assert task is not None
    if not task.spec.enabled:
        return None
    if change.retime or change.row is None:
        return task.schedule.next_fire_time(now)
    return change.row.next_run_at


def statements_for(change: Change, source: str, now: datetime) -> list[tuple[str, dict[str, Any]]]:
    """One change as (query name, parameters) pairs."""
    if change.op == "delete":
        return [("task_delete", {"id": change.id})]
    assert change.task is not None
    values = _row_values(change.task, next_run_for(change, now), now)
    if change.op == "create":
        return [("task_insert", {**values, "source": source})]
    assert change.row is not None
    out = [("task_update", {**values, "old_id": change.row.id})]
    if change.op == "move":
        ids = {"id": change.id, "old_id": change.row.id}
        out += [("runs_move", ids), ("leases_move", ids)]
    return out


async def write_changes(conn: Conn, changes: list[Change], source: str, now: datetime) -> None:
    """All writes of a plan, batched per statement (executemany pipelines them)."""
    # Deletes first: a moved or re-created id may reuse a freed primary key.
    for phase in ("delete", "update", "move", "create"):
        batches: dict[str, list[dict[str, Any]]] = {}
        for change in changes:
            if change.op == phase:
                for name, params in statements_for(change, source, now):
                    batches.setdefault(name, []).append(params)
        for name, params_list in batches.items():
            await Store.execute_many(conn, name, params_list)


@dataclass
class ApplyResult:
    plan: Plan
    written: int


async def apply_tasks(
    store: Store, tasks: list[Task], source: str, now: datetime, options: ApplyOptions = ApplyOptions()
) -> ApplyResult:
    """Plan against the locked current state and write the diff in one transaction."""
    async with store.transaction() as conn:
        await Store.lock_apply(conn)
        rows = await Store.tasks(conn)
        plan = make_plan(tasks, rows, source, now, prune=options.prune)
        check_rails(plan, rows, options)
        writes = [c for c in plan.changes if c.writes]
        await write_changes(conn, writes, source, now)
        if writes:
            ids = [c.id for c in writes]
            payload = {"source": source, "count": len(ids), "ids": ids[:NOTIFY_IDS_CAP]}
            await Store.notify(conn, json.dumps(payload))
    return ApplyResult(plan, len(writes))


async def read_plan(store: Store, tasks: list[Task], source: str, now: datetime, prune: bool = True) -> Plan:
    """A read-only plan (no lock: plans never write)."""
    async with store.connection() as conn:
        rows = await Store.tasks(conn)
    return make_plan(tasks, rows, source, now, prune=prune)
