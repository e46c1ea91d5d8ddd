"""What `backfill --wait` says when no run ended for a while: the reasons that hold its next run now, as the
claim decides (claim_queued, backfill_may_start), and nothing else; [] when none the code knows of holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reconciler.db.backfill_queries import StallRow
from reconciler.operate.backfill import held_by

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def stall(**changes: Any) -> StallRow:
    """A backfill whose next run nothing holds: an engine live, no pause, a free slot, an hour to the next
    occurrence, a run that takes 60 s."""
    row: dict[str, Any] = {
        "now": NOW, "engines": 1, "task_id": "nightly", "enabled": True, "next_run_at": NOW + timedelta(hours=1),
        "slots": 1, "in_flight": 0, "ahead": 0, "paused_by": None, "paused_reason": None, "paused_until": None,
        "run_id": 40, "status": "queued", "scheduled_for": datetime(2026, 11, 1, tzinfo=UTC), "hold_seconds": 60.0,
        "running": 0, "full_limits": [], "occurrence_run": None,
    }  # fmt: skip
    return StallRow(**{**row, **changes})  # type: ignore[typeddict-item]


def test_nothing_known_holds_a_free_run() -> None:
    assert held_by(stall(), 30) == []


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"engines": 0}, "no engine is live (none sent a heartbeat in the last 30 s): start `reconciler engine`"),
        (
            {"paused_by": "alice", "paused_reason": "incident", "paused_until": None},
            "nightly is paused by alice (incident): its backfill runs wait until the pause ends "
            "(`reconciler resume nightly`)",
        ),
        ({"full_limits": ["warehouse"]}, "nightly's limit warehouse has no room now"),
        ({"in_flight": 1}, "nightly's 1 slot(s) (policy.max_running_instances) are taken: 1 run(s) in flight;"),
        ({"slots": 2, "in_flight": 1, "ahead": 1}, "1 run(s) in flight and 1 queued run(s) go first"),
        (
            {"next_run_at": NOW + timedelta(seconds=30)},
            "nightly's next occurrence is 2026-12-02 12:00:30 UTC, 30 s away, and a run may take 60 s",
        ),
        ({"next_run_at": NOW - timedelta(minutes=1)}, "occurrence 2026-12-02 11:59:00 UTC is due and not fired yet"),
        ({"occurrence_run": 12}, "run 12 of the same occurrence (2026-11-01 00:00:00 UTC) is in flight"),
        ({"status": "running", "running": 3}, "its last 3 run(s) are in flight; a run of nightly may take 60 s"),
    ],
)
def test_the_one_reason_that_holds_is_the_one_said(changes: dict[str, Any], reason: str) -> None:
    [said] = held_by(stall(**changes), 30)
    assert reason in said


def test_a_disabled_task_s_backfill_is_not_held_by_its_schedule() -> None:
    assert held_by(stall(enabled=False, next_run_at=NOW), 30) == []


def test_every_reason_that_holds_is_said_most_fundamental_first() -> None:
    reasons = held_by(stall(engines=0, paused_by="alice", paused_reason="incident", in_flight=1), 30)
    assert [reason.split(" ")[:2] for reason in reasons] == [["no", "engine"], ["nightly", "is"], ["nightly's", "1"]]
