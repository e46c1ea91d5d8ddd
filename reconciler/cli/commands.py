"""The task-file commands: validate, next, plan, apply.

Each takes parsed arguments, turns them into typed options at its top, and returns an exit code;
cli.py only wires them up. `validate` and `next` need no database, so the modules that bring
psycopg (store, apply, the plan's renderings) are imported inside the functions that use them:
those two commands start without it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.cli.console import err
from reconciler.cli.declared import load_or_report
from reconciler.cli.options import DatabaseOptions, FilesOptions, OutputOptions, VerdictOptions, parse_instant
from reconciler.cli.runtime import with_files
from reconciler.clock import utcnow
from reconciler.errors import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, UserError
from reconciler.files.declared import Declared
from reconciler.files.environment import policy_errors, unset_errors
from reconciler.files.tasks import Task, fire_warnings
from reconciler.output import text as render
from reconciler.reconcile.revision import Revision, detect, dirty_verdict, under_ci, working_tree
from reconciler.schedule.excluded import excluded_between
from reconciler.schedule.preview import A_YEAR, upcoming
from reconciler.spec.environment import EnvPolicy, globs

if TYPE_CHECKING:
    from reconciler.db.store import Store
    from reconciler.reconcile.apply import ApplyOptions
    from reconciler.reconcile.plan import Plan


def cmd_validate(args: argparse.Namespace) -> int:
    files = FilesOptions.of(args)
    result = load_or_report(files)
    if result is None:
        return EXIT_ERROR
    # Schedules that cannot fire are valid, so they warn on stderr and leave the exit code alone.
    warnings = fire_warnings(result.tasks, utcnow())
    for warning in warnings:
        err(str(warning))
    items = result.items()
    problems = policy_errors(items, EnvPolicy(globs(args.allow_env))) if args.env_policy else []
    missing = unset_errors(items, os.environ) if args.check_env else []
    for problem in sorted(problems + missing, key=lambda e: (e.path, e.line)):
        err(str(problem))
    if problems:
        err(f"{len(problems)} error(s) in {files.tasks_dir}: variables the engines will not let tasks read")
    if missing:
        err(f"{len(missing)} error(s) in {files.tasks_dir}: variables not set in this environment")
    if problems or missing:
        return EXIT_ERROR
    noted = f" ({len(warnings)} warning(s) on stderr)" if warnings else ""
    read = f"{len(result.tasks)} task file(s) in {files.tasks_dir}"
    for named in result.named.values():
        if named.present:
            read += f" and {len(named.by_name)} {named.kind.name} file(s) in {named.root}"
    print(f"{read} are valid{noted}")
    return EXIT_OK


def cmd_next(args: argparse.Namespace) -> int:
    output = OutputOptions.of(args)
    result = load_or_report(FilesOptions.of(args))
    if result is None:
        return EXIT_ERROR
    by_id = {task.id: task for task in result.tasks}
    unknown = [i for i in args.ids if i not in by_id]
    if unknown:
        raise UserError(f"unknown task id(s): {', '.join(unknown)}; see `reconciler validate` for the ids")
    after = parse_instant(args.after, "--after") if args.after else utcnow()
    chosen = [by_id[i] for i in args.ids] if args.ids else result.tasks
    rows = [shown_next(task, after, args.count) for task in chosen]
    print(render.next_json(rows) if output.format == "json" else render.next_text(rows))
    return EXIT_OK


def shown_next(task: Task, after: datetime, count: int) -> render.NextRow:
    """A task's next `count` occurrences after `after`, and what its calendars take away in that span (up to the
    last one shown; a year when there is none)."""
    fires = upcoming(task.schedule, after, count)
    if task.spec.calendars is None:
        return task, fires, []
    until = fires[-1].at if len(fires) == count and fires else after + A_YEAR
    return task, fires, excluded_between(task.schedule, after, until)


def show_plan(plan: Plan, output: OutputOptions) -> str:
    """The plan in --format; text is coloured on a terminal unless --no-color or NO_COLOR says not to."""
    from reconciler.output.plan_json import plan_json
    from reconciler.output.plan_markdown import plan_markdown
    from reconciler.output.plan_text import plan_text

    if output.format == "json":
        return plan_json(plan)
    if output.format == "markdown":
        return plan_markdown(plan)
    return plan_text(plan, colour=render.colour_wanted(sys.stdout, output.no_color))


def verdict_options(
    verdict: VerdictOptions,
    files: FilesOptions,
    saved: dict[str, Any] | None = None,
    apply: bool = False,
    revision: str | None = None,
) -> ApplyOptions:
    """The options `plan` and `apply` judge a plan by (the same flags, the same verdict), with the state of
    the working tree: uncommitted changes in the declared directories are a warning on stderr, and on CI a
    refusal unless --allow-dirty. For `apply`, also the revision it records: `revision` (its --revision, the
    operator's statement, recorded as given), else git's (`<sha>-dirty` for such a tree); plan records none,
    so it runs no `git log`."""
    from reconciler.reconcile.apply import ApplyOptions

    checkout = Path(files.tasks_dir)
    tree = working_tree(checkout, files.dirs.listed())
    refusal, warning = dirty_verdict(tree, under_ci(os.environ), verdict.allow_dirty, revision)
    if warning:
        err(f"warning: {warning}")
    return ApplyOptions(
        prune=verdict.prune,
        allow_empty=verdict.allow_empty,
        max_deletes=verdict.max_deletes,
        expect_state=saved["state_fingerprint"] if saved else None,
        expect_files=saved.get("files_fingerprint") if saved else None,
        allow_older=verdict.allow_older,
        checkout=checkout,
        revision=detect(checkout, revision, dirty=bool(tree.changed)) if apply else Revision(None),
        dirty_refusal=refusal,
    )


def cmd_plan(args: argparse.Namespace) -> int:
    from reconciler.output.plan_json import plan_json
    from reconciler.reconcile.apply import read_plan

    files, output = FilesOptions.of(args), OutputOptions.of(args)
    options = verdict_options(VerdictOptions.of(args), files)

    async def work(store: Store, loaded: Declared) -> Plan:
        return await read_plan(store, loaded.tasks, files.source, utcnow(), options, list(loaded.named.values()))

    plan = with_files(files, DatabaseOptions.of(args), work)
    if plan is None:
        return EXIT_ERROR
    if args.out and not plan.refused:
        Path(args.out).write_text(plan_json(plan) + "\n")
        print(f"saved plan to {args.out}; apply it with: reconciler apply {args.out}")
    print(show_plan(plan, output))
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
    from reconciler.operate.audit import Operator
    from reconciler.output.plan_text import plan_text
    from reconciler.reconcile.apply import apply_tasks

    files, output = FilesOptions.of(args), OutputOptions(no_color=args.no_color)
    verdict = VerdictOptions.of(args)
    operator = Operator.resolve(args.actor, args.reason)
    saved = read_saved_plan(args.planfile, files.source) if args.planfile else None

    async def work(store: Store, loaded: Declared) -> int:
        await store.init_schema()  # only now: files with errors leave the database as it was, schema included
        options = replace(verdict_options(verdict, files, saved, apply=True, revision=args.revision), operator=operator)
        result = await apply_tasks(store, loaded.tasks, files.source, None, options, list(loaded.named.values()))
        print(plan_text(result.plan, colour=render.colour_wanted(sys.stdout, output.no_color)))
        print(f"Apply complete: {result.written} change(s) written." if result.written else "Nothing to apply.")
        return EXIT_OK

    code = with_files(files, DatabaseOptions.of(args), work)
    return EXIT_ERROR if code is None else code
