"""`reconciler backfill` for people: the occurrences of a dry run (local and UTC, DST and calendar notes), the
list of backfills, and the progress of `--wait` (a bar on a terminal, a line per 10 % otherwise)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.clock import utc_text, when_text
from reconciler.db.backfill_queries import BackfillRow, UnsuccessfulRow
from reconciler.operate.backfill import Listing
from reconciler.output.masking import mask_text
from reconciler.output.text import excluded_lines, safe, table
from reconciler.schedule.describe import describe_trigger, fire_line

BAR_WIDTH = 30
STEP_PERCENT = 10  # a plain line each time this much more is done (not on a terminal)
SHOWN_FAILURES = 20


def listing_lines(found: Listing) -> list[str]:
    """Every occurrence of the range in time order: `+` queued, `=` left out (it has a run), and the excluded."""
    zone = found.zone
    head = (
        f"backfill of {found.task_id} ({describe_trigger(found.spec)}) over [{when_text(found.start, zone)}, "
        f"{when_text(found.end, zone)}), --reprocess {found.reprocess}:"
    )
    rows = [(fire.at, f"  + {fire_line(fire, zone)}") for fire in found.queue]
    for fire, run in found.already_run:
        by = f"backfill #{run['backfill_id']} " if run["backfill_id"] else ""
        rows.append((fire.at, f"  = {fire_line(fire, zone)}  already run: {by}run {run['id']} {run['status']}"))
    excluded = excluded_lines(found.excluded, zone)
    rows += [(item.at, f"  - {line}") for item, line in zip(found.excluded, excluded, strict=True)]
    lines = [safe(head), *(safe(line) for _, line in sorted(rows, key=lambda pair: pair[0]))]
    again = " (--reprocess failed or all re-runs them)" if found.reprocess != "all" and found.already_run else ""
    lines.append(
        f"{len(found.queue)} to queue, {len(found.already_run)} already run{again}, {len(found.excluded)} excluded."
    )
    lines += [safe(f"note: {note}") for note in found.notes]
    return lines


def state(row: Mapping[str, Any]) -> str:
    """queued (nothing started), running, done (nothing queued or running), cancelled."""
    if row["cancelled_at"] is not None:
        return "cancelled"
    if row["waiting"] + row["running"] == 0:
        return "done"
    if row["running"] + row["succeeded"] + row["unsuccessful"] == 0:
        return "queued"
    return "running"


def total(row: Mapping[str, Any]) -> int:
    """The occurrences the backfill runs: those it queued but the ones a cancel dropped."""
    return int(row["queued"]) - int(row["dropped"])


def finished(row: Mapping[str, Any]) -> int:
    return int(row["succeeded"]) + int(row["unsuccessful"])


def list_text(rows: Sequence[BackfillRow]) -> str:
    """`reconciler backfill --list`: one aligned row per backfill, newest first."""
    header = ["ID", "TASK", "FROM (UTC)", "TO (UTC)", "REPROCESS", "STATE", "DONE", "OK", "FAILED", "BY", "REASON"]
    cells = [
        [
            str(row["id"]),
            row["task_id"],
            utc_text(row["range_from"]),
            utc_text(row["range_to"]),
            row["reprocess"],
            state(row),
            f"{finished(row)}/{total(row)}",
            str(row["succeeded"]),
            str(row["unsuccessful"]),
            row["actor"],
            row["reason"] or "",
        ]
        for row in rows
    ]
    return "\n".join(table(header, cells, right=(0, 6, 7, 8)))


def counts_text(row: Mapping[str, Any]) -> str:
    ended = f"{row['succeeded']} succeeded, {row['unsuccessful']} failed"
    return f"{ended}, {row['running']} running, {row['waiting']} queued"


class Progress:
    """What `--wait` prints as a backfill's runs end: on a terminal one bar redrawn in place, otherwise a
    plain line each time another STEP_PERCENT is done (a CI log stays short)."""

    def __init__(self, backfill_id: int, terminal: bool) -> None:
        self.backfill_id = backfill_id
        self.terminal = terminal
        self.step = -1  # the last STEP_PERCENT step printed

    def update(self, row: Mapping[str, Any]) -> str | None:
        """The text to print for this reading (None: nothing new); on a terminal it starts with a carriage return."""
        done, of = finished(row), max(total(row), 1)
        percent = 100 * done // of
        if self.terminal:
            filled = BAR_WIDTH * done // of
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            return f"\r[{bar}] {done}/{total(row)} {percent:3d}%  {counts_text(row)}\x1b[K"
        step = percent // STEP_PERCENT
        if step == self.step:
            return None
        self.step = step
        return f"backfill {self.backfill_id}: {done}/{total(row)} done ({percent}%): {counts_text(row)}"


def succeeded_all(row: Mapping[str, Any]) -> bool:
    """Whether every occurrence the backfill queued ran and succeeded (none failed, none dropped by a cancel)."""
    return not row["unsuccessful"] and not row["dropped"]


def outcome_lines(row: Mapping[str, Any], failures: Sequence[UnsuccessfulRow]) -> list[str]:
    """The end of `--wait`: all succeeded, or which occurrences did not and why (the first SHOWN_FAILURES)."""
    name = f"backfill {row['id']} of {row['task_id']}"
    dropped = f"; {row['dropped']} never ran (dropped: cancelled, or the task deleted)" if row["dropped"] else ""
    if not row["unsuccessful"]:
        every = "all " if not row["dropped"] else ""
        return [safe(f"{name}: {every}{row['succeeded']} run(s) succeeded{dropped}")]
    lines = [safe(f"{name}: {row['succeeded']} succeeded, {row['unsuccessful']} did not{dropped}:")]
    for run in failures[:SHOWN_FAILURES]:
        why = run["error"] or (f"HTTP {run['http_status']}" if run["http_status"] is not None else "-")
        lines.append(safe(f"  {utc_text(run['scheduled_for'])}: {run['status']} (run {run['id']}): {mask_text(why)}"))
    if row["unsuccessful"] > SHOWN_FAILURES:
        more = row["unsuccessful"] - SHOWN_FAILURES
        lines.append(safe(f"  … and {more} more (`reconciler runs {row['task_id']} --status failed`)"))
    return lines
