"""The commands: validate, next, db init, plan, apply, export, watch, status, runs, trigger, engine, up.

Each takes parsed arguments and returns an exit code; cli.py only wires them up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from reconciler import planview, render
from reconciler.apply import ApplyOptions, apply_tasks, read_plan
from reconciler.claim import Claimed, Report
from reconciler.clock import local_text, utc_text, utcnow
from reconciler.embedded import database_label, home_for, resolve_dsn, stop_embedded
from reconciler.engine import Engine, EngineConfig, back_off, default_engine_id
from reconciler.environment import EnvPolicy, globs, policy_errors
from reconciler.errors import DatabaseUnavailable, UserError, one_line
from reconciler.grants import grants_sql
from reconciler.loader import LoadResult, fire_warnings, load_dir
from reconciler.logs import setup_logging
from reconciler.masking import mask_text
from reconciler.models import year_problem
from reconciler.plan import FORMAT_VERSION, Plan, is_drifted
from reconciler.revision import detect
from reconciler.store import Row, Store
from reconciler.targets import Outcome
from reconciler.triggers import upcoming

T = TypeVar("T")
EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2
log = logging.getLogger("reconciler.cli")
ENGINE_LIVE_SECONDS = 30


def err(line: str) -> None:
    print(line, file=sys.stderr)


def load_or_report(args: argparse.Namespace) -> LoadResult | None:
    """Load tasks.d; print every error and return None if there is any."""
    result = load_dir(Path(args.tasks_dir), args.tasks_dir)
    for error in result.errors:
        err(str(error))
    if result.errors:
        err(f"{len(result.errors)} error(s) in {args.tasks_dir}; nothing was changed")
        return None
    return result


def parse_instant(text: str, option: str) -> datetime:
    """An ISO date-time within the years a task file may name; without an offset it is UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"{option}: {text!r} is not an ISO date-time; write e.g. 2026-12-03T00:00:00Z") from None
    problem = year_problem(value)
    if problem:
        raise UserError(f"{option}: {problem}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def cmd_validate(args: argparse.Namespace) -> int:
    result = load_or_report(args)
    if result is None:
        return EXIT_ERROR
    # Schedules that cannot fire are valid, so they warn on stderr and leave the exit code alone.
    warnings = fire_warnings(result.tasks, utcnow())
    for warning in warnings:
        err(str(warning))
    if args.env_policy:
        problems = policy_errors(result.tasks, EnvPolicy(globs(args.allow_env)))
        for problem in problems:
            err(str(problem))
        if problems:
            err(f"{len(problems)} error(s) in {args.tasks_dir}: variables the engines will not let tasks read")
            return EXIT_ERROR
    noted = f" ({len(warnings)} warning(s) on stderr)" if warnings else ""
    print(f"{len(result.tasks)} task file(s) in {args.tasks_dir} are valid{noted}")
    return EXIT_OK


def cmd_next(args: argparse.Namespace) -> int:
    result = load_or_report(args)
    if result is None:
        return EXIT_ERROR
    by_id = {task.id: task for task in result.tasks}
    unknown = [i for i in args.ids if i not in by_id]
    if unknown:
        raise UserError(f"unknown task id(s): {', '.join(unknown)}; see `reconciler validate` for the ids")
    after = parse_instant(args.after, "--after") if args.after else utcnow()
    chosen = [by_id[i] for i in args.ids] if args.ids else result.tasks
    rows = [(task, upcoming(task.schedule, after, args.count)) for task in chosen]
    print(render.next_json(rows) if args.format == "json" else render.next_text(rows))
    return EXIT_OK


def with_store(
    args: argparse.Namespace, work: Callable[[Store], Awaitable[T]], pool_size: int = 4, init: bool = True
) -> T:
    """Open the store named by --dsn / env / embedded, initialize the schema (unless `init` is
    False: `plan` never writes), run `work`."""

    async def run() -> T:
        async with Store(resolve_dsn(args.dsn, args.tasks_dir), max_size=pool_size) as store:
            if init:
                await store.init_schema()
            return await work(store)

    return asyncio.run(run())


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

    with_store(args, work)
    print("schema scheduler is up to date")
    return EXIT_OK


def write_out(text: str, out: str | None) -> None:
    if out:
        Path(out).write_text(text + "\n")
    else:
        print(text)


def show_plan(plan: Plan, fmt: str, no_color: bool = False) -> str:
    """The plan in `fmt`; text is coloured on a terminal unless --no-color or NO_COLOR says not to."""
    if fmt == "json":
        return planview.plan_json(plan)
    if fmt == "markdown":
        return planview.plan_markdown(plan)
    return planview.plan_text(plan, colour=render.colour_wanted(sys.stdout, no_color))


def verdict_options(args: argparse.Namespace, saved: dict[str, Any] | None = None) -> ApplyOptions:
    """The options `plan` and `apply` judge a plan by (the same flags, the same verdict)."""
    return ApplyOptions(
        prune=not args.no_prune,
        allow_empty=args.allow_empty,
        max_deletes=args.max_deletes,
        expect_state=saved["state_fingerprint"] if saved else None,
        expect_files=saved.get("files_fingerprint") if saved else None,
        allow_older=args.allow_older,
        checkout=Path(args.tasks_dir),
    )


def cmd_plan(args: argparse.Namespace) -> int:
    loaded = load_or_report(args)
    if loaded is None:
        return EXIT_ERROR
    tasks = loaded.tasks
    options = verdict_options(args)

    async def work(store: Store) -> Plan:
        return await read_plan(store, tasks, args.source, utcnow(), options)

    plan = with_store(args, work, init=False)
    if args.out and not plan.refused:
        Path(args.out).write_text(planview.plan_json(plan) + "\n")
        print(f"saved plan to {args.out}; apply it with: reconciler apply {args.out}")
    print(show_plan(plan, args.format, args.no_color))
    if plan.refused:
        for reason in plan.refused:  # conflicts among them, as file:line: key: message
            err(render.safe(reason))
        not_saved = f"; {args.out} was not saved" if args.out else ""
        err(f"apply with these options would refuse this plan ({len(plan.refused)} reason(s)){not_saved}")
        return EXIT_ERROR
    return EXIT_CHANGES if args.detailed_exitcode and plan.has_changes else EXIT_OK


def read_saved_plan(path: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read saved plan ({exc}); make one with `reconciler plan --out FILE`") from None
    if (
        not isinstance(data, dict)
        or data.get("format_version") not in (1, FORMAT_VERSION)
        or "state_fingerprint" not in data
    ):
        raise UserError(
            f"{path}: not a reconciler plan (format_version {FORMAT_VERSION}); make one with `plan --out FILE`"
        )
    if data.get("source") != source:
        raise UserError(f"{path}: plan was made for source {data.get('source')!r}, not {source!r}; pass --source")
    return data


def cmd_apply(args: argparse.Namespace) -> int:
    saved = read_saved_plan(args.planfile, args.source) if args.planfile else None
    loaded = load_or_report(args)
    if loaded is None:
        return EXIT_ERROR
    # Only apply records a revision; plan needs none, so it runs no `git log`.
    options = replace(verdict_options(args, saved), revision=detect(Path(args.tasks_dir), args.revision))
    tasks = loaded.tasks

    async def work(store: Store) -> int:
        result = await apply_tasks(store, tasks, args.source, utcnow(), options)
        print(planview.plan_text(result.plan, colour=render.colour_wanted(sys.stdout, args.no_color)))
        print(f"Apply complete: {result.written} change(s) written." if result.written else "Nothing to apply.")
        return EXIT_OK

    return with_store(args, work)


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
    async def work(store: Store) -> tuple[list[Row], list[Row], list[Row]]:
        async with store.connection() as conn:
            rows = await Store.fetch(conn, "status_rows")
            since = utcnow() - timedelta(seconds=ENGINE_LIVE_SECONDS)
            engines = await Store.fetch(conn, "engines_live", {"since": since})
            live = await Store.fetch(conn, "applies_live_sources")
        return rows, engines, live

    rows, engines, revisions = with_store(args, work)
    from reconciler.store import TaskRow

    now = utcnow()
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
                "overdue": render.is_overdue(row["enabled"], next_run_at, render.grace_seconds(task_row.spec), now),
                "last_run_at": row["last_scheduled_for"],
                "last_status": row["last_status"],
                "last_scheduled_for": row["last_scheduled_for"],
                "last_finished_at": row["last_finished_at"],
                "drift": is_drifted(task_row),
            }
        )
    live = [
        {"engine_id": e["engine_id"], "host": e["host"], "pid": e["pid"], "last_seen": e["last_seen"]} for e in engines
    ]
    applied = [
        {"source": r["source"], "revision": r["revision"], "applied_at": r["applied_at"], "author": r["author"]}
        for r in revisions
    ]
    if args.format == "json":
        data = {
            "database": database_label(args.dsn, args.tasks_dir),
            "tasks": render.json_rows(items),
            "engines": render.json_rows(live),
            "live_revisions": render.json_rows(applied),
        }
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(render.safe(f"database: {database_label(args.dsn, args.tasks_dir)}"))
    print(render.status_text(items, live, applied))  # ids, hosts and revisions may come from anywhere: escaped there
    return EXIT_OK


