"""The commands on the database's state: db, status, history, runs, notifications, trigger, cancel, explain, down.

Each takes parsed arguments and returns an exit code; cli.py imports this module only when one of them runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, overload
from zoneinfo import ZoneInfo

from reconciler.cli.options import DatabaseOptions, parse_instant
from reconciler.cli.runtime import with_store
from reconciler.clock import local_text, utc_text
from reconciler.db import command_queries, operator_queries
from reconciler.db.command_queries import ApplyRow, EngineRow, History, LiveSourceRow, OutboxRow, RunRow, StatusRow
from reconciler.db.embedded import database_label, home_for, stop_embedded
from reconciler.db.grants import grants_sql
from reconciler.db.operator_queries import PauseRow
from reconciler.db.store import Conn, Row, Store, TaskRow
from reconciler.errors import EXIT_ERROR, EXIT_OK, UserError, one_line
from reconciler.output import text as render
from reconciler.output.explain import TaskState, explain, notified_line, occurrences_around, span
from reconciler.output.masking import mask_text
from reconciler.reconcile.audit import Operator, record
from reconciler.reconcile.plan import is_drifted
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.task import TaskSpec

ENGINE_LIVE_SECONDS = 30


def cmd_db(args: argparse.Namespace) -> int:
    """`db init` creates or upgrades the schema; `db grants` prints what each role needs (no database)."""
    if args.action == "grants":
        roles = (args.role_planner, args.role_applier, args.role_engine)
        if not any(roles):
            raise UserError("db grants: name at least one of --role-planner, --role-applier, --role-engine")
        print(grants_sql(*roles), end="")
        return EXIT_OK

    async def work(store: Store) -> int:
        return await store.init_schema()

    with_store(DatabaseOptions.of(args), work)
    print("schema scheduler is up to date")
    return EXIT_OK


def _local(moment: datetime | None, zone: str, machine: bool = False) -> str | None:
    """The instant in the task's zone: text for people, ISO with the offset for json."""
    if moment is None:
        return None if machine else "-"
    try:
        where = ZoneInfo(zone)
    except (KeyError, ValueError, OSError):  # a zone edited by hand (ZoneInfoNotFoundError is a KeyError)
        return None if machine else "(unknown zone)"
    return moment.astimezone(where).isoformat() if machine else local_text(moment, where)


def cmd_status(args: argparse.Namespace) -> int:
    database = DatabaseOptions.of(args)

    async def work(
        store: Store,
    ) -> tuple[list[StatusRow], list[EngineRow], list[LiveSourceRow], datetime, dict[str, PauseRow]]:
        async with store.reading() as conn:
            rows = await command_queries.status_rows(conn)
            engines = await command_queries.engines_live(conn, seconds=float(ENGINE_LIVE_SECONDS))
            live = await command_queries.applies_live_sources(conn)
            [clock] = await command_queries.clock_now(conn, now=None)  # overdue by the database's clock
            pauses = await operator_queries.pauses_readable(conn, ids=None)
        return rows, engines, live, clock["now"], pauses

    rows, engines, revisions, now, pauses = with_store(database, work)

    items = []
    for row in rows:
        task_row = TaskRow.from_row(row)
        # A disabled task has no next run, whatever a hand edit left in next_run_at.
        next_run_at = row["next_run_at"] if row["enabled"] else None
        items.append(
            {
                "id": row["id"],
                "source": row["source"],
                "enabled": row["enabled"],
                "timezone": row["timezone"],
                "next_run_at": next_run_at,
                "next_run_local": _local(next_run_at, row["timezone"], machine=args.format == "json"),
                # a paused task fires nothing on purpose: no engine is failing to claim it
                "overdue": row["id"] not in pauses
                and render.is_overdue(row["enabled"], next_run_at, render.grace_seconds(task_row.spec), now),
                "last_run_at": row["last_scheduled_for"],
                "last_status": row["last_status"],
                "last_scheduled_for": row["last_scheduled_for"],
                "last_finished_at": row["last_finished_at"],
                "drift": is_drifted(task_row),
                "paused": paused_fields(pauses.get(row["id"])),
            }
        )
    live = [
        {
            "engine_id": e["engine_id"],
            "host": e["host"],
            "pid": e["pid"],
            "last_seen": e["last_seen"],
            "database": e["database"],
            "server": e["server"],
            "primary": e["is_primary"],
        }
        for e in engines
    ]
    applied = [
        {"source": r["source"], "revision": r["revision"], "applied_at": r["applied_at"], "author": r["author"]}
        for r in revisions
    ]
    if args.format == "json":
        data = {
            "database": database_label(database.dsn, database.tasks_dir),
            "tasks": [
                {**task, "paused": render.json_rows([task["paused"]])[0] if task["paused"] else None}
                for task in render.json_rows(items)
            ],
            "engines": render.json_rows(live),
            "live_revisions": render.json_rows(applied),
        }
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(render.safe(f"database: {database_label(database.dsn, database.tasks_dir)}"))
    print(render.status_text(items, live, applied))  # ids, hosts and revisions may come from anywhere: escaped there
    return EXIT_OK


