"""`reconciler backfill`: list (dry run) or queue a past range of a task's occurrences, follow it (`--wait`),
list backfills (`--list`), cancel one (`--cancel N`). A typed function of its options returning an exit code;
what talks to the database is imported inside it."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING

from reconciler.cli.options import BackfillOptions
from reconciler.errors import EXIT_ERROR, EXIT_OK, UserError

if TYPE_CHECKING:
    from reconciler.db.backfill_queries import BackfillRow
    from reconciler.db.store import Store
    from reconciler.operate.backfill import Listing, Queued

WAIT_POLL_SECONDS = 0.5
QUIET_HINT_SECONDS = 30.0  # --wait: no run ended for this long → say what it waits for, once


def backfill(options: BackfillOptions) -> int:
    """Queue (or, --dry-run, list) a past range of a task's occurrences; --list and --cancel N."""
    from reconciler.cli.runtime import with_store
    from reconciler.operate.audit import Operator
    from reconciler.operate.backfill import queue

    if options.list:
        return _list(options)
    if options.cancel is not None:
        return _cancel(options, options.cancel)
    given = (("ID", options.id), ("--from", options.start), ("--to", options.end))
    missing = [option for option, value in given if not value]
    if missing:
        raise UserError(
            f"backfill: give {', '.join(missing)}: `reconciler backfill ID --from T --to T` (or --list, --cancel N)"
        )
    task_id, start, end = str(options.id), str(options.start), str(options.end)
    if options.dry_run:
        return _dry_run(options, task_id, start, end)
    operator = Operator.resolve(options.operator.actor, options.operator.reason)

    async def work(store: Store) -> int:
        done = await queue(store, task_id, start, end, options.reprocess, operator)
        _print_listing(done.listing, options.output.format, done)
        if done.backfill_id is None or not options.wait:
            return EXIT_OK
        return await follow(store, done.backfill_id)

    return with_store(options.database, work)


def _dry_run(options: BackfillOptions, task_id: str, start: str, end: str) -> int:
    from reconciler.cli.runtime import with_store
    from reconciler.operate.backfill import listing

    async def work(store: Store) -> Listing:
        async with store.reading() as conn:
            return await listing(conn, task_id, start, end, options.reprocess)

    _print_listing(with_store(options.database, work), options.output.format, None)
    return EXIT_OK


def _print_listing(found: Listing, fmt: str, done: Queued | None) -> None:
    from reconciler.output import backfill as render

    if fmt == "json":
        item = found.as_json()
        if done is not None:
            item["backfill_id"] = done.backfill_id
        print(json.dumps(item, indent=2, ensure_ascii=False))
        return
    # a dry run is the preview (bounded); the real run only sums up what it queued
    print("\n".join(render.listing_lines(found, render.PREVIEW_ROWS if done is None else render.SUMMARY_ROWS)))
    if done is None:
        print("dry run: nothing written")
    elif done.backfill_id is None:
        print("nothing to queue: no backfill created")
    else:
        print(
            f"queued backfill {done.backfill_id}: {len(found.queue)} run(s), oldest first (audit #{done.audit_id}); "
            f"`reconciler backfill --list` follows it, `reconciler backfill --cancel {done.backfill_id}` drops what is "
            "still queued",
            flush=True,
        )


async def _read(store: Store, backfill_id: int) -> BackfillRow:
    from reconciler.db import backfill_queries

    async with store.connection() as conn:
        rows = await backfill_queries.backfills_list(conn, task_id=None, id=backfill_id, limit=1)
    if not rows:
        raise UserError(f"backfill {backfill_id} is gone")
    return rows[0]


async def follow(store: Store, backfill_id: int, quiet_seconds: float = QUIET_HINT_SECONDS) -> int:
    """Poll the backfill until nothing of it is queued or running; show progress; exit 0 iff every run succeeded.
    When no run ends for `quiet_seconds`, say once what holds its runs."""
    from reconciler.db import backfill_queries
    from reconciler.operate.backfill import waits_for
    from reconciler.output import backfill as render
    from reconciler.output.views import ENGINE_LIVE_SECONDS

    terminal = sys.stdout.isatty()
    progress = render.Progress(backfill_id, terminal)
    quiet_since, seen, hinted = time.monotonic(), -1, False
    while True:
        row = await _read(store, backfill_id)
        text = progress.update(row)
        if text is not None:
            print(text, end="" if terminal else "\n", flush=True)
        if row["waiting"] + row["running"] == 0:
            break
        if render.finished(row) != seen:
            seen, quiet_since = render.finished(row), time.monotonic()
        elif not hinted and time.monotonic() - quiet_since > quiet_seconds:
            hinted = True
            reasons = await waits_for(store, backfill_id, ENGINE_LIVE_SECONDS)
            print(("\n" if terminal else "") + render.stall_text(backfill_id, quiet_seconds, reasons), flush=True)
        await asyncio.sleep(WAIT_POLL_SECONDS)
    if terminal:
        print()
    async with store.connection() as conn:
        failures = await backfill_queries.backfill_unsuccessful(conn, id=backfill_id, limit=render.SHOWN_FAILURES)
    print("\n".join(render.outcome_lines(row, failures)))
    return EXIT_OK if render.succeeded_all(row) else EXIT_ERROR


def _list(options: BackfillOptions) -> int:
    from reconciler.cli.runtime import with_store
    from reconciler.db import backfill_queries
    from reconciler.output import backfill as render
    from reconciler.output.text import json_rows, safe

    async def work(store: Store) -> list[BackfillRow]:
        async with store.reading() as conn:
            return await backfill_queries.backfills_list(conn, task_id=options.id, id=None, limit=options.limit)

    rows = with_store(options.database, work)
    if options.output.format == "json":
        items = [{**item, **render.list_item(row)} for item, row in zip(json_rows(rows), rows, strict=True)]
        print(json.dumps(items, indent=2, ensure_ascii=False))
    elif not rows:
        print("no backfills recorded" + (f" of {safe(options.id)}" if options.id else ""))
    else:
        print(render.list_text(rows))
    return EXIT_OK


def _cancel(options: BackfillOptions, backfill_id: int) -> int:
    from reconciler.cli.runtime import with_store
    from reconciler.operate.audit import Operator
    from reconciler.operate.backfill import cancel
    from reconciler.output.text import safe

    operator = Operator.resolve(options.operator.actor, options.operator.reason)

    async def work(store: Store) -> int:
        done = await cancel(store, backfill_id, operator)
        print(
            safe(
                f"cancelled backfill {done.backfill_id} of {done.task_id}: {done.dropped} queued run(s) dropped; "
                f"runs in flight finish (audit #{done.audit_id})"
            )
        )
        return EXIT_OK

    return with_store(options.database, work)
