"""The engine's claim decisions, table by table (pure, no database): which due occurrences a claim
finds (`due_occurrences`) and what it does with each (`decide`: misfire grace, coalesce, instance slots)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reconciler.engine.claim_plan import decide
from reconciler.schedule.catchup import ON_TIME_SECONDS, due_occurrences
from reconciler.spec.task import Policy
from tests.helpers import schedule

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@dataclass(frozen=True)
class Case:
    due: list[float]  # the occurrences, minutes after T0
    now: float  # minutes after T0
    policy: dict[str, Any]
    free_slots: int
    expected: list[tuple[float, str, str]]  # (minutes, kind, status), oldest first


CASES = {
    "nothing due": Case([], 0, {}, 1, []),
    "on time": Case([0], 0, {}, 1, [(0, "scheduled", "running")]),
    "late within the grace": Case([0], 0.99, {}, 1, [(0, "scheduled", "running")]),
    "late past the grace": Case([0], 1.01, {}, 1, [(0, "scheduled", "missed")]),
    "a grace of 0 still lets a claim be a second late": Case(
        [0], ON_TIME_SECONDS / 60, {"misfire_grace_seconds": 0}, 1, [(0, "scheduled", "running")]
    ),
    "a grace of 0, two seconds late": Case([0], 2 / 60, {"misfire_grace_seconds": 0}, 1, [(0, "scheduled", "missed")]),
    "no free slot: skipped": Case([0], 0, {}, 0, [(0, "scheduled", "skipped")]),
    "no free slot but late: missed, not skipped": Case([0], 5, {}, 0, [(0, "scheduled", "missed")]),
    "coalesce: the older ones are missed into the newest": Case(
        [0, 1, 2], 2, {}, 1, [(0, "catchup", "missed"), (1, "catchup", "missed"), (2, "scheduled", "running")]
    ),
    "coalesce, the newest past the grace": Case(
        [0, 1, 2], 4, {}, 1, [(0, "catchup", "missed"), (1, "catchup", "missed"), (2, "scheduled", "missed")]
    ),
    "coalesce, no slot": Case([0, 1], 1, {}, 0, [(0, "catchup", "missed"), (1, "scheduled", "skipped")]),
    "no coalesce: each within the grace runs, oldest first": Case(
        [0, 1, 2], 2, {"coalesce": False, "misfire_grace_seconds": 300, "max_running_instances": 3}, 3,
        [(0, "catchup", "running"), (1, "catchup", "running"), (2, "scheduled", "running")],
    ),
    "no coalesce: catch-up runs take the slots first": Case(
        [0, 1, 2], 2, {"coalesce": False, "misfire_grace_seconds": 300}, 2,
        [(0, "catchup", "running"), (1, "catchup", "running"), (2, "scheduled", "skipped")],
    ),
    "no coalesce: the ones past the grace are missed and take no slot": Case(
        [0, 1, 2], 2, {"coalesce": False, "misfire_grace_seconds": 90}, 1,
        [(0, "catchup", "missed"), (1, "catchup", "running"), (2, "scheduled", "skipped")],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_decide(case: Case) -> None:
    decisions = decide([at(m) for m in case.due], at(case.now), Policy(**case.policy), case.free_slots)
    assert [(d.scheduled_for, d.kind, d.status) for d in decisions] == [(at(m), k, s) for m, k, s in case.expected]
    for decision in decisions:
        assert (decision.error is None) == (decision.status == "running"), decision


NOTES = {
    "missed": ([0], 5, {}, 1, "missed: claimed late by 300 s, more than misfire_grace_seconds = 60"),
    "skipped": ([0], 0, {"max_running_instances": 3}, 0, "skipped: max_running_instances = 3 already running"),
    "coalesced": ([0, 1], 1, {}, 1, "coalesced into the run for 2026-12-04 12:01:00 UTC (late by 60 s)"),
}


@pytest.mark.parametrize(("due", "now", "policy", "slots", "note"), NOTES.values(), ids=NOTES.keys())
def test_each_decision_says_why(due: list[float], now: float, policy: dict[str, Any], slots: int, note: str) -> None:
    first = decide([at(m) for m in due], at(now), Policy(**policy), slots)[0]
    assert first.error == note


@dataclass(frozen=True)
class Due:
    first: float  # the task's next_run_at, minutes after T0
    now: float
    policy: dict[str, Any]
    cap: int
    occurrences: list[float]
    following: float | None


EVERY_MINUTE = {"kind": "cron", "expr": "* * * * *"}
DUE = {
    "the usual claim: one due": Due(0, 0.5, {}, 100, [0], 1),
    "the next one not yet due": Due(0, 0.99, {}, 100, [0], 1),
    "coalesce: the newest up to now": Due(0, 5.5, {}, 100, [0, 1, 2, 3, 4, 5], 6),
    "coalesce, capped: only the newest cap": Due(0, 5.5, {}, 3, [3, 4, 5], 6),
    "no coalesce, within the grace: all fired, oldest first": Due(
        0, 3.5, {"coalesce": False, "misfire_grace_seconds": 600}, 100, [0, 1, 2, 3], 4
    ),
    "no coalesce, capped within the grace: the rest stays due": Due(
        0, 3.5, {"coalesce": False, "misfire_grace_seconds": 600}, 2, [0, 1], 2
    ),
    # the grace ends at 8:00 (10:30 less 150 s): 8:00 is exactly that late, so within it
    "no coalesce: the newest cap past the grace, then those within it": Due(
        0, 10.5, {"coalesce": False, "misfire_grace_seconds": 150}, 3, [5, 6, 7, 8, 9, 10], 11
    ),
}


@pytest.mark.parametrize("case", DUE.values(), ids=DUE.keys())
def test_due_occurrences(case: Due) -> None:
    policy = Policy(**case.policy)
    found, following = due_occurrences(schedule("UTC", EVERY_MINUTE), at(case.first), at(case.now), policy, case.cap)
    assert found == [at(m) for m in case.occurrences]
    assert following == (None if case.following is None else at(case.following))


def test_a_once_task_has_no_following_occurrence() -> None:
    once = schedule("UTC", {"kind": "once", "at": "2026-12-04T12:00:00Z"})
    assert due_occurrences(once, T0, at(60), Policy(), 100) == ([T0], None)
