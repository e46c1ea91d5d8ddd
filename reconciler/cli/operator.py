"""The operator's emergency stop and its record: pause, resume, audit.

`pause` and `resume` act on tasks at runtime (scheduler.pauses, never git); every operator action
(apply, trigger, cancel, pause, resume, backfill) writes a row of scheduler.audit, which `audit` lists.
Each is a typed function of its options returning an exit code; what talks to the database is imported inside it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

from reconciler.cli.console import err
from reconciler.cli.options import ReadOptions, SelectionOptions
from reconciler.clock import utc_text
from reconciler.errors import EXIT_ERROR, EXIT_OK, UserError

if TYPE_CHECKING:
    from reconciler.db.operator_queries import AuditRow
    from reconciler.db.store import Store
    from reconciler.operate.pauses import Outcome, Selection


def selection_of(options: SelectionOptions) -> Selection:
    """IDs, or `--source S` (every task of it); with both, the ids must be of that source."""
    from reconciler.operate.pauses import Selection

    return Selection(options.ids, options.source)


def _until(moment: datetime | None) -> str:
    return f"until {utc_text(moment)}" if moment else "until `reconciler resume`"


def pause(options: SelectionOptions) -> int:
    """Pause tasks: engines claim nothing of them; their occurrences are recorded skipped with who and why."""
    from reconciler.cli.runtime import with_store
    from reconciler.operate.audit import Operator
    from reconciler.operate.pauses import pause_tasks
    from reconciler.output import text as render
    from reconciler.spec.values import parse_instant

    if options.operator.reason is None:
        raise UserError("pause: --reason is required: say why, for whoever finds the task paused")
    operator = Operator.resolve(options.operator.actor, options.operator.reason)
    until = parse_instant(options.until, "--until") if options.until else None
    selection = selection_of(options)

    async def work(store: Store) -> Outcome:
        return await pause_tasks(store, selection, operator, until)

    outcome = with_store(options.database, work)
    for task_id in outcome.done:
        before = outcome.before.get(task_id)
        was = f" (was paused by {before['paused_by']}: {before['paused_reason']})" if before else ""
        print(render.safe(f"paused {task_id}{was}"))
    print(
        render.safe(
            f"{len(outcome.done)} task(s) paused by {operator.actor} {_until(until)}: {operator.reason}; "
            "their occurrences are recorded skipped, runs already running go on, manual runs still run "
            f"(audit #{outcome.audit_id})"
        )
    )
    return EXIT_OK


def resume(options: SelectionOptions) -> int:
    """End pauses: the tasks fire again from now; what fell due while paused is not caught up.
    Exit 1 when a task named is not paused (as `kubectl rollout resume`), after resuming the others."""
    from reconciler.cli.runtime import with_store
    from reconciler.operate.audit import Operator
    from reconciler.operate.pauses import resume_tasks
    from reconciler.output import text as render

    operator = Operator.resolve(options.operator.actor, options.operator.reason)
    selection = selection_of(options)

    async def work(store: Store) -> Outcome:
        return await resume_tasks(store, selection, operator)

    outcome = with_store(options.database, work)
    for task_id in outcome.done:
        before = outcome.before[task_id]
        problem = outcome.unschedulable.get(task_id)
        then = (
            f"its stored spec no longer validates ({problem}); `reconciler apply` restores it"
            if problem
            else f"next run {utc_text(outcome.next_runs.get(task_id))}"
        )
        print(render.safe(f"resumed {task_id} (paused by {before['paused_by']}: {before['paused_reason']}); {then}"))
    for task_id in outcome.ended:
        print(render.safe(f"{task_id}: its pause had already ended (--until); cleared"))
    if outcome.audit_id is None:  # nothing was paused: nothing written, not even the audit row
        verb = " is not" if len(outcome.not_paused) == 1 else " are not"
        named = ", ".join(outcome.not_paused) + verb if outcome.not_paused else f"no task of {selection.describe()} is"
        raise UserError(render.safe(f"{named} paused; nothing to resume (`reconciler status` shows pauses)"))
    print(f"{len(outcome.done)} task(s) resumed from now; paused time is not caught up (audit #{outcome.audit_id})")
    for task_id in outcome.not_paused:
        err(render.safe(f"error: {task_id} is not paused"))
    return EXIT_ERROR if outcome.not_paused else EXIT_OK


def audit(options: ReadOptions) -> int:
    """Every operator action, newest first: who (actor), what (action, tasks), when, why (reason)."""
    from reconciler.cli.runtime import with_store
    from reconciler.db import command_queries, operator_queries
    from reconciler.output import text as render

    task_id = options.id

    async def work(store: Store) -> tuple[list[AuditRow], bool]:
        async with store.reading() as conn:
            rows = await operator_queries.audit_list(conn, task_id=task_id, limit=options.limit)
            known = bool(rows) or task_id is None or bool(await command_queries.task_get(conn, id=task_id))
        return rows, known

    rows, known = with_store(options.database, work)
    if not known:
        raise UserError(f"unknown task {task_id!r}: no such task and no action on it recorded; see `reconciler status`")
    if options.output.format == "json":
        print(json.dumps(render.json_rows(rows), indent=2, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print("no operator actions recorded" + (f" on {render.safe(task_id)}" if task_id else ""))
        return EXIT_OK
    print("\n".join(render.audit_line(row) for row in rows))
    return EXIT_OK