async def apply_files(store: Store, args: argparse.Namespace) -> None:
    """One apply of the task files for watch/up: errors are reported and nothing is applied."""
    loaded = load_dir(Path(args.tasks_dir), args.tasks_dir)
    stamp = utcnow().strftime("%H:%M:%S")
    if loaded.errors:
        for error in loaded.errors:
            err(str(error))
        err(f"[{stamp}] {len(loaded.errors)} error(s); nothing applied, still watching")
        return
    try:
        # No revision check: the working tree is what `watch` and `up` are for (README, "Revisions").
        options = ApplyOptions(prune=not args.no_prune, revision=detect(Path(args.tasks_dir), None))
        result = await apply_tasks(store, loaded.tasks, args.source, utcnow(), options)
    except UserError as exc:
        err(f"[{stamp}] apply refused: {exc}; still watching")
        return
    print(f"[{stamp}] {planview.summary_line(result.plan)}", flush=True)


async def watch_files(store: Store, args: argparse.Namespace, stop: asyncio.Event | None = None) -> None:
    """Apply now, then after every (debounced) change below --tasks-dir until `stop` is set."""
    from watchfiles import awatch

    changes = awatch(args.tasks_dir, debounce=args.debounce_ms, step=50, recursive=True, stop_event=stop)
    # The generator's first step creates the file watcher; let it run before the first apply, so an
    # edit made while that apply runs is seen (it waits in the watcher) instead of lost.
    first = asyncio.ensure_future(anext(changes))
    await asyncio.sleep(0)
    await apply_files(store, args)
    try:
        await first
        await apply_files(store, args)
        async for _ in changes:
            await apply_files(store, args)
    except StopAsyncIteration:  # stopped before anything changed
        return
    except FileNotFoundError:  # the directory was removed while watched
        err(f"{args.tasks_dir} is gone; no longer watching it (the database keeps what was applied)")


