"""The commands on the database's state: db, status, history, runs, notifications, trigger, cancel, explain, down.

Each is a typed function of its options returning an exit code. This module is imported with the parser: what
talks to the database is imported inside the function that uses it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from datetime import datetime
from typing import TYPE_CHECKING

from reconciler.cli.options import (
    CancelOptions,
    DatabaseOptions,
    DbOptions,
    ExplainOptions,
    ReadOptions,
    TriggerOptions,
)
from reconciler.clock import utc_text
from reconciler.errors import EXIT_ERROR, EXIT_OK, UserError
from reconciler.runs import FINAL

if TYPE_CHECKING:
    from reconciler.db.command_queries import ApplyRow, EngineRow, LiveSourceRow, OutboxRow, StatusRow
    from reconciler.db.initialize import Initialized
    from reconciler.db.operator_queries import PauseRow
    from reconciler.db.rows import Row
    from reconciler.db.store import Store

WAIT_POLL_SECONDS = 0.5
QUEUED_HINT_SECONDS = 10.0


def db(options: DbOptions) -> int:
    """`db init` creates or upgrades the schema; `db grants` prints what each role needs (no database)."""
    from reconciler.cli.runtime import with_store
    from reconciler.db.grants import grants_sql

    if options.action == "grants":
        if not any(options.roles):
            raise UserError(
                "db grants: name at least one of --role-planner, --role-applier, --role-engine, --role-dashboard"
            )
        print(grants_sql(*options.roles), end="")
        return EXIT_OK

    done = with_store(options.database, lambda store: _initialize(store, options), init=False)
    for converted in done.converted:
        print(
            f"converted scheduler.{converted.table} to partitions in {converted.seconds:.1f} s: its "
            f"{converted.rows} row(s) are partition {converted.partition}; the table was locked "
            f"{converted.locked_seconds * 1000:.0f} ms"
        )
    work = done.maintenance
    if work.created:
        print(f"created partition(s): {', '.join(work.created)}")
    if work.dropped:
        print(f"dropped partition(s) older than {options.keep_runs_days:g} day(s): {', '.join(work.dropped)}")
    if work.kept:
        print(f"kept partition(s) holding runs in flight or finished since the cut-off: {', '.join(work.kept)}")
    if work.busy:
        print(f"partition(s) busy (locked), left for the next run: {', '.join(work.busy)}")
    if not done.maintained:
        print("this role may not create partitions: run it as the owner of schema scheduler's tables")
    print("schema scheduler is up to date")
    return EXIT_OK


async def _initialize(store: Store, options: DbOptions) -> Initialized:
    from reconciler.db.initialize import database_now, initialize, maintain

    done = await initialize(store, say=print)
    if options.action == "maintain":
        await maintain(store, await database_now(store), options.keep_runs_days, done)
    return done


def status(options: ReadOptions) -> int:
    """Every task with its next and last run, pauses and drift; the live engines and revisions."""
    from reconciler.cli.runtime import with_store
    from reconciler.db import command_queries, operator_queries
    from reconciler.db.embedded import database_label
    from reconciler.output import text as render
    from reconciler.output import views

    database = options.database

    async def work(
        store: Store,
    ) -> tuple[list[StatusRow], list[EngineRow], list[LiveSourceRow], datetime, dict[str, PauseRow]]:
        async with store.reading() as conn:
            rows = await command_queries.status_rows(conn)
            engines = await command_queries.engines_live(conn, seconds=float(views.ENGINE_LIVE_SECONDS))
            live = await command_queries.applies_live_sources(conn)
            [clock] = await command_queries.clock_now(conn, now=None)  # overdue by the database's clock
            pauses = await operator_queries.pauses_readable(conn, ids=None)
        return rows, engines, live, clock["now"], pauses

    rows, engines, revisions, now, pauses = with_store(database, work)

    machine = options.output.format == "json"
    items = [views.status_item(row, pauses, now, machine) for row in rows]
    live = [views.engine_item(e) for e in engines]
    applied = [
        {"source": r["source"], "revision": r["revision"], "applied_at": r["applied_at"], "author": r["author"]}
        for r in revisions
    ]
    if machine:
        data = {
            "database": database_label(database.dsn, database.home),
            "tasks": [views.json_task(task) for task in items],
            "engines": render.json_rows(live),
            "live_revisions": render.json_rows(applied),
        }
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(render.safe(f"database: {database_label(database.dsn, database.home)}"))
    print(render.status_text(items, live, applied))  # ids, hosts and revisions may come from anywhere: escaped there
    return EXIT_OK


def history(options: ReadOptions) -> int:
    """The applies, newest first (only those that changed ID, when given)."""
    from reconciler.cli.runtime import with_store
    from reconciler.db import command_queries
    from reconciler.output import text as render

    async def work(store: Store) -> list[ApplyRow]:
        async with store.reading() as conn:
            return await command_queries.applies_list(conn, source=None, task_id=options.id, limit=options.limit)

    rows = with_store(options.database, work)
    if options.output.format == "json":
        print(json.dumps(render.json_rows(rows), indent=2, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print("no applies recorded" + (f" that changed {options.id}" if options.id else ""))
    print("\n".join(render.history_line(row) for row in rows))
    return EXIT_OK


def trigger(options: TriggerOptions) -> int:
    """Queue a manual run; with --wait, follow it to its end (exit 0 if it succeeded, else 1)."""
    from reconciler.cli.runtime import with_store
    from reconciler.operate import runs as manual
    from reconciler.operate.audit import Operator
    from reconciler.output import views
    from reconciler.output.text import safe

    operator = Operator.resolve(options.operator.actor, options.operator.reason)

    async def work(store: Store) -> int:
        done = await manual.trigger(store, options.id, operator, options.traceparent)
        print(
            f"queued manual run {done.run_id} of {safe(options.id)}; the schedule is unchanged; "
            f"it waits for a free slot (`reconciler cancel {done.run_id}` while queued)",
            flush=True,
        )
        if done.pause is not None:  # an explicit operator action: a pause holds the schedule, not manual runs
            paused = f"{done.pause['paused_by']}: {done.pause['reason']}"
            print(safe(f"note: {options.id} is paused ({paused}); a manual run runs anyway"))
        holding = views.blackout_holding(done.task, done.now)
        if holding is not None:  # a blackout holds the schedule, not manual runs
            print(safe(f"note: blackout {holding} holds now; a manual run runs anyway"))
        if not options.wait:
            return EXIT_OK
        return await follow_run(store, done.run_id)

    return with_store(options.database, work)


async def follow_run(store: Store, run_id: int) -> int:
    """Poll one run until it ends; print each change of status and the result."""
    from reconciler.operate.runs import run_state
    from reconciler.output.masking import mask_text
    from reconciler.output.text import safe

    shown = "queued"
    hint_at = time.monotonic() + QUEUED_HINT_SECONDS
    while True:
        run = await run_state(store, run_id)
        if run["status"] != shown and run["status"] not in FINAL:
            shown = run["status"]
            print(f"run {run_id}: {shown} on engine {safe(run['engine_id'] or '-')}", flush=True)
        if run["status"] in FINAL:
            break
        if run["status"] == "queued" and time.monotonic() > hint_at:
            hint_at = math.inf
            print(
                f"run {run_id}: still queued after {QUEUED_HINT_SECONDS:g} s: it waits for a free slot and an engine "
                "of its source (`reconciler status` lists live engines); Ctrl-C stops waiting, not the run",
                flush=True,
            )
        await asyncio.sleep(WAIT_POLL_SECONDS)
    detail = mask_text(run["error"]) if run["error"] else f"HTTP {run['http_status']}"
    print(safe(f"run {run_id}: {run['status']} ({detail}, attempt {run['attempt']}, {run['duration_ms'] or 0} ms)"))
    if run["response_excerpt"]:
        print(safe(f"response: {mask_text(run['response_excerpt'])}"))
    from reconciler.output.jobs import job_lines
    from reconciler.output.masking import masked_job

    for line in job_lines(masked_job(run)):
        print(safe(line))
    return EXIT_OK if run["status"] == "succeeded" else EXIT_ERROR


def cancel(options: CancelOptions) -> int:
    """Cancel a queued manual run (recorded `skipped`, with who cancelled it in its error)."""
    from reconciler.cli.runtime import with_store
    from reconciler.operate import runs as manual
    from reconciler.operate.audit import Operator
    from reconciler.output.text import safe

    operator = Operator.resolve(options.operator.actor, options.operator.reason)

    async def work(store: Store) -> int:
        done = await manual.cancel(store, options.run_id, operator)
        print(f"cancelled manual run {done.run_id} of {safe(done.task_id)} (recorded skipped)")
        return EXIT_OK

    return with_store(options.database, work)


def down(options: DatabaseOptions) -> int:
    """Stop the project's embedded PostgreSQL (never a --dsn database)."""
    from reconciler.db.embedded import stop_embedded

    print(stop_embedded(options.home()))
    return EXIT_OK


