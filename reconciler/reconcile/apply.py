"""The verdict on a plan, and its execution: one transaction under pg_advisory_xact_lock and,
unless nothing changes, one row in scheduler.applies and one NOTIFY on commit.

`plan` and `apply` reach their verdict through the same function (`judge`), so a plan that
passes is one that `apply` with the same options carries out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from reconciler.db import apply_queries, operator_queries
from reconciler.db.command_queries import database_now
from reconciler.db.rows import Conn, TaskRow
from reconciler.db.store import Store
from reconciler.db.task_writes import TaskValues, TaskWrites
from reconciler.errors import UserError
from reconciler.files.kinds import Named
from reconciler.files.tasks import LoadResult, Stored, Task, read_files
from reconciler.notify.events import stateful
from reconciler.operate.audit import Operator, record, whoami
from reconciler.reconcile import revision
from reconciler.reconcile.declared import stored_rows, write_changes
from reconciler.reconcile.limit_rates import limit_warnings
from reconciler.reconcile.plan import Change, Plan, attach_declared, make_plan
from reconciler.reconcile.revision import LiveRevision, Revision

NOTIFY_IDS_CAP = 100


@dataclass(frozen=True)
class ApplyOptions:
    prune: bool = True
    allow_empty: bool = False
    max_deletes: int | None = None  # None: 25 % of this source's tasks (at least 1)
    expect_state: str | None = None  # a saved plan's state fingerprint
    expect_files: str | None = None  # a saved plan's files fingerprint
    allow_older: bool = False  # apply a checkout that git says is behind the live revision
    checkout: Path | None = None  # the tasks directory, for git; None: no revision check
    revision: Revision = field(default_factory=lambda: Revision(None))
    dirty_refusal: str | None = None  # uncommitted changes on CI without --allow-dirty (revision.dirty_verdict)
    operator: Operator = field(default_factory=lambda: Operator(whoami()))  # who applies, for the audit log


class PlanRefused(UserError):
    """The apply was refused by a rail or a stale saved plan; nothing was written."""


DELETES_SHOWN = 20  # ids named in a --max-deletes refusal


def rail_refusals(plan: Plan, rows: list[TaskRow], options: ApplyOptions) -> list[str]:
    """Why the prune rails and saved-plan checks refuse this plan (empty: they do not)."""
    out = [str(c) for c in plan.conflicts]
    if options.expect_files is not None and options.expect_files != plan.files_fingerprint:
        out.append("the saved plan is stale: task files changed since it was made; run plan again")
    if options.expect_state is not None and options.expect_state != plan.state_fingerprint:
        out.append("the saved plan is stale: the database changed since it was made; run plan again")
    owned = sum(1 for r in rows if r.source == plan.source)
    deletes = [c.id for c in plan.changes if c.op == "delete"]
    if not deletes:
        return out
    remaining = sum(1 for c in plan.changes if c.op != "delete")
    if remaining == 0 and not options.allow_empty:
        out.append(
            f"this apply would delete every task of source {plan.source!r} ({len(deletes)}); "
            "pass --allow-empty if that is intended"
        )
        return out
    limit = options.max_deletes if options.max_deletes is not None else max(1, math.floor(owned * 0.25))
    if len(deletes) > limit and not (remaining == 0 and options.allow_empty):
        named = ", ".join(deletes[:DELETES_SHOWN])
        if len(deletes) > DELETES_SHOWN:
            named += f" and {len(deletes) - DELETES_SHOWN} more"
        out.append(
            f"this apply would delete {len(deletes)} tasks, more than --max-deletes {limit}: "
            f"{named}; raise --max-deletes or use --no-prune"
        )
    return out


async def live_revision(conn: Conn, source: str) -> LiveRevision | None:
    found = await apply_queries.applies_live(conn, source=source)
    return LiveRevision(found[0]["revision"], found[0]["applied_at"]) if found else None


def judge(plan: Plan, rows: list[TaskRow], live: LiveRevision | None, options: ApplyOptions) -> Plan:
    """Fill in the plan's verdict: every reason `apply` with `options` refuses it, and its warnings."""
    plan.live = live
    plan.refused = rail_refusals(plan, rows, options)
    plan.refused += [options.dirty_refusal] if options.dirty_refusal else []
    if options.checkout is not None:
        refusal, warning = revision.verdict(options.checkout, live, options.allow_older)
        plan.refused += [refusal] if refusal else []
        plan.warnings += [warning] if warning else []
    return plan


def _values(task: Task, next_run_at: datetime | None) -> TaskValues:
    return TaskValues(
        id=task.id,
        spec=task.canonical,
        spec_hash=task.spec_hash,
        calendars=json.dumps(task.calendars, sort_keys=True) if task.calendars is not None else None,
        enabled=task.enabled,
        timezone=task.timezone,
        next_run_at=next_run_at,
        digest=task.digest,
    )


def keeps_next_run(change: Change) -> bool:
    """An update or move that leaves the schedule (and the enabled state) as it was: its row keeps the
    next_run_at it has when written, which an engine may have advanced since the plan read it."""
    return change.row is not None and change.task is not None and change.task.enabled and not change.retime


