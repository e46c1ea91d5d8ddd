"""`backfill --wait` progress: one bar redrawn in place on a terminal, a plain line per 10 % otherwise; the
outcome names the occurrences that did not succeed; `--list` counts every occurrence (they add up to the total);
listings of thousands of occurrences are bounded; a stalled `--wait` says what holds it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reconciler.db.backfill_queries import UnsuccessfulRow
from reconciler.output.backfill import (
    Progress,
    bounded,
    counts,
    list_item,
    list_text,
    outcome_lines,
    runs_cell,
    stall_text,
    state,
    succeeded_all,
    total,
)


def reading(succeeded: int, unsuccessful: int = 0, running: int = 0, dropped: int = 0, **extra: Any) -> dict[str, Any]:
    queued = 40
    waiting = queued - dropped - succeeded - unsuccessful - running
    return {
        "id": 7, "task_id": "nightly", "queued": queued, "waiting": waiting, "running": running,
        "succeeded": succeeded, "unsuccessful": unsuccessful, "dropped": dropped, "cancelled_at": None, **extra,
    }  # fmt: skip


def test_a_terminal_gets_one_bar_redrawn_in_place() -> None:
    progress = Progress(7, terminal=True)
    first, half = progress.update(reading(0, running=4)), progress.update(reading(20))
    assert first is not None and half is not None
    assert first.startswith("\r[" + "." * 30 + "] 0/40   0%") and first.endswith("\x1b[K")
    assert half.startswith("\r[" + "#" * 15 + "." * 15 + "] 20/40  50%") and "20 queued" in half
    assert "\n" not in first + half


def test_elsewhere_a_plain_line_per_ten_percent() -> None:
    progress = Progress(7, terminal=False)
    lines = [progress.update(reading(done)) for done in range(41)]
    printed = [line for line in lines if line is not None]
    assert len(printed) == 11  # 0 %, 10 %, … 100 %
    assert printed[0] == "backfill 7: 0/40 done (0%): 0 succeeded, 0 failed, 0 running, 40 queued"
    assert printed[-1].startswith("backfill 7: 40/40 done (100%)")
    assert all("\r" not in line and "\x1b" not in line for line in printed)


def test_the_outcome_names_what_did_not_succeed_and_masks_secrets() -> None:
    at = datetime(2026, 11, 1, 1, tzinfo=UTC)
    failure = UnsuccessfulRow(scheduled_for=at, id=12, status="failed", http_status=500, error=None)
    lost = UnsuccessfulRow(
        scheduled_for=at, id=13, status="lost", http_status=None, error="https://u:hunter2@h/x\nsecond line"
    )
    lines = outcome_lines(reading(38, unsuccessful=2), [failure, lost])
    assert lines[0] == "backfill 7 of nightly: 38 succeeded, 2 did not:"
    assert lines[1] == "  2026-11-01 01:00:00 UTC: failed (run 12): HTTP 500"
    assert "hunter2" not in lines[2] and "\n" not in lines[2]
    assert outcome_lines(reading(40), []) == ["backfill 7 of nightly: all 40 run(s) succeeded"]


def test_a_cancelled_backfill_is_not_all_succeeded() -> None:
    row = reading(10, dropped=30, cancelled_at=datetime(2026, 11, 1, tzinfo=UTC))
    assert state(row) == "cancelled" and not succeeded_all(row)
    dropped = "backfill 7 of nightly: 10 run(s) succeeded; 30 never ran (dropped: cancelled, or the task deleted)"
    assert outcome_lines(row, []) == [dropped]
    assert state(reading(40)) == "done" and succeeded_all(reading(40))
    assert state(reading(0)) == "queued" and state(reading(3, running=1)) == "running"


def listed(queued: int, **counted: int) -> dict[str, Any]:
    """A `--list` row: `queued` occurrences, counted by their newest run (the rest pruned by retention)."""
    zero = {"waiting": 0, "running": 0, "succeeded": 0, "unsuccessful": 0, "dropped": 0}
    return {
        "id": 3, "task_id": "nightly", "range_from": datetime(2026, 11, 1, tzinfo=UTC),
        "range_to": datetime(2026, 11, 2, tzinfo=UTC), "reprocess": "none", "actor": "bob", "reason": None,
        "queued": queued, "cancelled_at": None, **zero, **counted,
    }  # fmt: skip


def test_a_cancelled_backfill_s_list_row_shows_what_it_dropped() -> None:
    row = listed(288, succeeded=49, dropped=239, cancelled_at=datetime(2026, 11, 2, tzinfo=UTC))
    assert runs_cell(row) == "49/288 run · 49 ok · 239 dropped"
    assert "cancelled  49/288 run · 49 ok · 239 dropped  bob" in list_text([row])  # type: ignore[list-item]


def test_the_list_counts_add_up_to_the_total_in_every_state() -> None:
    cancelled_at = datetime(2026, 11, 2, tzinfo=UTC)
    rows = {
        "queued": listed(24, waiting=24),
        "running": listed(42, succeeded=18, unsuccessful=2, running=4, waiting=18),
        "done": listed(24, succeeded=23, unsuccessful=1),
        "cancelled": listed(288, succeeded=10, running=2, dropped=276, cancelled_at=cancelled_at),
    }
    for name, row in rows.items():
        assert state(row) == name
        assert sum(count for count, _ in counts(row)) == total(row), name
    assert runs_cell(rows["running"]) == "20/42 run · 18 ok · 2 failed · 4 running · 18 queued"
    pruned = listed(24, succeeded=4)  # retention deleted 20 of its finished runs
    assert runs_cell(pruned) == "4/24 run · 4 ok · 20 pruned" and list_item(pruned)["pruned"] == 20


def test_the_progress_of_a_cancelled_backfill_counts_what_it_dropped() -> None:
    line = Progress(7, terminal=False).update(reading(10, dropped=30, cancelled_at=datetime(2026, 11, 1, tzinfo=UTC)))
    assert line == "backfill 7: 10/40 done (25%): 10 succeeded, 0 failed, 0 running, 0 queued, 30 dropped"


def test_long_listings_keep_their_first_and_last_lines_and_count_the_rest() -> None:
    lines = [f"  + {n}" for n in range(288)]
    assert bounded(lines[:5], 5) == lines[:5]
    summary = bounded(lines, 5)
    assert summary == ["  + 0", "  + 1", "  + 2", "  … 283 more (--format json lists every one)", "  + 286", "  + 287"]
    preview = bounded(lines, 100)
    assert len(preview) == 101 and preview[0] == "  + 0" and preview[-1] == "  + 287"
    assert "  … 188 more (--format json lists every one)" in preview


def test_a_stall_says_the_reasons_that_hold_else_every_one_there_may_be() -> None:
    held = stall_text(7, 30, ["nightly is paused by alice (incident)"])
    said = "nightly is paused by alice (incident); Ctrl-C stops waiting, not the backfill"
    assert held == f"backfill 7: no run ended in 30 s: {said}"
    unknown = stall_text(7, 30, [])
    assert "a free slot" in unknown and "the end of a pause" in unknown
