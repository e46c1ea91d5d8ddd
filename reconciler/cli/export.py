"""`reconciler export`: the database's tasks, notifiers, calendars and limits written as new files, never over
existing ones."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from reconciler.cli.options import DatabaseOptions
from reconciler.cli.parser import beside
from reconciler.cli.runtime import with_store
from reconciler.clock import utcnow
from reconciler.db.rows import TaskRow
from reconciler.db.store import Store
from reconciler.errors import EXIT_OK, UserError
from reconciler.files.calendars import CALENDARS
from reconciler.files.limits import LIMITS
from reconciler.files.notifiers import NOTIFIERS
from reconciler.files.problems import printable
from reconciler.reconcile.calendars import CalendarRow, calendar_rows
from reconciler.reconcile.export import (
    DEFAULT_OUT_DIR,
    Exported,
    Placeholders,
    check_beside_dir,
    check_targets,
    export_calendar,
    export_limit,
    export_notifier,
    export_row,
    one_per_name,
    write_new,
)
from reconciler.reconcile.limits import LimitRow, limit_rows
from reconciler.reconcile.notifiers import NotifierRow, notifier_rows


def _warn(message: str, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps({"ts": utcnow().isoformat(), "level": "warning", "message": message}), file=sys.stderr)
    else:
        print(f"warning: {printable(message)}", file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> int:
    async def work(store: Store) -> tuple[list[TaskRow], list[NotifierRow], list[CalendarRow], list[LimitRow]]:
        async with store.connection() as conn:
            kinds = await notifier_rows(conn), await calendar_rows(conn), await limit_rows(conn)
            return await Store.tasks(conn), *kinds

    rows, notifier_list, calendar_list, limit_list = with_store(DatabaseOptions.of(args), work)
    if args.sources:  # --source given: that source's files only, which `plan --source` then owns
        rows = [row for row in rows if row.source == args.source]
        notifier_list = [row for row in notifier_list if row.source == args.source]
        calendar_list = [row for row in calendar_list if row.source == args.source]
        limit_list = [row for row in limit_list if row.source == args.source]
    out = Path(DEFAULT_OUT_DIR if args.out_dir is None else args.out_dir)  # None: --help names it without importing us
    names = Placeholders()
    exported = [export_row(row, names) for row in sorted(rows, key=lambda r: r.id)]
    files = _files(out, exported)
    check_targets(out, [path for path, _ in files], args.force)
    # Notifiers, calendars and limits go where every command looks for them: their directories beside the tasks'.
    chosen, clashes = one_per_name(notifier_list)
    chosen_calendars, calendar_clashes = one_per_name(calendar_list, "calendar")
    chosen_limits, limit_clashes = one_per_name(limit_list, "limit")
    beside_kinds = [
        (NOTIFIERS.directory, "notifier", [export_notifier(row, names) for row in chosen], clashes),
        (CALENDARS.directory, "calendar", [export_calendar(row) for row in chosen_calendars], calendar_clashes),
        (LIMITS.directory, "limit", [export_limit(row) for row in chosen_limits], limit_clashes),
    ]
    written: list[tuple[Path, str]] = []
    counts: list[str] = []
    for directory, what, items, warnings in beside_kinds:
        folder = Path(beside(str(out), directory))
        kind_files = _files(folder, items)
        if kind_files:
            check_beside_dir(folder, out, args.force, f"{what}s")
            check_targets(folder, [path for path, _ in kind_files], args.force, f"{what}s directory")
            counts.append(f"{len(kind_files)} {what}(s) to {printable(str(folder))}")
        written += kind_files
        for warning in [*warnings, *(line for item in items for line in item.warnings)]:
            _warn(warning, args.log_format)
    for item in exported:
        for warning in item.warnings:
            _warn(warning, args.log_format)
    try:
        for path, text in [*written, *files]:
            write_new(path, text, args.force)
    except FileExistsError as exc:  # created since the check
        raise UserError(f"export: {printable(str(exc.filename))} appeared while exporting; run export again") from None
    except OSError as exc:
        raise UserError(f"export: cannot write {printable(str(exc.filename))} ({exc.strerror})") from None
    shown = printable(str(out))
    summary = " and ".join([f"exported {len(files)} task(s) to {shown}", *counts])
    source = f" --source {shlex.quote(args.source)}" if args.sources else ""
    print(f"{summary}; review them with: reconciler plan --tasks-dir {shown}{source}")
    return EXIT_OK


def _files(folder: Path, exported: list[Exported]) -> list[tuple[Path, str]]:
    return [(folder / f"{item.id}.toml", item.text) for item in exported if item.text is not None]