def explain(options: ExplainOptions) -> int:
    """Why a task did or did not fire around a time (default now)."""
    from reconciler.cli.runtime import with_store
    from reconciler.output import views
    from reconciler.output.masking import mask_text
    from reconciler.output.text import safe
    from reconciler.spec.values import parse_instant

    asked = parse_instant(options.at, "--at") if options.at else None

    async def work(store: Store) -> list[str]:
        async with store.reading() as conn:
            return await views.explain_lines(conn, options.id, asked)

    print("\n".join(safe(mask_text(line)) for line in with_store(options.database, work)))
    return EXIT_OK


def unknown_task(task_id: str | None, history: str) -> UserError:
    return UserError(
        f"unknown task {task_id!r}: no such task and no {history} recorded; see `reconciler status` for the ids"
    )


def nothing_recorded(history: str, status: str | None, task_id: str | None) -> str:
    """`no failed runs of ID recorded yet`: an empty listing, in one line."""
    from reconciler.output.text import safe

    which = f"{status} {history}" if status else history
    of = f" of {safe(task_id)}" if task_id else ""
    return f"no {which}{of} recorded yet"


def runs(options: ReadOptions) -> int:
    """Run history, newest first; an id that names no task and no recorded run is an error."""
    from reconciler.cli.runtime import with_store
    from reconciler.output import views
    from reconciler.output.explain import notified_line
    from reconciler.output.text import runs_text

    async def work(store: Store) -> tuple[list[Row], bool]:
        async with store.reading() as conn:
            rows, known = await views.listing(conn, "runs", options.id, options.status, options.limit)
            return await views.with_notifications(conn, rows), known

    found, known = with_store(options.database, work)
    if not known:
        raise unknown_task(options.id, "runs")
    rows = views.masked_runs(found)
    if options.output.format == "json":
        print(json.dumps(views.json_runs(rows), indent=2))
        return EXIT_OK
    if not rows:
        print(nothing_recorded("runs", options.status, options.id))
        return EXIT_OK
    print(runs_text(rows, options.verbose, lambda run: [notified_line(note) for note in run["notifications"]]))
    return EXIT_OK


