"""The apply rails, table by table (pure, no database): what `rail_refusals` and `judge` refuse for a plan.

The max-deletes rail defaults to 25 % of the source's tasks, rounded down, at least 1; `allow_empty`
lets a plan delete every task of its source; `max_deletes = 0` refuses any delete but that one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from reconciler.db.rows import TaskRow
from reconciler.files.problems import FileError
from reconciler.reconcile.apply import DELETES_SHOWN, ApplyOptions, judge, rail_refusals
from reconciler.reconcile.plan import Change, Plan
from reconciler.reconcile.revision import LiveRevision

SOURCE = "default"
STATE, FILES = "sha256:state", "sha256:files"


def row(task_id: str, source: str = SOURCE) -> TaskRow:
    return TaskRow(task_id, source, "{}", "sha256:x", True, "UTC", None)


def plan_of(owned: int, deletes: int, conflicts: list[FileError] | None = None) -> tuple[Plan, list[TaskRow]]:
    """A plan over `owned` rows of SOURCE (plus two of another source) that deletes the first `deletes`."""
    ids = [f"t{i:03d}" for i in range(owned)]
    rows = [row(i) for i in ids] + [row("theirs-1", "other"), row("theirs-2", "other")]
    changes = [Change("delete" if n < deletes else "noop", i) for n, i in enumerate(ids)]
    return Plan(SOURCE, changes, conflicts or [], STATE, FILES), rows


@dataclass(frozen=True)
class Case:
    owned: int
    deletes: int
    options: ApplyOptions
    refused: str | None  # a words of the one refusal, None: no refusal


CASES = {
    # the default limit: 25 % of the source's tasks, rounded down, at least one
    "1 of 4 (limit 1)": Case(4, 1, ApplyOptions(), None),
    "2 of 4 (limit 1)": Case(4, 2, ApplyOptions(), "delete 2 tasks, more than --max-deletes 1"),
    "1 of 3 (25 % is 0.75: at least 1)": Case(3, 1, ApplyOptions(), None),
    "1 of 7 (limit 1, 1.75 rounded down)": Case(7, 1, ApplyOptions(), None),
    "2 of 7 (limit 1, 1.75 rounded down)": Case(7, 2, ApplyOptions(), "delete 2 tasks, more than --max-deletes 1"),
    "2 of 8 (limit 2)": Case(8, 2, ApplyOptions(), None),
    "3 of 8 (limit 2)": Case(8, 3, ApplyOptions(), "delete 3 tasks, more than --max-deletes 2"),
    "25 of 100 (limit 25)": Case(100, 25, ApplyOptions(), None),
    "26 of 100 (limit 25)": Case(100, 26, ApplyOptions(), "delete 26 tasks, more than --max-deletes 25"),
    "3 of 15 (limit 3, 3.75 rounded down)": Case(15, 3, ApplyOptions(), None),
    "4 of 15 (limit 3)": Case(15, 4, ApplyOptions(), "delete 4 tasks, more than --max-deletes 3"),
    # an explicit limit replaces the 25 %
    "5 of 8 with --max-deletes 5": Case(8, 5, ApplyOptions(max_deletes=5), None),
    "6 of 8 with --max-deletes 5": Case(8, 6, ApplyOptions(max_deletes=5), "delete 6 tasks, more than --max-deletes 5"),
    "1 of 100 with --max-deletes 0": Case(
        100, 1, ApplyOptions(max_deletes=0), "delete 1 tasks, more than --max-deletes 0"
    ),
    "none with --max-deletes 0": Case(100, 0, ApplyOptions(max_deletes=0), None),
    "none of 0": Case(0, 0, ApplyOptions(), None),
    # deleting every task of the source: refused unless allow_empty, which also lifts the limit
    "1 of 1": Case(1, 1, ApplyOptions(), "would delete every task of source 'default' (1)"),
    "4 of 4": Case(4, 4, ApplyOptions(), "would delete every task of source 'default' (4)"),
    "4 of 4 with --max-deletes 10": Case(4, 4, ApplyOptions(max_deletes=10), "would delete every task"),
    "4 of 4 with --allow-empty": Case(4, 4, ApplyOptions(allow_empty=True), None),
    "4 of 4 with --allow-empty and --max-deletes 0": Case(4, 4, ApplyOptions(allow_empty=True, max_deletes=0), None),
    "3 of 4 with --allow-empty (not empty: the limit holds)": Case(
        4, 3, ApplyOptions(allow_empty=True), "delete 3 tasks, more than --max-deletes 1"
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_max_deletes_and_allow_empty(case: Case) -> None:
    plan, rows = plan_of(case.owned, case.deletes)
    refused = rail_refusals(plan, rows, case.options)
    if case.refused is None:
        assert refused == []
    else:
        assert len(refused) == 1 and case.refused in refused[0], refused


def test_the_refusal_names_the_first_deletes_then_counts_the_rest() -> None:
    plan, rows = plan_of(40, DELETES_SHOWN + 5)
    [refusal] = rail_refusals(plan, rows, ApplyOptions())
    named = [f"t{i:03d}" for i in range(DELETES_SHOWN)]
    assert f"--max-deletes 10: {', '.join(named)} and 5 more; raise --max-deletes or use --no-prune" in refusal
    assert f"t{DELETES_SHOWN:03d}" not in refusal


def test_a_short_list_of_deletes_is_named_in_full() -> None:
    plan, rows = plan_of(4, 2)
    assert rail_refusals(plan, rows, ApplyOptions()) == [
        "this apply would delete 2 tasks, more than --max-deletes 1: t000, t001; raise --max-deletes or use --no-prune"
    ]


def test_only_the_plans_source_counts_toward_the_limit() -> None:
    plan, rows = plan_of(4, 2)
    rows += [row(f"other-{i}", "other") for i in range(100)]  # 104 rows, but 4 of this source: the limit stays 1
    assert "more than --max-deletes 1" in rail_refusals(plan, rows, ApplyOptions())[0]


STALE = {
    "fresh": (ApplyOptions(expect_state=STATE, expect_files=FILES), []),
    "not saved": (ApplyOptions(), []),
    "files changed": (ApplyOptions(expect_state=STATE, expect_files="sha256:old"), ["task files changed"]),
    "database changed": (ApplyOptions(expect_state="sha256:old", expect_files=FILES), ["the database changed"]),
    "both": (ApplyOptions(expect_state="sha256:old", expect_files="sha256:old"), ["files changed", "database changed"]),
}


@pytest.mark.parametrize(("options", "words"), STALE.values(), ids=STALE.keys())
def test_a_saved_plan_is_refused_when_stale(options: ApplyOptions, words: list[str]) -> None:
    plan, rows = plan_of(4, 0)
    refused = rail_refusals(plan, rows, options)
    assert len(refused) == len(words), refused
    for found, expected in zip(refused, words, strict=True):
        assert found.startswith("the saved plan is stale: ") and expected in found and found.endswith("run plan again")


def test_conflicts_come_first_and_every_reason_is_listed() -> None:
    conflict = FileError("tasks.d/x.toml", 0, "id", "task 'x' is owned by source 'other', not 'default'")
    plan, rows = plan_of(4, 4, [conflict])
    refused = rail_refusals(plan, rows, ApplyOptions(expect_files="sha256:old"))
    assert refused[0] == str(conflict)
    assert "task files changed" in refused[1] and "would delete every task" in refused[2]
    assert len(refused) == 3


def test_judge_fills_in_the_verdict_without_a_checkout() -> None:
    live = LiveRevision("0123456789abcdef", datetime(2026, 12, 1, tzinfo=UTC))
    plan, rows = plan_of(4, 2)
    judged = judge(plan, rows, live, ApplyOptions())
    assert judged is plan and judged.live == live
    assert judged.refused == rail_refusals(plan, rows, ApplyOptions()) and len(judged.refused) == 1
    assert judged.warnings == []
    assert judge(plan, rows, None, ApplyOptions(max_deletes=2)).refused == []