def next_run_for(change: Change, now: datetime) -> datetime | None:
    """A created or retimed task's next run from `now`; NULL while disabled (unused when the row keeps its own)."""
    task = change.task
    assert task is not None
    if not task.enabled or keeps_next_run(change):
        return None
    return task.schedule.next_fire_time(now)


def add_writes(writes: TaskWrites, change: Change, source: str, now: datetime) -> None:
    """One change's rows into the writes of its phase."""
    if change.op == "delete":
        writes.delete(change.id)
        return
    assert change.task is not None
    values = _values(change.task, next_run_for(change, now))
    if change.op == "create":
        writes.create(values, source)
        return
    assert change.row is not None
    writes.update(values, change.row.id, keeps_next_run(change))
    if change.op == "move":
        writes.move_history(change.id, change.row.id)


async def write_changes_of_tasks(
    conn: Conn, changes: list[Change], source: str, now: datetime, rev: str | None
) -> None:
    """All writes of a plan, batched per statement (executemany pipelines them; many creates are copied)."""
    # Deletes first: a moved or re-created id may reuse a freed primary key.
    for phase in ("delete", "update", "move", "create"):
        writes = TaskWrites(now, rev)
        for change in changes:
            if change.op == phase:
                add_writes(writes, change, source, now)
        await writes.flush(conn)


def state_resets(changes: list[Change]) -> list[str]:
    """Tasks whose notification state (notify_state) starts afresh: deleted, created or moved (their ids,
    old and new), or with other failure/recovery/lost subscribers, so a `recovery` is never sent to
    someone who heard of no failure."""
    ids: list[str] = []
    for change in changes:
        if change.op in ("delete", "create", "move"):
            ids += [change.id, *([change.row.id] if change.row is not None else [])]
        elif (
            change.op == "update"
            and change.row is not None
            and change.task is not None
            and stateful(change.row.spec) != stateful(change.task.normalized)
        ):
            ids.append(change.id)
    return ids


async def seal_unchanged(conn: Conn, changes: list[Change]) -> None:
    """Store the file digest on rows found equal to their parsed file, so the next plan need not parse it."""
    found = {
        c.id: c.task.digest
        for c in changes
        if c.op == "noop"
        and c.task is not None
        and c.task.stored is None  # one that stood on its row is sealed already
        and c.task.digest is not None
        and c.row is not None
        and c.row.spec_hash == c.task.spec_hash  # then the row's spec is the file's: what a stand-in reads
    }
    if found:
        await apply_queries.tasks_seal(conn, digests=found)


@dataclass
class ApplyResult:
    plan: Plan
    written: int


async def lock_retimed(conn: Conn, writes: list[Change]) -> None:
    """Lock the rows whose next_run_at this apply computes, so that an engine's claim of one
    (which locks and advances it) commits first, and the retime comes after it."""
    ids = sorted(c.row.id for c in writes if c.row is not None and c.task is not None and c.task.enabled and c.retime)
    if ids:
        await apply_queries.tasks_lock(conn, ids=ids)


async def apply_tasks(
    store: Store,
    tasks: list[Task],
    source: str,
    now: datetime | None = None,
    options: ApplyOptions = ApplyOptions(),
    declared: Sequence[Named[Any]] = (),
) -> ApplyResult:
    """Plan against the locked current state and write the diff in one transaction: the tasks, and the source's
    items of each declared kind in `declared` (its directory loaded; a kind not there is left as it is).

    `now` is the database's clock unless given (tests and replays): engines on other machines
    advance the same rows, so the applying machine's clock must not decide what "from now" is."""
    async with store.transaction() as conn:
        result = await _apply_locked(conn, tasks, source, now, options, declared)
    # after the transaction: a warning for people costs the apply no locked time
    result.plan.warnings += limit_warnings(result.plan, declared)
    return result


