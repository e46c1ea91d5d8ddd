"""`reconciler export`: the database's tasks written as new files, never over existing ones."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reconciler.cli.options import DatabaseOptions
from reconciler.cli.runtime import with_store
from reconciler.clock import utcnow
from reconciler.db.store import Store, TaskRow
from reconciler.errors import EXIT_OK, UserError
from reconciler.files.problems import printable
from reconciler.reconcile.export import DEFAULT_OUT_DIR, Placeholders, check_targets, export_row, write_new


def _warn(message: str, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps({"ts": utcnow().isoformat(), "level": "warning", "message": message}), file=sys.stderr)
    else:
        print(f"warning: {printable(message)}", file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> int:
    async def work(store: Store) -> list[TaskRow]:
        async with store.connection() as conn:
            return await Store.tasks(conn)

    rows = with_store(DatabaseOptions.of(args), work)
    out = Path(DEFAULT_OUT_DIR if args.out_dir is None else args.out_dir)  # None: --help names it without importing us
    names = Placeholders()
    exported = [export_row(row, names) for row in sorted(rows, key=lambda r: r.id)]
    files = [(out / f"{e.id}.toml", e.text) for e in exported if e.text is not None]
    check_targets(out, [path for path, _ in files], args.force)
    for item in exported:
        for warning in item.warnings:
            _warn(warning, args.log_format)
    try:
        for path, text in files:
            write_new(path, text, args.force)
    except FileExistsError as exc:  # created since the check
        raise UserError(f"export: {printable(str(exc.filename))} appeared while exporting; run export again") from None
    except OSError as exc:
        raise UserError(f"export: cannot write {printable(str(exc.filename))} ({exc.strerror})") from None
    shown = printable(str(out))
    print(f"exported {len(files)} task(s) to {shown}; review them with: reconciler plan --tasks-dir {shown}")
    return EXIT_OK
