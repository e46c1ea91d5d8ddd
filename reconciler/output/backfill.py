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
PREVIEW_ROWS = 100  # occurrences a dry run lists before `… N more` (--format json lists every one)
SUMMARY_ROWS = 5  # occurrences a real run lists: the first and the last, a few around them
TAIL_ROWS = 10  # of those, the last ones (the last occurrence always among them)
COUNTED = (("succeeded", "succeeded"), ("unsuccessful", "failed"), ("running", "running"), ("waiting", "queued"))


def listing_lines(found: Listing, shown: int = PREVIEW_ROWS) -> list[str]:
    """The occurrences of the range in time order: `+` queued, `=` left out (it has a run), `-` excluded; at most
    `shown` of them (the first ones and the last TAIL_ROWS, with `… N more` between), then the counts and notes."""
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
    lines = [safe(head), *bounded([safe(line) for _, line in sorted(rows, key=lambda pair: pair[0])], shown)]
    again = " (--reprocess failed or all re-runs them)" if found.reprocess != "all" and found.already_run else ""
    taken_away = f"{'at least ' if not found.counted else ''}{found.excluded_count:,} excluded"
    lines.append(f"{len(found.queue)} to queue, {len(found.already_run)} already run{again}, {taken_away}.")
    lines += [safe(f"note: {note}") for note in found.notes]
    return lines


def bounded(lines: Sequence[str], shown: int) -> list[str]:
    """`lines` when at most `shown`; else the first ones and the last TAIL_ROWS (the last at least), `shown` in
    all, with `  … N more` between: a range of thousands of occurrences stays a screenful in a CI log."""
    if len(lines) <= shown:
        return list(lines)
    tail = max(1, min(TAIL_ROWS, shown // 2))
    first = max(1, shown - tail)
    more = len(lines) - first - tail
    return [*lines[:first], f"  … {more:,} more (--format json lists every one)", *lines[-tail:]]


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
    """The occurrences the backfill queued: queued + running + succeeded + failed + dropped (+ pruned)."""
    return int(row["queued"])


def finished(row: Mapping[str, Any]) -> int:
    """The occurrences that ran: their newest run succeeded or failed (missed, lost)."""
    return int(row["succeeded"]) + int(row["unsuccessful"])


def pruned(row: Mapping[str, Any]) -> int:
    """Occurrences whose runs retention deleted (keep_runs, --keep-runs-days): the counts no longer see them."""
    seen = sum(int(row[key]) for key in ("waiting", "running", "succeeded", "unsuccessful", "dropped"))
    return max(0, total(row) - seen)


def counts(row: Mapping[str, Any]) -> list[tuple[int, str]]:
    """Every occurrence by its newest run, in words, the counts that are not 0: they add up to total(row)."""
    every = [
        (int(row["succeeded"]), "ok"),
        (int(row["unsuccessful"]), "failed"),
        (int(row["running"]), "running"),
        (int(row["waiting"]), "queued"),
        (int(row["dropped"]), "dropped"),
        (pruned(row), "pruned"),
    ]
    return [(count, word) for count, word in every if count]


def runs_cell(row: Mapping[str, Any]) -> str:
    """`49/288 run · 49 ok · 239 dropped`: what ran of the total, then every occurrence by its newest run."""
    return " · ".join([f"{finished(row)}/{total(row)} run", *(f"{count} {word}" for count, word in counts(row))])


def list_text(rows: Sequence[BackfillRow]) -> str:
    """`reconciler backfill --list`: one aligned row per backfill, newest first."""
    header = ["ID", "TASK", "FROM (UTC)", "TO (UTC)", "REPROCESS", "STATE", "RUNS", "BY", "REASON"]
    cells = [
        [
            str(row["id"]),
            row["task_id"],
            utc_text(row["range_from"]),
            utc_text(row["range_to"]),
            row["reprocess"],
            state(row),
            runs_cell(row),
            row["actor"],
            row["reason"] or "",
        ]
        for row in rows
    ]
    return "\n".join(table(header, cells, right=(0,)))


def list_item(row: Mapping[str, Any]) -> dict[str, Any]:
    """What `--list --format json` adds to a backfill's row: its state, how many ran, how many retention pruned."""
    return {"state": state(row), "finished": finished(row), "pruned": pruned(row)}


def counts_text(row: Mapping[str, Any]) -> str:
    """`4 succeeded, 1 failed, 1 running, 18 queued` (and dropped, pruned when there are): they add up to the total."""
    shown = [f"{row[key]} {word}" for key, word in COUNTED]
    gone = [f"{count} {word}" for count, word in counts(row) if word in ("dropped", "pruned")]
    return ", ".join([*shown, *gone])


def stall_text(backfill_id: int, quiet_seconds: float, reasons: Sequence[str]) -> str:
    """`--wait` when no run ended for a while: the reasons that hold now, else every reason there may be."""
    if reasons:
        why = "; and ".join(reasons)
    else:
        why = (
            "its runs may wait for a free slot, an engine of the task's source (`reconciler status` lists live "
            "engines), the end of a pause and room before the task's next occurrence (`reconciler explain ID`)"
        )
    quiet = f"backfill {backfill_id}: no run ended in {quiet_seconds:g} s"
    return safe(f"{quiet}: {why}; Ctrl-C stops waiting, not the backfill")


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
