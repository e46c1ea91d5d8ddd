"""The notifier diff, table by table (pure, no database): `notifiers.d/` against `scheduler.notifiers` for
one source, and what attaching it does to a plan."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from reconciler.files.kinds import Named
from reconciler.files.notifiers import NOTIFIERS, Notifier, validate_notifier
from reconciler.reconcile.diff import FieldDiff, StoredRow, diff_declared
from reconciler.reconcile.plan import Plan, attach_declared

SOURCE = "default"
HOOK = 'kind = "webhook"\nurl = "https://h.example/x"\n'


def notifier(name: str, text: str = HOOK) -> Notifier:
    found, errors = validate_notifier(name, f"notifiers.d/{name}.toml", text)
    assert found is not None, errors
    return found


def stored(name: str, text: str = HOOK, source: str = SOURCE) -> StoredRow:
    """The row an apply of this notifier file wrote."""
    written = notifier(name, text)
    return StoredRow(source, name, written.normalized, written.spec_hash)


@dataclass(frozen=True)
class Case:
    files: dict[str, str]
    rows: list[StoredRow]
    expected: list[tuple[str, str]]  # (op, name), by name
    fields: dict[str, list[str]] = field(default_factory=dict)


CASES = {
    "nothing": Case({}, [], []),
    "new file: create": Case({"oncall": HOOK}, [], [("create", "oncall")]),
    "same file: left out": Case({"oncall": HOOK}, [stored("oncall")], []),
    "no file: delete": Case({}, [stored("oncall")], [("delete", "oncall")]),
    "another source's row: untouched": Case({}, [stored("oncall", source="other")], []),
    "another source's name: created in this one": Case(
        {"oncall": HOOK}, [stored("oncall", source="other")], [("create", "oncall")]
    ),
    "url changed: update": Case(
        {"oncall": 'kind = "webhook"\nurl = "https://h.example/y"\n'},
        [stored("oncall")],
        [("update", "oncall")],
        {"oncall": ["url"]},
    ),
    "timeout added: update": Case(
        {"oncall": HOOK + "timeout_seconds = 3\n"},
        [stored("oncall")],
        [("update", "oncall")],
        {"oncall": ["timeout_seconds"]},
    ),
    "sorted by name": Case(
        {"zeta": HOOK, "alpha": HOOK},
        [stored("mid")],
        [("create", "alpha"), ("delete", "mid"), ("create", "zeta")],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_diff_declared(case: Case) -> None:
    desired = {name: notifier(name, text) for name, text in case.files.items()}
    changes = diff_declared(desired, case.rows, SOURCE)
    assert [(c.op, c.name) for c in changes] == case.expected
    assert {c.name: [f.path for f in c.fields] for c in changes if c.fields} == case.fields
    for change in changes:
        assert (change.after is None) == (change.op == "delete")
        assert (change.before is None) == (change.op == "create")


def test_an_update_carries_old_and_new() -> None:
    moved = 'kind = "webhook"\nurl = "https://h.example/y"\n'
    [change] = diff_declared({"oncall": notifier("oncall", moved)}, [stored("oncall")], SOURCE)
    assert change.fields == [FieldDiff("url", "https://h.example/x", "https://h.example/y")]
    assert change.before == stored("oncall").spec and change.after == notifier("oncall", moved).normalized


def empty_plan() -> Plan:
    return Plan(SOURCE, [], [], "sha256:state", "sha256:files")


def test_attaching_changes_the_plan_and_its_fingerprint_only_with_notifier_rows() -> None:
    files = Named(NOTIFIERS, "notifiers.d", {"oncall": notifier("oncall")}, [])
    bare = attach_declared(empty_plan(), files, [], [], [])
    assert [(c.op, c.name) for c in bare.changes_of(NOTIFIERS)] == [("create", "oncall")] and bare.has_changes
    assert bare.state_fingerprint == "sha256:state"  # no notifier rows read: the tasks' fingerprint stands
    one = attach_declared(empty_plan(), files, [stored("oncall")], [], [])
    other = attach_declared(empty_plan(), files, [stored("oncall", 'kind = "slack"\nurl = { env = "S" }\n')], [], [])
    assert one.changes_of(NOTIFIERS) == [] and not one.has_changes
    assert len({"sha256:state", one.state_fingerprint, other.state_fingerprint}) == 3  # any stored change shows