def need_tasks_dir(args: argparse.Namespace) -> None:
    """watch and up watch the directory: it must be there before they start."""
    if not Path(args.tasks_dir).is_dir():
        raise UserError(
            f"--tasks-dir {args.tasks_dir}: directory not found here or in the folders above; "
            "create it or pass --tasks-dir"
        )


def cmd_watch(args: argparse.Namespace) -> int:
    need_tasks_dir(args)

    async def work(store: Store) -> int:
        # SIGINT/SIGTERM end the watch cleanly (exit 0, like `up` and `engine`); a KeyboardInterrupt
        # would leave the file watcher's thread running and the process waiting for it.
        await watch_files(store, args, stop_on_signals())
        return EXIT_OK

    return with_store(args, work)


def cmd_history(args: argparse.Namespace) -> int:
    """The applies, newest first (only those that changed ID, when given)."""

    async def work(store: Store) -> list[Row]:
        async with store.connection() as conn:
            params = {"source": None, "task_id": args.id, "limit": args.limit}
            return await Store.fetch(conn, "applies_list", params)

    rows = with_store(args, work)
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

    async def work(store: Store) -> int:
        async with store.transaction() as conn:
            found = await Store.fetch(conn, "task_get", {"id": args.id})
            if not found:
                raise UserError(f"unknown task {args.id!r}; see `reconciler status` for the ids")
            [row] = await Store.fetch(conn, "run_queue_manual", {"task_id": args.id, "now": utcnow()})
            await Store.notify(conn, json.dumps({"source": "trigger", "count": 1, "ids": [args.id]}))
        run_id = row["id"]
        print(
            f"queued manual run {run_id} of {render.safe(args.id)}; the schedule is unchanged; "
            f"it waits for a free slot (`reconciler cancel {run_id}` while queued)",
            flush=True,
        )
        if not args.wait:
            return EXIT_OK
        return await follow_run(store, run_id)

    return with_store(args, work)


async def follow_run(store: Store, run_id: int) -> int:
    """Poll one run until it ends; print each change of status and the result."""
    shown = "queued"
    hint_at = time.monotonic() + QUEUED_HINT_SECONDS
    while True:
        async with store.connection() as conn:
            found = await Store.fetch(conn, "run_get", {"run_id": run_id})
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

    async def work(store: Store) -> int:
        async with store.transaction() as conn:
            reason = "cancelled with `reconciler cancel` before it started"
            done = await Store.fetch(conn, "run_cancel", {"run_id": args.run_id, "now": utcnow(), "error": reason})
            if done:
                print(f"cancelled manual run {args.run_id} of {render.safe(done[0]['task_id'])} (recorded skipped)")
                return EXIT_OK
            found = await Store.fetch(conn, "run_get", {"run_id": args.run_id})
        if not found:
            raise UserError(f"no run {args.run_id}; `reconciler runs` lists them")
        status = found[0]["status"]
        raise UserError(
            f"run {args.run_id} is {status}, not queued: only a queued manual run can be cancelled"
            + ("; a running one ends by its timeout_seconds" if status == "running" else "")
        )

    return with_store(args, work)