def paused_fields(pause: PauseRow | None) -> dict[str, Any] | None:
    """A task's pause in force for `status` (by, reason, since, until), None when it is not paused."""
    if pause is None:
        return None
    return {
        "paused_by": pause["paused_by"],
        "reason": pause["reason"],
        "paused_at": pause["paused_at"],
        "paused_until": pause["paused_until"],
    }


def cmd_history(args: argparse.Namespace) -> int:
    """The applies, newest first (only those that changed ID, when given)."""

    async def work(store: Store) -> list[ApplyRow]:
        async with store.reading() as conn:
            params = {"source": None, "task_id": args.id, "limit": args.limit}
            return await command_queries.applies_list(conn, **params)

    rows = with_store(DatabaseOptions.of(args), work)
    if args.format == "json":
        print(json.dumps(render.json_rows(rows), indent=2, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print("no applies recorded" + (f" that changed {args.id}" if args.id else ""))
    print("\n".join(render.history_line(row) for row in rows))
    return EXIT_OK


FINAL_STATUSES = ("succeeded", "failed", "missed", "skipped", "lost")
WAIT_POLL_SECONDS = 0.5
QUEUED_HINT_SECONDS = 10.0


def cmd_trigger(args: argparse.Namespace) -> int:
    """Queue a manual run; with --wait, follow it to its end (exit 0 if it succeeded, else 1)."""

    operator = Operator.resolve(args.actor, args.reason)

    async def work(store: Store) -> int:
        async with store.transaction() as conn:
            found = await command_queries.task_get(conn, id=args.id)
            if not found:
                raise UserError(f"unknown task {args.id!r}; see `reconciler status` for the ids")
            [row] = await command_queries.run_queue_manual(conn, task_id=args.id, now=None)
            await record(conn, operator, "trigger", found[0]["source"], [args.id], {"run_id": row["id"]})
            await Store.notify(conn, json.dumps({"source": "trigger", "count": 1, "ids": [args.id]}))
            pause = (await operator_queries.pauses_readable(conn, ids=[args.id])).get(args.id)
        run_id = row["id"]
        print(
            f"queued manual run {run_id} of {render.safe(args.id)}; the schedule is unchanged; "
            f"it waits for a free slot (`reconciler cancel {run_id}` while queued)",
            flush=True,
        )
        if pause is not None:  # an explicit operator action: a pause holds the schedule, not manual runs
            print(
                render.safe(
                    f"note: {args.id} is paused ({pause['paused_by']}: {pause['reason']}); a manual run runs anyway"
                )
            )
        if not args.wait:
            return EXIT_OK
        return await follow_run(store, run_id)

    return with_store(DatabaseOptions.of(args), work)


async def follow_run(store: Store, run_id: int) -> int:
    """Poll one run until it ends; print each change of status and the result."""
    shown = "queued"
    hint_at = time.monotonic() + QUEUED_HINT_SECONDS
    while True:
        async with store.connection() as conn:
            found = await command_queries.run_get(conn, run_id=run_id)
        if not found:
            raise UserError(f"run {run_id} is gone from the history (pruned or its task deleted)")
        run = found[0]
        if run["status"] != shown and run["status"] not in FINAL_STATUSES:
            shown = run["status"]
            print(f"run {run_id}: {shown} on engine {render.safe(run['engine_id'] or '-')}", flush=True)
        if run["status"] in FINAL_STATUSES:
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
    print(
        render.safe(f"run {run_id}: {run['status']} ({detail}, attempt {run['attempt']}, {run['duration_ms'] or 0} ms)")
    )
    if run["response_excerpt"]:
        print(render.safe(f"response: {mask_text(run['response_excerpt'])}"))
    return EXIT_OK if run["status"] == "succeeded" else EXIT_ERROR


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a queued manual run (recorded `skipped`, with who cancelled it in its error)."""

    operator = Operator.resolve(args.actor, args.reason)

    async def work(store: Store) -> int:
        async with store.transaction() as conn:
            reason = f"cancelled by {operator.actor} with `reconciler cancel` before it started"
            reason += f": {operator.reason}" if operator.reason else ""
            done = await command_queries.run_cancel(conn, run_id=args.run_id, now=None, error=reason)
            if done:
                task_id = done[0]["task_id"]
                task = await command_queries.task_get(conn, id=task_id)  # a deleted task's run has no source
                source = task[0]["source"] if task else None
                await record(conn, operator, "cancel", source, [task_id], {"run_id": args.run_id})
                print(f"cancelled manual run {args.run_id} of {render.safe(done[0]['task_id'])} (recorded skipped)")
                return EXIT_OK
            found = await command_queries.run_get(conn, run_id=args.run_id)
        if not found:
            raise UserError(f"no run {args.run_id}; `reconciler runs` lists them")
        status = found[0]["status"]
        raise UserError(
            f"run {args.run_id} is {status}, not queued: only a queued manual run can be cancelled"
            + ("; a running one ends by its timeout_seconds" if status == "running" else "")
        )

    return with_store(DatabaseOptions.of(args), work)


def cmd_down(args: argparse.Namespace) -> int:
    """Stop the project's embedded PostgreSQL (never a --dsn database)."""
    print(stop_embedded(home_for(args.tasks_dir)))
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    asked = parse_instant(args.at, "--at") if args.at else None

    async def work(store: Store) -> list[str]:
        async with store.reading() as conn:
            [clock] = await command_queries.clock_now(conn, now=None)  # "due" by the database's clock
            now: datetime = clock["now"]
            at = asked or now
            found = await command_queries.task_get(conn, id=args.id)
            if not found:
                raise UserError(
                    f"task {args.id!r} is not in the database; apply its file first (`reconciler plan` shows it)"
                )
            row = found[0]
            try:
                spec = TaskSpec.model_validate(json.loads(row["spec_text"]))
                shown = occurrences_around(compile_schedule(spec), at)
            except ValueError as exc:  # pydantic's ValidationError and TriggerError are ValueErrors
                raise UserError(
                    f"task {args.id!r}: the stored spec no longer validates ({one_line(exc)}); "
                    "`reconciler apply` restores it"
                ) from None
            lo, hi = span(shown, at)
            between = await command_queries.runs_between(conn, task_id=args.id, lo=lo, hi=hi)
            runs = await with_notifications(conn, between)
            pause = (await operator_queries.pauses_readable(conn, ids=[args.id])).get(args.id)
        task = TaskState(
            row["id"], spec, row["enabled"], row["next_run_at"], row["created_at"], row["updated_at"], pause
        )
        lines = explain(task, shown, runs, at, now)
        changed = row["revision"] or "unknown (applied without a revision)"
        return [*lines[:1], f"last changed by revision {changed} at {utc_text(row['updated_at'])}", *lines[1:]]

    print("\n".join(render.safe(mask_text(line)) for line in with_store(DatabaseOptions.of(args), work)))
    return EXIT_OK


@overload
async def listing(
    conn: Conn, of: Literal["runs"], task_id: str | None, status: str | None, limit: int
) -> tuple[list[RunRow], bool]: ...


@overload
async def listing(
    conn: Conn, of: Literal["notifications"], task_id: str | None, status: str | None, limit: int
) -> tuple[list[OutboxRow], bool]: ...


async def listing(
    conn: Conn, of: History, task_id: str | None, status: str | None, limit: int
) -> tuple[list[RunRow] | list[OutboxRow], bool]:
    """The rows of a history (the runs, or the notifications), and whether `task_id` is known:
    a deleted task's history stays, so an id is known if a task or any row of that history has it."""
    rows = await command_queries.history(conn, of, task_id=task_id, status=status, limit=limit)
    if rows or task_id is None:
        return rows, True
    known = bool(await command_queries.task_get(conn, id=task_id)) or bool(
        await command_queries.history(conn, of, task_id=task_id, status=None, limit=1)
    )
    return rows, known


def unknown_task(task_id: str, history: str) -> UserError:
    return UserError(
        f"unknown task {task_id!r}: no such task and no {history} recorded; see `reconciler status` for the ids"
    )


def nothing_recorded(history: str, status: str | None, task_id: str | None) -> str:
    """`no failed runs of ID recorded yet`: an empty listing, in one line."""
    which = f"{status} {history}" if status else history
    of = f" of {render.safe(task_id)}" if task_id else ""
    return f"no {which}{of} recorded yet"


def masked(row: Mapping[str, Any], *keys: str) -> Row:
    """The row with the free text under `keys` masked (errors and excerpts may quote a credential)."""
    return {**row, **{key: mask_text(row[key]) if row[key] else None for key in keys}}


async def with_notifications(conn: Conn, runs: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Each run with the notifications it caused (errors masked) under `notifications`, in one query for
    all; none where the outbox is missing or unreadable (a database, or a role's grants, from before it)."""
    notes: dict[int, list[Row]] = {}
    if runs and (await command_queries.notifications_readable(conn))[0]["readable"]:
        run_ids = [run["id"] for run in runs]
        for note in await command_queries.notifications_of_runs(conn, run_ids=run_ids):
            notes.setdefault(note["run_id"], []).append(masked(note, "error"))
    return [{**run, "notifications": notes.get(run["id"], [])} for run in runs]


def cmd_runs(args: argparse.Namespace) -> int:
    """Run history, newest first; an id that names no task and no recorded run is an error."""

    async def work(store: Store) -> tuple[list[Row], bool]:
        async with store.reading() as conn:
            rows, known = await listing(conn, "runs", args.id, args.status, args.limit)
            return await with_notifications(conn, rows), known

    found, known = with_store(DatabaseOptions.of(args), work)
    if not known:
        raise unknown_task(args.id, "runs")
    rows = [masked(r, "error", "response_excerpt") for r in found]
    if args.format == "json":
        data = [{**run, "notifications": render.json_rows(run["notifications"])} for run in render.json_rows(rows)]
        print(json.dumps(data, indent=2))
        return EXIT_OK
    if not rows:
        print(nothing_recorded("runs", args.status, args.id))
        return EXIT_OK
    print(render.runs_text(rows, args.verbose, lambda run: [notified_line(note) for note in run["notifications"]]))
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


def cmd_notifications(args: argparse.Namespace) -> int:
    """The notification outbox, newest first: what was sent for which task, and how its delivery went."""

    async def work(store: Store) -> tuple[list[OutboxRow], bool]:
        async with store.reading() as conn:
            return await listing(conn, "notifications", args.task, args.status, args.limit)

    found, known = with_store(DatabaseOptions.of(args), work)
    if not known:
        raise unknown_task(args.task, "notifications")
    rows = [masked(r, "error") for r in found]
    if args.format == "json":
        print(json.dumps(render.json_rows(rows), indent=2))
        return EXIT_OK
    if not rows:
        print(nothing_recorded("notifications", args.status, args.task))
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
