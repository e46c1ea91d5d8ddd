"""`reconciler export`: the database's tasks and notifiers written as new files, never over existing ones."""

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
from reconciler.db.store import Store, TaskRow
from reconciler.errors import EXIT_OK, UserError
from reconciler.files.notifiers import NOTIFIERS
from reconciler.files.problems import printable
from reconciler.reconcile.export import (
    DEFAULT_OUT_DIR,
    Exported,
    Placeholders,
    check_notifiers_dir,
    check_targets,
    export_notifier,
    export_row,
    one_per_name,
    write_new,
)
from reconciler.reconcile.notifiers import NotifierRow, notifier_rows


def _warn(message: str, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps({"ts": utcnow().isoformat(), "level": "warning", "message": message}), file=sys.stderr)
    else:
        print(f"warning: {printable(message)}", file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> int:
    async def work(store: Store) -> tuple[list[TaskRow], list[NotifierRow]]:
        async with store.connection() as conn:
            return await Store.tasks(conn), await notifier_rows(conn)

    rows, notifier_list = with_store(DatabaseOptions.of(args), work)
    if args.sources:  # --source given: that source's files only, which `plan --source` then owns
        rows = [row for row in rows if row.source == args.source]
        notifier_list = [row for row in notifier_list if row.source == args.source]
    out = Path(DEFAULT_OUT_DIR if args.out_dir is None else args.out_dir)  # None: --help names it without importing us
    # The notifiers go where every command looks for them: notifiers.d beside the tasks directory.
    notifiers_out = Path(beside(str(out), NOTIFIERS.directory))
    names = Placeholders()
    exported = [export_row(row, names) for row in sorted(rows, key=lambda r: r.id)]
    chosen, clashes = one_per_name(notifier_list)
    notifiers = [export_notifier(row, names) for row in chosen]
    files = _files(out, exported)
    notifier_files = _files(notifiers_out, notifiers)
    check_targets(out, [path for path, _ in files], args.force)
    if notifier_files:
        check_notifiers_dir(notifiers_out, out, args.force)
        check_targets(notifiers_out, [path for path, _ in notifier_files], args.force, "notifiers directory")
    for item in exported:
        for warning in item.warnings:
            _warn(warning, args.log_format)
    for warning in [*clashes, *(line for item in notifiers for line in item.warnings)]:
        _warn(warning, args.log_format)
    try:
        for path, text in [*notifier_files, *files]:
            write_new(path, text, args.force)
    except FileExistsError as exc:  # created since the check
        raise UserError(f"export: {printable(str(exc.filename))} appeared while exporting; run export again") from None
    except OSError as exc:
        raise UserError(f"export: cannot write {printable(str(exc.filename))} ({exc.strerror})") from None
    shown = printable(str(out))
    written = f"exported {len(files)} task(s) to {shown}"
    if notifier_files:
        written += f" and {len(notifier_files)} notifier(s) to {printable(str(notifiers_out))}"
    source = f" --source {shlex.quote(args.source)}" if args.sources else ""
    print(f"{written}; review them with: reconciler plan --tasks-dir {shown}{source}")
    return EXIT_OK


def _files(folder: Path, exported: list[Exported]) -> list[tuple[Path, str]]:
    return [(folder / f"{item.id}.toml", item.text) for item in exported if item.text is not None]
