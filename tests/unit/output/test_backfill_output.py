"""`backfill --wait` progress: one bar redrawn in place on a terminal, a plain line per 10 % otherwise; the
outcome names the occurrences that did not succeed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reconciler.db.backfill_queries import UnsuccessfulRow
from reconciler.output.backfill import Progress, outcome_lines, state, succeeded_all


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