NOTIFICATIONS_HEADER = [
    "ID",
    "CREATED (UTC)",
    "TASK",
    "EVENT",
    "NOTIFIER",
    "OCCURRENCE (UTC)",  # the run's scheduled time; late and missed events have an occurrence but no run
    "RUN",
    "STATUS",
    "TRY",
    "NEXT TRY (UTC)",
    "HTTP",
    "ERROR",
]


def notifications(options: ReadOptions) -> int:
    """The notification outbox, newest first: what was sent for which task, and how its delivery went."""
    from reconciler.cli.runtime import with_store
    from reconciler.output import text as render
    from reconciler.output import views

    async def work(store: Store) -> tuple[list[OutboxRow], bool]:
        async with store.reading() as conn:
            return await views.listing(conn, "notifications", options.id, options.status, options.limit)

    found, known = with_store(options.database, work)
    if not known:
        raise unknown_task(options.id, "notifications")
    rows = [views.masked(r, "error") for r in found]
    if options.output.format == "json":
        print(json.dumps(render.json_rows(rows), indent=2))
        return EXIT_OK
    if not rows:
        print(nothing_recorded("notifications", options.status, options.id))
        return EXIT_OK
    cells = [
        [
            str(r["id"]),
            utc_text(r["created_at"]),
            r["task_id"],
            r["event"],
            r["notifier"],
            utc_text(r["scheduled_for"]),
            str(r["run_id"] or "-"),
            r["status"],
            str(r["attempts"]),
            utc_text(r["next_attempt_at"] if r["status"] == "pending" else None),
            str(r["http_status"] or "-"),
            r["error"] or "",
        ]
        for r in rows
    ]
    print("\n".join(render.table(NOTIFICATIONS_HEADER, cells, right=(0, 6, 8, 10))))  # every cell escaped there
    return EXIT_OK
