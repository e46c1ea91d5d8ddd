"""The operator's emergency stop and its record: pause, resume, audit.

`pause` and `resume` act on tasks at runtime (scheduler.pauses, never git); every operator action
(apply, trigger, cancel, pause, resume) writes a row of scheduler.audit, which `audit` lists.
Each function takes parsed arguments and returns an exit code.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from reconciler.cli.console import err
from reconciler.cli.options import DatabaseOptions, parse_instant
from reconciler.cli.runtime import with_store
from reconciler.clock import utc_text
from reconciler.db import command_queries, operator_queries
from reconciler.db.operator_queries import AuditRow
from reconciler.db.store import Store
from reconciler.errors import EXIT_ERROR, EXIT_OK, UserError
from reconciler.operate.audit import Operator
from reconciler.operate.pauses import Outcome, Selection, pause_tasks, resume_tasks
from reconciler.output import text as render


def selection_of(args: argparse.Namespace) -> Selection:
    """IDs, or `--source S` (every task of it); with both, the ids must be of that source."""
    return Selection(tuple(args.ids), args.sources[0] if args.sources else None)


def _until(moment: datetime | None) -> str:
    return f"until {utc_text(moment)}" if moment else "until `reconciler resume`"


def cmd_pause(args: argparse.Namespace) -> int:
    """Pause tasks: engines claim nothing of them; their occurrences are recorded skipped with who and why."""
    if args.reason is None:
        raise UserError("pause: --reason is required: say why, for whoever finds the task paused")
    operator = Operator.resolve(args.actor, args.reason)
    until = parse_instant(args.until, "--until") if args.until else None
    selection = selection_of(args)

    async def work(store: Store) -> Outcome:
        return await pause_tasks(store, selection, operator, until)

    outcome = with_store(DatabaseOptions.of(args), work)
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


def cmd_resume(args: argparse.Namespace) -> int:
    """End pauses: the tasks fire again from now; what fell due while paused is not caught up.
    Exit 1 when a task named is not paused (as `kubectl rollout resume`), after resuming the others."""
    operator = Operator.resolve(args.actor, args.reason)
    selection = selection_of(args)

    async def work(store: Store) -> Outcome:
        return await resume_tasks(store, selection, operator)

    outcome = with_store(DatabaseOptions.of(args), work)
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


def cmd_audit(args: argparse.Namespace) -> int:
    """Every operator action, newest first: who (actor), what (action, tasks), when, why (reason)."""

    async def work(store: Store) -> tuple[list[AuditRow], bool]:
        async with store.reading() as conn:
            rows = await operator_queries.audit_list(conn, task_id=args.id, limit=args.limit)
            known = bool(rows) or args.id is None or bool(await command_queries.task_get(conn, id=args.id))
        return rows, known

    rows, known = with_store(DatabaseOptions.of(args), work)
    if not known:
        raise UserError(f"unknown task {args.id!r}: no such task and no action on it recorded; see `reconciler status`")
    if args.format == "json":
        print(json.dumps(render.json_rows(rows), indent=2, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print("no operator actions recorded" + (f" on {render.safe(args.id)}" if args.id else ""))
        return EXIT_OK
    print("\n".join(render.audit_line(row) for row in rows))
    return EXIT_OK
