"""Manual runs: `trigger` queues one now (the schedule untouched), `cancel` drops one still queued, and the
state of a run as `--wait` follows it. Each action is one transaction with its audit row."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from reconciler.db import command_queries, operator_queries
from reconciler.db.command_queries import RunRow, TaskGetRow
from reconciler.db.operator_queries import PauseRow
from reconciler.db.store import Store
from reconciler.errors import UserError
from reconciler.operate.audit import Operator, record


@dataclass(frozen=True)
class Triggered:
    """A manual run queued: its id, its task's row, the pause in force (a manual run runs anyway) and the
    database's clock when it was queued."""

    run_id: int
    task: TaskGetRow
    pause: PauseRow | None
    now: datetime


async def trigger(store: Store, task_id: str, operator: Operator, traceparent: str | None = None) -> Triggered:
    """Queue a manual run of `task_id` now, in the trace of `traceparent` (a valid W3C one) when given; an unknown
    task is a UserError."""
    async with store.transaction() as conn:
        found = await command_queries.task_get(conn, id=task_id)
        if not found:
            raise UserError(f"unknown task {task_id!r}; see `reconciler status` for the ids")
        [row] = await command_queries.run_queue_manual(conn, task_id=task_id, now=None, traceparent=traceparent)
        await record(conn, operator, "trigger", found[0]["source"], [task_id], {"run_id": row["id"]})
        await Store.notify(conn, json.dumps({"source": "trigger", "count": 1, "ids": [task_id]}))
        pause = (await operator_queries.pauses_readable(conn, ids=[task_id])).get(task_id)
        [clock] = await command_queries.clock_now(conn, now=None)
    return Triggered(row["id"], found[0], pause, clock["now"])


@dataclass(frozen=True)
class Cancelled:
    """A queued manual run cancelled (recorded skipped, who cancelled it in its error)."""

    run_id: int
    task_id: str


async def cancel(store: Store, run_id: int, operator: Operator) -> Cancelled:
    """Cancel a queued manual run; a run that is not queued (or not there) is a UserError saying why."""
    async with store.transaction() as conn:
        reason = f"cancelled by {operator.actor} with `reconciler cancel` before it started"
        reason += f": {operator.reason}" if operator.reason else ""
        done = await command_queries.run_cancel(conn, run_id=run_id, now=None, error=reason)
        if done:
            task_id = done[0]["task_id"]
            task = await command_queries.task_get(conn, id=task_id)  # a deleted task's run has no source
            source = task[0]["source"] if task else None
            await record(conn, operator, "cancel", source, [task_id], {"run_id": run_id})
            return Cancelled(run_id, task_id)
        found = await command_queries.run_get(conn, run_id=run_id)
    if not found:
        raise UserError(f"no run {run_id}; `reconciler runs` lists them")
    status = found[0]["status"]
    raise UserError(
        f"run {run_id} is {status}, not queued: only a queued manual run can be cancelled"
        + ("; a running one ends by its timeout_seconds" if status == "running" else "")
    )


async def run_state(store: Store, run_id: int) -> RunRow:
    """A run as it stands; a UserError once it is gone from the history."""
    async with store.connection() as conn:
        found = await command_queries.run_get(conn, run_id=run_id)
    if not found:
        raise UserError(f"run {run_id} is gone from the history (pruned or its task deleted)")
    return found[0]