def cmd_down(args: argparse.Namespace) -> int:
    """Stop the project's embedded PostgreSQL (never a --dsn database)."""
    print(stop_embedded(home_for(args.tasks_dir)))
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from reconciler.explain import TaskState, explain, occurrences_around, span
    from reconciler.models import TaskSpec
    from reconciler.triggers import compile_schedule

    now = utcnow()
    at = parse_instant(args.at, "--at") if args.at else now

    async def work(store: Store) -> list[str]:
        async with store.connection() as conn:
            found = await Store.fetch(conn, "task_get", {"id": args.id})
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
            runs = await Store.fetch(conn, "runs_between", {"task_id": args.id, "lo": lo, "hi": hi})
        task = TaskState(row["id"], spec, row["enabled"], row["next_run_at"], row["created_at"], row["updated_at"])
        lines = explain(task, shown, runs, at, now)
        changed = row["revision"] or "unknown (applied without a revision)"
        return [*lines[:1], f"last changed by revision {changed} at {utc_text(row['updated_at'])}", *lines[1:]]

    print("\n".join(render.safe(mask_text(line)) for line in with_store(args, work)))
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    """Run history, newest first; an id that names no task and no recorded run is an error."""

    async def work(store: Store) -> tuple[list[Row], bool]:
        async with store.connection() as conn:
            params = {"task_id": args.id, "status": args.status, "limit": args.limit}
            rows = await Store.fetch(conn, "runs_list", params)
            if rows or args.id is None:
                return rows, True
            # A deleted task's runs stay in the history: the id is known if the task or any run has it.
            known = bool(await Store.fetch(conn, "task_get", {"id": args.id})) or bool(
                await Store.fetch(conn, "runs_list", {"task_id": args.id, "status": None, "limit": 1})
            )
        return rows, known

    found, known = with_store(args, work)
    if not known:
        raise UserError(
            f"unknown task {args.id!r}: no such task and no runs recorded; see `reconciler status` for the ids"
        )
    rows = [
        {
            **r,
            "error": mask_text(r["error"]) if r["error"] else None,
            "response_excerpt": mask_text(r["response_excerpt"]) if r["response_excerpt"] else None,
        }
        for r in found
    ]
    if args.format == "json":
        print(json.dumps(render.json_rows(rows), indent=2))
        return EXIT_OK
    if not rows:
        status = f"{args.status} " if args.status else ""
        print(f"no {status}runs" + (f" of {render.safe(args.id)}" if args.id else "") + " recorded yet")
        return EXIT_OK
    print(render.runs_text(rows, verbose=args.verbose))
    return EXIT_OK


async def open_patiently(store: Store, stop: asyncio.Event) -> bool:
    """Connect (and create the schema) with back-off until the database answers; False if stopped first.

    An engine started during a database cut-over waits instead of exiting: under Kubernetes
    an exit is a crash loop. /healthz answers 503 meanwhile.
    """
    backoff = 0.5
    while not stop.is_set():
        try:
            await store.open()
            await store.init_schema()
            return True
        except DatabaseUnavailable as exc:
            log.warning("database unavailable (%s); retrying in %.1f s", exc, backoff)
        backoff = await back_off(stop, backoff)
    return False


def engine_config(args: argparse.Namespace, sources: tuple[str, ...]) -> EngineConfig:
    return EngineConfig(
        sources=sources,
        engine_id=args.engine_id or default_engine_id(),
        batch=args.batch,
        concurrency=args.concurrency,
        max_sleep=args.max_sleep,
        drain_seconds=args.drain_seconds,
        keep_runs_days=args.keep_runs_days,
        lease_margin=args.lease_margin,
        allow_env=globs(args.allow_env),
    )


