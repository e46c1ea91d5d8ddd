"""The task-file commands: validate, next, plan, apply, watch; and what the other commands share with them.

Each takes parsed arguments and returns an exit code; cli.py only wires them up. `validate` and
`next` need no database, so the modules that bring psycopg (store, apply, planview through plan)
are imported inside the functions that use them: those two commands start without it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from reconciler.clock import utcnow
from reconciler.db.embedded import resolve_dsn
from reconciler.errors import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, DatabaseUnavailable, UserError
from reconciler.files.environment import policy_errors, unset_errors
from reconciler.files.notifiers import Notifiers, load_notifiers
from reconciler.files.subscriptions import subscription_errors
from reconciler.files.tasks import LoadResult, fire_warnings, load_dir
from reconciler.output import text as render
from reconciler.reconcile.revision import detect
from reconciler.schedule.triggers import upcoming
from reconciler.spec.environment import EnvPolicy, globs
from reconciler.spec.values import year_problem

if TYPE_CHECKING:
    from reconciler.db.store import Store
    from reconciler.engine.loop import Engine
    from reconciler.reconcile.apply import ApplyOptions
    from reconciler.reconcile.plan import Plan

T = TypeVar("T")
log = logging.getLogger("reconciler.cli")


def err(line: str) -> None:
    print(line, file=sys.stderr)


def load_or_report(args: argparse.Namespace, loaded: LoadResult | None = None) -> LoadResult | None:
    """Load tasks.d (unless `loaded` is what was) and notifiers.d; print every error and return None
    if there is any. Subscriptions to unknown notifiers are checked here when every task file was
    parsed (`loaded` None), else by the plan (an unchanged file's spec is its row's)."""
    result = loaded if loaded is not None else load_dir(Path(args.tasks_dir), args.tasks_dir)
    result.notifiers = notifiers = notifier_files(args)
    result.errors = [*result.errors, *notifiers.errors]
    if loaded is None:
        result.errors += subscription_errors(result.tasks, {}, notifiers)
    for error in result.errors:
        err(str(error))
    if result.errors:
        err(f"{len(result.errors)} error(s) in {read_dirs(args, notifiers)}; nothing was changed")
        return None
    return result


def read_dirs(args: argparse.Namespace, notifiers: Notifiers | None) -> str:
    """`tasks.d`, or `tasks.d and notifiers.d` when there is one: what a command read."""
    return f"{args.tasks_dir} and {notifiers.root}" if notifiers is not None and notifiers.present else args.tasks_dir


def notifier_files(args: argparse.Namespace) -> Notifiers:
    """--notifiers-dir (default notifiers.d beside --tasks-dir), loaded; none when it does not exist."""
    required = getattr(args, "notifiers_required", False)
    return load_notifiers(Path(args.notifiers_dir), args.notifiers_dir, required)


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
    notifiers = list(result.notifiers.by_name.values()) if result.notifiers is not None else []
    problems = policy_errors(result.tasks, EnvPolicy(globs(args.allow_env)), notifiers) if args.env_policy else []
    missing = unset_errors(result.tasks, os.environ, notifiers) if args.check_env else []
    for problem in sorted(problems + missing, key=lambda e: (e.path, e.line)):
        err(str(problem))
    if problems:
        err(f"{len(problems)} error(s) in {args.tasks_dir}: variables the engines will not let tasks read")
    if missing:
        err(f"{len(missing)} error(s) in {args.tasks_dir}: variables not set in this environment")
    if problems or missing:
        return EXIT_ERROR
    noted = f" ({len(warnings)} warning(s) on stderr)" if warnings else ""
    files = f"{len(result.tasks)} task file(s) in {args.tasks_dir}"
    if result.notifiers is not None and result.notifiers.present:
        files += f" and {len(result.notifiers.by_name)} notifier file(s) in {result.notifiers.root}"
    print(f"{files} are valid{noted}")
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
    from reconciler.db.store import Store

    async def run() -> T:
        async with Store(resolve_dsn(args.dsn, args.tasks_dir), max_size=pool_size) as store:
            if init:
                await store.init_schema()
            return await work(store)

    return asyncio.run(run())


def with_files(args: argparse.Namespace, work: Callable[[Store, LoadResult], Awaitable[T]]) -> T | None:
    """`work` on the store and the task files, for plan and apply. The database is read first: the
    files unchanged since they were applied are not parsed again. Errors in the files are reported
    and give None, before an unreachable database too (every file is parsed then)."""
    from reconciler.reconcile.apply import load_files

    async def run(store: Store) -> T | None:
        loaded = load_or_report(args, await load_files(store, Path(args.tasks_dir), args.tasks_dir))
        return None if loaded is None else await work(store, loaded)

    try:
        return with_store(args, run, init=False)
    except DatabaseUnavailable:
        if load_or_report(args) is None:
            return None
        raise


def show_plan(plan: Plan, fmt: str, no_color: bool = False) -> str:
    """The plan in `fmt`; text is coloured on a terminal unless --no-color or NO_COLOR says not to."""
    from reconciler.output import planview

    if fmt == "json":
        return planview.plan_json(plan)
    if fmt == "markdown":
        return planview.plan_markdown(plan)
    return planview.plan_text(plan, colour=render.colour_wanted(sys.stdout, no_color))


def verdict_options(args: argparse.Namespace, saved: dict[str, Any] | None = None) -> ApplyOptions:
    """The options `plan` and `apply` judge a plan by (the same flags, the same verdict)."""
    from reconciler.reconcile.apply import ApplyOptions

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
    from reconciler.output import planview
    from reconciler.reconcile.apply import read_plan

    options = verdict_options(args)

    async def work(store: Store, loaded: LoadResult) -> Plan:
        return await read_plan(store, loaded.tasks, args.source, utcnow(), options, loaded.notifiers)

    plan = with_files(args, work)
    if plan is None:
        return EXIT_ERROR
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
    from reconciler.reconcile.plan import FORMAT_VERSION

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
    from reconciler.output import planview
    from reconciler.reconcile.apply import apply_tasks

    saved = read_saved_plan(args.planfile, args.source) if args.planfile else None

    async def work(store: Store, loaded: LoadResult) -> int:
        await store.init_schema()  # only now: files with errors leave the database as it was, schema included
        # Only apply records a revision; plan needs none, so it runs no `git log`.
        options = replace(verdict_options(args, saved), revision=detect(Path(args.tasks_dir), args.revision))
        result = await apply_tasks(store, loaded.tasks, args.source, None, options, loaded.notifiers)
        print(planview.plan_text(result.plan, colour=render.colour_wanted(sys.stdout, args.no_color)))
        print(f"Apply complete: {result.written} change(s) written." if result.written else "Nothing to apply.")
        return EXIT_OK

    code = with_files(args, work)
    return EXIT_ERROR if code is None else code


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
        from reconciler.cli.watch import watch_files

        await watch_files(store, args, stop_on_signals())
        return EXIT_OK

    return with_store(args, work)


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
            if not engine.in_flight:
                tell("stopping: no run in flight")
                return
            tell(
                f"draining {engine.in_flight} run(s) (up to {engine.config.drain_seconds:g} s); "
                f"{again} again to stop now"
            )
        elif not engine.hurry.is_set():
            engine.hurry.set()
            tell(f"stopping now, {engine.in_flight} run(s) in flight")

    loop.add_signal_handler(signal.SIGTERM, signalled, "SIGTERM")
    loop.add_signal_handler(signal.SIGINT, signalled, "Ctrl-C")
    return stop
