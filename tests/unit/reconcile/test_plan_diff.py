"""The plan diff, table by table (pure, no database): task files against stored rows for one source."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from reconciler.db.rows import TaskRow
from reconciler.files.tasks import Task, load_text
from reconciler.reconcile.diff import FieldDiff, diff_fields, flatten
from reconciler.reconcile.plan import make_plan
from tests.builders import cron_trigger, task_text

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SOURCE = "default"


def text(expr: str = "@daily", top: str = "", policy: str = "") -> str:
    return task_text(top, trigger=cron_trigger(expr), policy=policy)


def task(task_id: str, body: str | None = None) -> Task:
    found, errors = load_text(task_id, f"tasks.d/{task_id}.toml", text() if body is None else body)
    assert found is not None, errors
    return found


@dataclass(frozen=True)
class Stored:
    """A row as an apply of `body` wrote it, then perhaps edited outside the reconciler."""

    task_id: str
    body: str | None = None
    source: str = SOURCE
    spec_edit: dict[str, Any] = field(default_factory=dict)  # keys changed in the stored spec, not in its hash
    enabled: bool | None = None  # the column, when it disagrees with the spec
    timezone: str | None = None

    def row(self) -> TaskRow:
        applied = task(self.task_id, self.body)
        spec = {**applied.normalized, **self.spec_edit}
        enabled = applied.enabled if self.enabled is None else self.enabled
        timezone = applied.timezone if self.timezone is None else self.timezone
        return TaskRow(
            self.task_id, self.source, json.dumps(spec), applied.spec_hash, enabled, timezone, None, "1",
            tampered=bool(self.spec_edit),
        )  # fmt: skip


@dataclass(frozen=True)
class Case:
    files: dict[str, str | None]  # id → file text (None: the default file)
    rows: list[Stored]
    expected: list[tuple[str, str]]  # (op, id), in the plan's order
    fields: dict[str, list[str]] = field(default_factory=dict)  # id → the changed field paths
    retimed: set[str] = field(default_factory=set)
    drifted: set[str] = field(default_factory=set)
    prune: bool = True
    conflicts: int = 0


CASES = {
    "new file: create": Case({"a": None}, [], [("create", "a")], retimed={"a"}),
    "same file: noop": Case({"a": None}, [Stored("a")], [("noop", "a")]),
    "no file: delete": Case({}, [Stored("a")], [("delete", "a")]),
    "no file, --no-prune: nothing": Case({}, [Stored("a")], [], prune=False),
    "another source's row is never deleted": Case({}, [Stored("a", source="other")], []),
    "another source's id is a conflict": Case({"a": None}, [Stored("a", source="other")], [], conflicts=1),
    "description: update, same schedule": Case(
        {"a": text(top='description = "d"')}, [Stored("a")], [("update", "a")], fields={"a": ["description"]}
    ),
    "trigger: update, retimed": Case(
        {"a": text("@hourly")}, [Stored("a")], [("update", "a")], fields={"a": ["trigger.expr"]}, retimed={"a"}
    ),
    "timezone: update, retimed": Case(
        {"a": text(top='timezone = "Europe/Berlin"')},
        [Stored("a")],
        [("update", "a")],
        fields={"a": ["timezone"]},
        retimed={"a"},
    ),
    "dst_gap: update, retimed": Case(
        {"a": text(policy='dst_gap = "skip"')},
        [Stored("a")],
        [("update", "a")],
        fields={"a": ["policy.dst_gap"]},
        retimed={"a"},
    ),
    "retries: update, same schedule": Case(
        {"a": text(policy="retries = 2")}, [Stored("a")], [("update", "a")], fields={"a": ["policy.retries"]}
    ),
    "enabled again: update, retimed": Case(
        {"a": None},
        [Stored("a", text(top="enabled = false"))],
        [("update", "a")],
        fields={"a": ["enabled"]},
        retimed={"a"},
    ),
    "disabled: update, not retimed": Case(
        {"a": text(top="enabled = false")}, [Stored("a")], [("update", "a")], fields={"a": ["enabled"]}
    ),
    "spec edited by hand: update with drift": Case(
        {"a": None},
        [Stored("a", spec_edit={"description": "edited"})],
        [("update", "a")],
        fields={"a": ["description"]},
        drifted={"a"},
    ),
    "column edited by hand: update with drift, no field": Case(
        {"a": None}, [Stored("a", timezone="Asia/Tokyo")], [("update", "a")], drifted={"a"}
    ),
    "a drifted row without a file: delete with drift": Case(
        {}, [Stored("a", enabled=False)], [("delete", "a")], drifted={"a"}
    ),
    "moved_from: move, the old row not deleted": Case(
        {"b": text(top='moved_from = "a"')}, [Stored("a")], [("move", "b")], fields={"b": ["moved_from"]}
    ),
    "moved_from left behind after the move: noop": Case(
        {"b": text(top='moved_from = "a"')}, [Stored("b")], [("noop", "b")]
    ),
    "moved_from a row that is not there: create": Case(
        {"b": text(top='moved_from = "a"')}, [], [("create", "b")], retimed={"b"}
    ),
    "moved_from a row the file still has: both kept": Case(
        {"a": None, "b": text(top='moved_from = "a"')}, [Stored("a"), Stored("b")], [("noop", "a"), ("noop", "b")]
    ),
    "moved_from another source's row: a conflict": Case(
        {"b": text(top='moved_from = "a"')}, [Stored("a", source="other")], [], conflicts=1
    ),
    "sorted by id": Case(
        {"c": None, "a": None},
        [Stored("b"), Stored("a")],
        [("noop", "a"), ("delete", "b"), ("create", "c")],
        retimed={"c"},
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_make_plan(case: Case) -> None:
    desired = [task(task_id, body) for task_id, body in case.files.items()]
    plan = make_plan(desired, [stored.row() for stored in case.rows], SOURCE, NOW, prune=case.prune)
    assert [(c.op, c.id) for c in plan.changes] == case.expected
    assert {c.id: [f.path for f in c.fields] for c in plan.changes if c.fields} == case.fields
    assert {c.id for c in plan.changes if c.retime} == case.retimed
    assert {c.id for c in plan.changes if c.drift} == case.drifted
    assert len(plan.conflicts) == case.conflicts, plan.conflicts
    assert plan.has_changes == any(op != "noop" for op, _ in case.expected)
    assert {c.id for c in plan.changes if c.preview_from == NOW} == case.retimed  # previewed from the plan's now


def test_a_move_names_where_it_came_from_and_a_conflict_names_the_owner() -> None:
    moved = make_plan([task("b", text(top='moved_from = "a"'))], [Stored("a").row()], SOURCE, NOW)
    assert [(c.op, c.id, c.moved_from) for c in moved.changes] == [("move", "b", "a")]
    owned = make_plan([task("a")], [Stored("a", source="other").row()], SOURCE, NOW)
    [conflict] = owned.conflicts
    assert conflict.key == "id" and "owned by source 'other', not 'default'" in conflict.message


def test_column_drift_names_the_column_and_its_values() -> None:
    plan = make_plan([task("a")], [Stored("a", timezone="Asia/Tokyo", enabled=False).row()], SOURCE, NOW)
    [change] = plan.changes
    assert change.drift_fields == [
        FieldDiff("enabled (column)", False, True),
        FieldDiff("timezone (column)", "Asia/Tokyo", "UTC"),
    ]


def test_summary_counts_each_op_and_drift() -> None:
    files = {"keep": None, "new": None, "edit": text("@hourly")}
    rows = [Stored("keep"), Stored("edit", spec_edit={"description": "x"}), Stored("gone")]
    plan = make_plan([task(i, b) for i, b in files.items()], [r.row() for r in rows], SOURCE, NOW)
    assert plan.summary == {"create": 1, "update": 1, "delete": 1, "move": 0, "noop": 1, "drift": 1}


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        make_plan([], [], SOURCE, datetime(2026, 12, 3, 12, 0))


FLATTEN = {
    "scalar": ({"a": 1}, {"a": 1}),
    "nested": ({"a": {"b": {"c": 1}, "d": 2}}, {"a.b.c": 1, "a.d": 2}),
    "an empty table is a leaf": ({"a": {}}, {"a": {}}),
    "lists are leaves": ({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]}),
    "keys sorted": ({"b": 1, "a": 2}, {"a": 2, "b": 1}),
}


@pytest.mark.parametrize(("value", "flat"), FLATTEN.values(), ids=FLATTEN.keys())
def test_flatten(value: dict[str, Any], flat: dict[str, Any]) -> None:
    assert flatten(value) == flat and list(flatten(value)) == list(flat)


DIFFS = {
    "equal": ({"a": 1}, {"a": 1}, []),
    "changed": ({"a": 1}, {"a": 2}, [FieldDiff("a", 1, 2)]),
    "added": ({"x": 1}, {"x": 1, "a": {"b": 1}}, [FieldDiff("a.b", None, 1)]),
    "removed": ({"x": 1, "a": {"b": 1}}, {"x": 1}, [FieldDiff("a.b", 1, None)]),
    "a table becomes a scalar": ({"a": {"b": 1}}, {"a": 2}, [FieldDiff("a", None, 2), FieldDiff("a.b", 1, None)]),
    "sorted by path": ({"b": 1, "a": 1}, {"b": 2, "a": 2}, [FieldDiff("a", 1, 2), FieldDiff("b", 1, 2)]),
    "a list compares whole": ({"a": [1, 2]}, {"a": [2, 1]}, [FieldDiff("a", [1, 2], [2, 1])]),
}


@pytest.mark.parametrize(("old", "new", "expected"), DIFFS.values(), ids=DIFFS.keys())
def test_diff_fields(old: dict[str, Any], new: dict[str, Any], expected: list[FieldDiff]) -> None:
    assert diff_fields(old, new) == expected