async def run_engine(store: Store, args: argparse.Namespace, stop: asyncio.Event, engine: Engine) -> None:
    """Serve `engine` (and its metrics endpoint, if asked) until `stop` is set; waits for the database first."""
    server = None
    if args.metrics_addr:
        from reconciler.metrics import serve_metrics

        server = await serve_metrics(args.metrics_addr, engine, store)
    sources = list(engine.config.sources)
    fields = {"engine_id": engine.config.engine_id, "concurrency": engine.config.concurrency, "sources": sources}
    scope = f"sources {', '.join(sources)}" if sources else "every source"
    log.info("engine %s started (%s)", engine.config.engine_id, scope, extra={"fields": fields})
    try:
        if await open_patiently(store, stop):
            await engine.serve(stop)
        else:
            await engine.firer.close()
    finally:
        if server is not None:
            server.close()
    log.info("engine %s stopped", engine.config.engine_id, extra={"fields": fields})


def stop_on_signals(engine: Engine | None = None, say: Callable[[str], None] | None = None) -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (Ctrl-C): the engine drains, a watch ends; both exit 0.

    With an engine, the first signal says (through `say`, default an INFO log: a normal stop
    must not page anyone) what the drain waits for, and a second one stops at once: runs still
    in flight are recorded `lost` when their leases expire (README, "Stopping").
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    tell = say or log.info

    def signalled(again: str) -> None:
        if engine is None:
            stop.set()
        elif not stop.is_set():
            stop.set()
            tell(
                f"draining {len(engine.inflight)} run(s) (up to {engine.config.drain_seconds:g} s); "
                f"{again} again to stop now"
            )
        elif not engine.hurry.is_set():
            engine.hurry.set()
            tell(f"stopping now, {len(engine.inflight)} run(s) in flight")

    loop.add_signal_handler(signal.SIGTERM, signalled, "SIGTERM")
    loop.add_signal_handler(signal.SIGINT, signalled, "Ctrl-C")
    return stop


def engine_pool_size(args: argparse.Namespace) -> int:
    return max(4, min(20, int(args.concurrency) // 10 + 4))


def cmd_engine(args: argparse.Namespace) -> int:
    setup_logging(args.log_format)
    config = engine_config(args, args.sources)

    async def run() -> int:
        store = Store(resolve_dsn(args.dsn, args.tasks_dir), max_size=engine_pool_size(args))
        engine = Engine(store, config)
        try:
            await run_engine(store, args, stop_on_signals(engine), engine)
        finally:
            await store.close()
        return EXIT_OK

    return asyncio.run(run())


class RunPrinter:
    """Engine observer for `up`: one line per run on stdout."""

    def claimed(self, report: Report, seconds: float) -> None:
        for item in report.recorded:
            detail = (item.error or "").removeprefix(f"{item.status}: ")  # `skipped (skipped: …)` says it twice
            self._line(item.task_id, utc_text(item.scheduled_for), item.status, detail)

    def finished(self, claimed: Claimed, outcome: Outcome) -> None:
        last = outcome.last
        detail = last.error or f"HTTP {last.http_status}"
        tries = f", attempt {last.attempt}" if last.attempt > 1 else ""
        when = "manual run" if claimed.kind == "manual" else utc_text(claimed.scheduled_for)
        self._line(claimed.task_id, when, outcome.status, f"{detail}, {last.duration_ms} ms{tries}")

    @staticmethod
    def _line(task_id: str, when: str, status: str, detail: str) -> None:
        stamp = utcnow().strftime("%H:%M:%S")
        print(render.safe(f"[{stamp}] run {task_id} @ {when}: {status} ({detail})"), flush=True)


def is_run_result(record: logging.LogRecord) -> bool:
    """A log record of a run's result (its structured fields carry the status)."""
    fields = getattr(record, "fields", None)
    return isinstance(fields, dict) and "status" in fields


def cmd_up(args: argparse.Namespace) -> int:
    """Apply, watch and fire in one process: the local development loop."""
    # Run lines go to stdout; logs only for warnings, unless machine-readable logs are asked for.
    need_tasks_dir(args)
    people = args.log_format != "json"
    setup_logging(args.log_format, logging.WARNING if people else logging.INFO)
    if people:  # RunPrinter already gave each run its line on stdout
        logging.getLogger("reconciler.engine").addFilter(lambda record: not is_run_result(record))
    config = engine_config(args, (args.source,))  # `up` fires its own tasks only, even on a shared database

    async def work(store: Store) -> int:
        engine = Engine(store, config)
        stop = stop_on_signals(engine, err if people else None)
        engine.observers.append(RunPrinter())
        print(f"reconciler up: watching {args.tasks_dir}, engine {config.engine_id}; Ctrl-C stops", flush=True)
        watcher = asyncio.create_task(watch_files(store, args, stop))
        try:
            await run_engine(store, args, stop, engine)
        finally:
            stop.set()
            await watcher
        print("reconciler up: stopped", flush=True)
        return EXIT_OK

    return with_store(args, work, pool_size=engine_pool_size(args))
