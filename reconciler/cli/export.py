"""`reconciler export`: the database's tasks and the items of every declared kind written as new files, never over
existing ones."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.cli.options import ExportOptions
from reconciler.clock import utcnow
from reconciler.errors import EXIT_OK, UserError
from reconciler.files.locations import beside

if TYPE_CHECKING:
    from reconciler.db.rows import TaskRow
    from reconciler.db.store import Store
    from reconciler.reconcile.diff import StoredRow
    from reconciler.reconcile.export import Exported


def _warn(message: str, fmt: str) -> None:
    from reconciler.files.problems import printable

    if fmt == "json":
        print(json.dumps({"ts": utcnow().isoformat(), "level": "warning", "message": message}), file=sys.stderr)
    else:
        print(f"warning: {printable(message)}", file=sys.stderr)


def export(options: ExportOptions) -> int:
    """The database's tasks and the items of every declared kind as new files (adoption)."""
    from reconciler.cli.runtime import with_store
    from reconciler.db.store import Store
    from reconciler.files.problems import printable
    from reconciler.files.registry import named_kinds
    from reconciler.reconcile.declared import stored_rows
    from reconciler.reconcile.export import (
        DEFAULT_OUT_DIR,
        Placeholders,
        check_beside_dir,
        check_targets,
        export_item,
        export_row,
        one_per_name,
        write_new,
    )

    kinds = named_kinds()

    async def work(store: Store) -> tuple[list[TaskRow], list[list[StoredRow]]]:
        async with store.connection() as conn:
            return await Store.tasks(conn), [await stored_rows(conn, kind) for kind in kinds]

    rows, stored = with_store(options.database, work)
    source = options.source
    if source is not None:  # --source given: that source's files only, which `plan --source` then owns
        rows = [row for row in rows if row.source == source]
        stored = [[row for row in items if row.source == source] for items in stored]
    out = Path(DEFAULT_OUT_DIR if options.out_dir is None else options.out_dir)  # None: --help names it unimported
    names = Placeholders()
    exported = [export_row(row, names) for row in sorted(rows, key=lambda r: r.id)]
    files = _files(out, exported)
    check_targets(out, [path for path, _ in files], options.force)
    written: list[tuple[Path, str]] = []
    counts: list[str] = []
    # Every other kind goes where every command looks for it: its directory beside the tasks'.
    for kind, items in zip(kinds, stored, strict=True):
        chosen, warnings = one_per_name(items, kind.name)
        folder = Path(beside(str(out), kind.directory))
        kind_items = [export_item(kind, row, names) for row in chosen]
        kind_files = _files(folder, kind_items)
        if kind_files:
            check_beside_dir(folder, out, options.force, f"{kind.name}s")
            check_targets(folder, [path for path, _ in kind_files], options.force, f"{kind.name}s directory")
            counts.append(f"{len(kind_files)} {kind.name}(s) to {printable(str(folder))}")
        written += kind_files
        for warning in [*warnings, *(line for item in kind_items for line in item.warnings)]:
            _warn(warning, options.log_format)
    for item in exported:
        for warning in item.warnings:
            _warn(warning, options.log_format)
    try:
        for path, text in [*written, *files]:
            write_new(path, text, options.force)
    except FileExistsError as exc:  # created since the check
        raise UserError(f"export: {printable(str(exc.filename))} appeared while exporting; run export again") from None
    except OSError as exc:
        raise UserError(f"export: cannot write {printable(str(exc.filename))} ({exc.strerror})") from None
    shown = printable(str(out))
    summary = " and ".join([f"exported {len(files)} task(s) to {shown}", *counts])
    print(f"{summary}; {review_hint(options, shown, {row.source for row in rows})}")
    return EXIT_OK


def review_hint(options: ExportOptions, shown: str, sources: set[str]) -> str:
    """The command that plans the export against the database it came from, run from here: "No changes". The same
    --dsn (as written when it holds no password), and the source of the files (a plan owns one source)."""
    from reconciler.db.errors import holds_password

    dsn = options.database.dsn
    given = "" if dsn is None else f"--dsn {shlex.quote(dsn) if not holds_password(dsn) else 'DSN'} "
    source = options.source if options.source is not None else next(iter(sources)) if len(sources) == 1 else None
    named = f" --source {shlex.quote(source)}" if source not in (None, "default") else ""
    hint = f"review them with: reconciler {given}plan --tasks-dir {shlex.quote(shown)}{named}"
    if source is None and len(sources) > 1:
        hint += f" (the tasks of {len(sources)} sources: export one with --source NAME to plan it clean)"
    return hint + (" (DSN: the one given to export)" if given.endswith("DSN ") else "")


def _files(folder: Path, exported: list[Exported]) -> list[tuple[Path, str]]:
    return [(folder / f"{item.id}.toml", item.text) for item in exported if item.text is not None]
