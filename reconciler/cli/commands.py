"""The declared-files commands: validate, next, plan, apply.

Each is a typed function of its options (cli/options.py) returning an exit code. This module is imported with the
parser: everything heavy (the files' models, psycopg, the renderings) is imported inside the function that uses it,
so `--help` and `--version` start light and `validate` and `next` start without psycopg.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.cli.console import err
from reconciler.cli.options import (
    ApplyCommandOptions,
    FilesOptions,
    NextOptions,
    OutputOptions,
    PlanOptions,
    ValidateOptions,
    VerdictOptions,
)
from reconciler.clock import utcnow
from reconciler.errors import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, UserError

if TYPE_CHECKING:
    from reconciler.db.store import Store
    from reconciler.files.declared import Declared
    from reconciler.files.tasks import Task
    from reconciler.output.text import NextRow
    from reconciler.reconcile.apply import ApplyOptions
    from reconciler.reconcile.plan import Plan
    from reconciler.schedule.base import Fire


def validate(options: ValidateOptions) -> int:
    """Check every declared file (no database): one line per error, warnings of schedules that cannot fire."""
    from reconciler.cli.declared import load_or_report
    from reconciler.files.calendars import holiday_warnings
    from reconciler.files.environment import policy_errors, unset_errors
    from reconciler.files.project import shown_path
    from reconciler.files.tasks import fire_warnings
    from reconciler.spec.environment import EnvPolicy, globs

    files = options.files
    result = load_or_report(files)
    if result is None:
        return EXIT_ERROR
    # Schedules that cannot fire and files no task names are valid, so they warn on stderr and leave the exit
    # code alone.
    found = [*result.warnings, *fire_warnings(result.tasks, utcnow()), *holiday_warnings(result.named)]
    warnings = sorted(found, key=lambda w: (w.path, w.line))
    for warning in warnings:
        err(str(warning))
    items = result.items()
    problems = policy_errors(items, EnvPolicy(globs(list(options.allow_env)))) if options.env_policy else []
    missing = unset_errors(items, os.environ) if options.check_env else []
    for problem in sorted(problems + missing, key=lambda e: (e.path, e.line)):
        err(str(problem))
    tasks_dir = shown_path(files.tasks_dir)
    if problems:
        err(f"{len(problems)} error(s) in {tasks_dir}: variables the engines will not let tasks read")
    if missing:
        err(f"{len(missing)} error(s) in {tasks_dir}: variables not set in this environment")
    if problems or missing:
        return EXIT_ERROR
    noted = f" ({len(warnings)} warning(s) on stderr)" if warnings else ""
    read = f"{len(result.tasks)} task file(s) in {tasks_dir}"
    for named in result.named.values():
        if named.present:
            read += f" and {len(named.by_name)} {named.kind.name} file(s) in {shown_path(named.root)}"
    print(f"{read} are valid{noted}")
    return EXIT_OK


def next_fire_times(options: NextOptions) -> int:
    """The next fire times of the tasks named (or all), in their zones and UTC (no database)."""
    from reconciler.cli.declared import load_or_report
    from reconciler.output import text as render
    from reconciler.spec.values import parse_instant

    result = load_or_report(options.files)
    if result is None:
        return EXIT_ERROR
    by_id = {task.id: task for task in result.tasks}
    unknown = [i for i in options.ids if i not in by_id]
    if unknown:
        raise UserError(f"unknown task id(s): {', '.join(unknown)}; see `reconciler validate` for the ids")
    after = parse_instant(options.after, "--after") if options.after else utcnow()
    chosen = [by_id[i] for i in options.ids] if options.ids else result.tasks
    rows = [shown_next(task, after, options.count) for task in chosen]
    print(render.next_json(rows) if options.output.format == "json" else render.next_text(rows))
    for note in dict.fromkeys(note for row in rows if (note := holidays_ending(row, after, options.count))):
        err(f"warning: {note}")
    return EXIT_OK


def holidays_ending(row: NextRow, after: datetime, count: int) -> str | None:
    """Where the holiday data of the task's business-days calendar ends, when the span shown reaches past it."""
    from zoneinfo import ZoneInfo

    from reconciler.schedule.business import holidays_note

    name = getattr(row.task.spec.trigger, "business_days", None)
    bound = row.task.spec.calendars or {}
    if name is None or name not in bound:
        return None
    until = span_end(row.fires, after, count)
    zone = ZoneInfo(row.task.spec.timezone)
    return holidays_note(name, bound[name], (after.astimezone(zone).date(), until.astimezone(zone).date()))


