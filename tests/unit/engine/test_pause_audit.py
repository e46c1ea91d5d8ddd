"""The pure parts of pauses and the audit log: which occurrences a pause holds, who the actor is, what an
operator may write as a reason, and how pauses and audit rows are rendered (hostile text escaped)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from reconciler.engine.claim_plan import Pause, decide_paused
from reconciler.errors import UserError
from reconciler.operate.audit import MAX_TEXT, Operator, checked, one_source, whoami
from reconciler.output.plan_json import plan_dict
from reconciler.output.plan_markdown import plan_markdown
from reconciler.output.plan_text import plan_text
from reconciler.output.text import audit_line, pause_line
from reconciler.reconcile.plan import make_plan

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def at(*seconds: int) -> list[datetime]:
    return [T0 + n * S for n in seconds]


@pytest.mark.parametrize(
    ("until", "now", "held", "rest"),
    [
        (None, 10, [0, 5, 10], []),  # no end: every due occurrence is held
        (20, 10, [0, 5, 10], []),  # in force at the claim
        (7, 10, [0, 5], [10]),  # ended: those due before its end are held, not caught up
        (7, 7, [0, 5], [10]),  # ends exactly at the claim: the end is exclusive
        (-5, 10, [], [0, 5, 10]),  # ended before every occurrence
    ],
)
def test_a_pause_holds_what_fell_due_before_its_end(
    until: int | None, now: int, held: list[int], rest: list[int]
) -> None:
    pause = Pause("alice", "db migration", None if until is None else T0 + until * S)
    skipped, others = decide_paused(at(0, 5, 10), T0 + now * S, pause)
    assert [d.scheduled_for for d in skipped] == at(*held)
    assert {d.status for d in skipped} <= {"skipped"}
    assert {d.error for d in skipped} <= {"paused by alice: db migration"}
    assert others == at(*rest)


def test_no_pause_holds_nothing() -> None:
    assert decide_paused(at(0, 1), T0 + 2 * S, None) == ([], at(0, 1))


def test_the_newest_held_occurrence_is_the_scheduled_one() -> None:
    skipped, _ = decide_paused(at(0, 1, 2), T0 + 3 * S, Pause("a", "r", None))
    assert [d.kind for d in skipped] == ["catchup", "catchup", "scheduled"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a\0b", "control character \\x00 at position 1"),
        ("two\nlines", "control character \\n at position 3"),
        ("tab\there", "control character \\t"),
        ("\x1b[31mred", "control character \\x1b at position 0"),
        ("evil \u202ereversed", "control character \\u202e"),
        ("x" * 10_000, "10000 characters, more than 500"),
    ],
)
def test_hostile_operator_text_is_one_line_naming_its_option(text: str, problem: str) -> None:
    with pytest.raises(UserError) as caught:
        checked(text, "--reason")
    message = str(caught.value)
    assert message.startswith("--reason: ") and problem in message
    assert "\n" not in message and "\0" not in message and "\x1b" not in message and len(message) < 200


@pytest.mark.parametrize("text", ["db migration 🚧", "x" * MAX_TEXT, "ticket <a href=x>OPS-1</a> `rm -rf`"])
def test_operator_text_is_stored_as_given(text: str) -> None:
    assert checked(text, "--reason") == text


def test_the_actor_is_the_option_else_github_actor_else_user_at_host() -> None:
    assert Operator.resolve("alice", "why", {"GITHUB_ACTOR": "octocat"}) == Operator("alice", "why")
    assert Operator.resolve(None, None, {"GITHUB_ACTOR": "octocat"}) == Operator("octocat")
    assert Operator.resolve(None, None, {"GITHUB_ACTOR": ""}).actor == whoami()
    assert "@" in whoami()
    with pytest.raises(UserError, match=r"^GITHUB_ACTOR: control character"):
        Operator.resolve(None, None, {"GITHUB_ACTOR": "bot\nINJECTED"})
    with pytest.raises(UserError, match=r"^--actor: "):
        Operator.resolve("\0", None, {})
    with pytest.raises(UserError, match=r"^--reason: "):
        Operator.resolve("alice", "x" * 501, {})


def test_one_source_only_when_every_task_shares_it() -> None:
    assert one_source(["a", "a"]) == "a"
    assert one_source(["a", "b"]) is None
    assert one_source([]) is None


PAUSE = {
    "task_id": "billing/invoices",
    "paused_at": T0,
    "paused_by": "alice",
    "reason": "db \x1b[2Jmigration\u202e",
    "paused_until": T0 + timedelta(hours=2),
}


def test_a_pause_line_escapes_what_an_operator_wrote() -> None:
    line = pause_line(PAUSE)
    assert line == (
        "‖ paused billing/invoices by alice since 2026-12-03 09:00:00 UTC, until 2026-12-03 11:00:00 UTC: "
        "db \\x1b[2Jmigration\\u202e"
    )
    assert "until resumed" in pause_line({**PAUSE, "paused_until": None})


def test_an_audit_line_names_who_what_when_and_why() -> None:
    row = {
        "id": 7,
        "at": T0,
        "actor": "octo\u202ecat",
        "action": "pause",
        "source": "billing",
        "task_ids": [f"t{i}" for i in range(8)],
        "reason": "incident\x1b]0;owned\x07",
        "details": {"until": "2026-12-03T11:00:00+00:00", "already_paused": []},
    }
    line = audit_line(row)
    assert line.startswith("#7 2026-12-03 09:00:00 UTC octo\\u202ecat pause [billing] t0, t1, t2, t3, t4 and 3 more: ")
    assert "incident\\x1b]0;owned\\x07" in line and "until 2026-12-03T11:00:00+00:00" in line
    applied = {**row, "action": "apply", "details": {"apply_id": 3, "revision": "abc", "counts": {"create": 2}}}
    assert "(revision abc, 2 create)" in audit_line({**applied, "reason": None, "actor": "ci"})


def test_a_plan_shows_paused_tasks_on_lines_of_their_own_in_every_format() -> None:
    plan = make_plan([], [], "billing", T0)
    plan.paused = [dict(PAUSE, reason="db migration")]  # type: ignore[list-item]
    text = plan_text(plan)
    assert "‖ paused billing/invoices by alice since 2026-12-03 09:00:00 UTC" in text
    assert "No changes." in text and ", 1 paused." in text.splitlines()[-1]
    markdown = plan_markdown(plan)
    assert "Paused at runtime (1)" in markdown and "‖ paused billing/invoices by alice" in markdown
    data = json.loads(json.dumps(plan_dict(plan)))
    assert data["format_version"] == 2
    assert data["paused"] == [
        {
            "id": "billing/invoices",
            "paused_by": "alice",
            "reason": "db migration",
            "paused_at": "2026-12-03T09:00:00+00:00",
            "paused_until": "2026-12-03T11:00:00+00:00",
        }
    ]
    assert data["summary"] == make_plan([], [], "billing", T0).summary  # a pause is no change
    assert "paused" not in plan_dict(make_plan([], [], "billing", T0))  # absent when none is