async def _apply_locked(
    conn: Conn,
    tasks: list[Task],
    source: str,
    now: datetime | None,
    options: ApplyOptions,
    declared: Sequence[Named[Any]],
) -> ApplyResult:
    """apply_tasks in its transaction."""
    await Store.lock_apply(conn)
    rows = await Store.tasks(conn)
    plan = make_plan(tasks, rows, source, now or await database_now(conn), prune=options.prune)
    for loaded in declared:
        attach_declared(plan, loaded, await stored_rows(conn, loaded.kind), tasks, rows)
    judge(plan, rows, await live_revision(conn, source), options)
    plan.paused = await paused_of(conn, rows, source)
    if plan.refused:
        raise PlanRefused("; ".join(plan.refused))
    if not plan.has_changes:
        # Not even the audit row: `watch` and `up` apply on every save, and a row per save would
        # bury the applies that changed something (and bump the live revision to a no-op's).
        return ApplyResult(plan, 0)
    writes = [c for c in plan.changes if c.writes]
    await lock_retimed(conn, writes)
    if now is None:  # read after the row locks: a claim that held one committed before this instant
        now = await database_now(conn)
        for change in writes:
            change.preview_from = now if change.preview_from else None
    # The kinds the tasks name first (the registry's order): a task is written after everything it names; but a
    # kind that says so (`after_tasks`: limits) comes after the tasks. One transaction: nobody sees a task naming
    # an item before the item.
    for found in plan.declared:
        if not found.kind.after_tasks:
            await write_changes(conn, found.kind, found.changes, source)
    await write_changes_of_tasks(conn, writes, source, now, options.revision.revision)
    if resets := state_resets(writes):
        await apply_queries.notify_state_reset(conn, ids=resets)
    await record_apply(conn, plan, now, options.revision, options.operator)
    if writes:
        # Unchanged rows without their file's digest (an older reconciler wrote them, or the
        # parser changed) get it only from an apply that writes tasks anyway: one that changes only
        # notifiers leaves every task row (its xmin) as it was.
        await seal_unchanged(conn, plan.changes)
        ids = [c.id for c in writes]
        payload = {"source": source, "count": len(ids), "ids": ids[:NOTIFY_IDS_CAP]}
        await Store.notify(conn, json.dumps(payload))
    for found in plan.declared:
        if found.kind.after_tasks:
            await write_changes(conn, found.kind, found.changes, source)
    return ApplyResult(plan, len(writes) + sum(len(found.changes) for found in plan.declared))


async def paused_of(conn: Conn, rows: list[TaskRow], source: str) -> list[operator_queries.PauseRow]:
    """The pauses in force of the source's tasks (none where this role may not read them)."""
    owned = [row.id for row in rows if row.source == source]
    pauses = await operator_queries.pauses_readable(conn, ids=owned) if owned else {}
    return list(pauses.values())


async def record_apply(conn: Conn, plan: Plan, now: datetime, rev: Revision, operator: Operator) -> None:
    """One scheduler.applies row: what was applied, from where, and each written id's op; and the apply's
    row of the audit log (who applied it, and why)."""
    changes: dict[str, str] = {}
    for change in plan.changes:
        if change.writes:
            changes[change.id] = change.op
            if change.moved_from:
                changes[change.moved_from] = change.op
    summary = {k: v for k, v in plan.summary.items() if k != "noop"}
    params: dict[str, Any] = {
        "source": plan.source,
        "revision": rev.revision,
        "author": rev.author,
        "message": rev.message,
        "reference": rev.reference,
        "now": now,
        "counts": Store.jsonb(summary),
        "changes": Store.jsonb(changes),
        "plan_digest": plan.digest,
    }
    applied = await apply_queries.applies_insert(conn, **params)
    details: dict[str, Any] = {"apply_id": applied, "revision": rev.revision, "counts": summary}
    details["plan_digest"] = plan.digest
    for found in plan.changed_kinds:  # {"limits": {"billing-api": "create"}}
        details[f"{found.kind.name}s"] = {change.name: change.op for change in found.changes}
    await record(conn, operator, "apply", plan.source, list(changes), details)


async def load_files(store: Store, tasks_dir: Path, display_root: str | None = None) -> LoadResult:
    """load_dir, parsing only the files changed since they were applied: the others stand on their rows.

    Read-only. A database without the schema, or without file_digest (an older reconciler's),
    has no such rows: every file is parsed.
    """
    files = read_files(tasks_dir, display_root)
    params = {"digests": Store.jsonb(files.digests())}
    async with store.connection() as conn:
        sealed = "file_digest" in (await store.existing(conn)).columns.get("tasks", ())
        found = await apply_queries.tasks_unchanged(conn, **params) if sealed else []
    known = {
        row["id"]: Stored(row["digest"], row["spec_hash"], row["enabled"], row["timezone"], row["moved_from"])
        for row in found
    }
    return files.load(known)


async def read_plan(
    store: Store,
    tasks: list[Task],
    source: str,
    now: datetime,
    options: ApplyOptions = ApplyOptions(),
    declared: Sequence[Named[Any]] = (),
) -> Plan:
    """A read-only plan with apply's verdict: no lock, no DDL, no rows written.

    A database without the schema (or without scheduler.applies yet) is read as empty.
    """
    async with store.connection() as conn:
        have = await store.existing(conn)
        tables = have.columns
        rows = await Store.tasks(conn) if "tasks" in tables else []
        live = await live_revision(conn, source) if "applies" in tables else None
        stored = [await stored_rows(conn, loaded.kind) if loaded.kind.table in tables else [] for loaded in declared]
        paused = await paused_of(conn, rows, source) if "pauses" in tables else []
    plan = make_plan(tasks, rows, source, now, prune=options.prune)
    plan.paused = paused
    for loaded, found in zip(declared, stored, strict=True):
        attach_declared(plan, loaded, found, tasks, rows)
    plan = judge(plan, rows, live, options)
    plan.warnings += limit_warnings(plan, declared)
    if "tasks" not in tables:
        plan.schema_missing = True
        plan.warnings.append("the database has no scheduler schema yet: apply will create it")
    return plan