def shown_next(task: Task, after: datetime, count: int) -> NextRow:
    """A task's next `count` occurrences after `after`, and what its calendars take away in that span (up to the
    last one shown; a year when there are fewer): in time order, however far, up to 100 per occurrence shown on
    average, and how many more. A year of a task that fires no more is listed, not counted (it may hold half a
    million minutes)."""
    from reconciler.output.text import NextRow
    from reconciler.schedule.excluded import MAX_COUNTED, MAX_EXCLUDED, excluded_span
    from reconciler.schedule.preview import upcoming

    fires = upcoming(task.schedule, after, count)
    if task.spec.calendars is None:
        return NextRow(task, fires, [])
    full = len(fires) == count and bool(fires)
    until = span_end(fires, after, count)
    found = excluded_span(task.schedule, after, until, MAX_EXCLUDED * count, MAX_COUNTED if full else 0)
    return NextRow(task, fires, found.listed, found.unlisted, found.exact)


def span_end(fires: list[Fire], after: datetime, count: int) -> datetime:
    """The end of the span `next` shows: its last occurrence when it shows `count` of them, else a year on."""
    from reconciler.schedule.preview import A_YEAR

    return fires[-1].at if len(fires) == count and fires else after + A_YEAR


def show_plan(plan: Plan, output: OutputOptions) -> str:
    """The plan in --format; text is coloured on a terminal unless --no-color or NO_COLOR says not to."""
    from reconciler.output import text as render
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
    from reconciler.reconcile.revision import Revision, detect, dirty_verdict, under_ci, working_tree

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
        revision=detect(checkout, revision, dirty=tree.changed) if apply else Revision(None),
        dirty_refusal=refusal,
    )


def plan(options: PlanOptions) -> int:
    """The diff of the files against the database, with apply's verdict (read-only)."""
    from reconciler.cli.runtime import with_files
    from reconciler.output.plan_json import plan_json
    from reconciler.output.text import safe
    from reconciler.reconcile.apply import read_plan

    files = options.files
    verdict = verdict_options(options.verdict, files)

    async def work(store: Store, loaded: Declared) -> Plan:
        return await read_plan(store, loaded.tasks, files.source, utcnow(), verdict, list(loaded.named.values()))

    found = with_files(files, options.database, work)
    if found is None:
        return EXIT_ERROR
    if options.out and not found.refused:
        Path(options.out).write_text(plan_json(found) + "\n")
        print(f"saved plan to {options.out}; apply it with: reconciler apply {options.out}")
    print(show_plan(found, options.output))
    if found.refused:
        for reason in found.refused:  # conflicts among them, as file:line: key: message
            err(safe(reason))
        not_saved = f"; {options.out} was not saved" if options.out else ""
        err(f"apply with these options would refuse this plan ({len(found.refused)} reason(s)){not_saved}")
        return EXIT_ERROR
    return EXIT_CHANGES if options.detailed_exitcode and found.has_changes else EXIT_OK


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


def apply(options: ApplyCommandOptions) -> int:
    """Apply the diff (or a saved plan) in one transaction."""
    from reconciler.cli.runtime import with_files
    from reconciler.operate.audit import Operator
    from reconciler.output.plan_text import plan_text
    from reconciler.output.text import colour_wanted
    from reconciler.reconcile.apply import apply_tasks

    files = options.files
    operator = Operator.resolve(options.operator.actor, options.operator.reason)
    saved = read_saved_plan(options.planfile, files.source) if options.planfile else None

    async def work(store: Store, loaded: Declared) -> int:
        await store.init_schema()  # only now: files with errors leave the database as it was, schema included
        verdict = verdict_options(options.verdict, files, saved, apply=True, revision=options.revision)
        result = await apply_tasks(
            store, loaded.tasks, files.source, None, replace(verdict, operator=operator), list(loaded.named.values())
        )
        print(plan_text(result.plan, colour=colour_wanted(sys.stdout, options.no_color)))
        print(f"Apply complete: {result.written} change(s) written." if result.written else "Nothing to apply.")
        return EXIT_OK

    code = with_files(files, options.database, work)
    return EXIT_ERROR if code is None else code
