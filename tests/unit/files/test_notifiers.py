"""Notifier files and the events' state machine (pure): one-line errors naming file, key and fix."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reconciler.engine.claim_plan import decide
from reconciler.files.notifiers import NOTIFIERS, load_notifiers, validate_notifier
from reconciler.files.tasks import load_dir
from reconciler.notify.events import Ended, State, stateful, transitions
from reconciler.spec.task import Policy

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SUBS = {"failure": ["oncall"], "recovery": ["oncall"], "lost": ["oncall"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('kind = "webhook"\nurl = "https://h.example/x"\nheaders = { X-Api-Key = "k" }\n', ":3: headers: a literal"),
        ('kind = "webhook"\nurl = "https://u:p@h.example/x"\n', ":2: url: credentials in the URL are not allowed"),
        ('kind = "webhook"\nurl = "ftp://h.example/x"\n', ":2: url: not an http:// or https:// URL"),
        ('kind = "webhook"\nurl = "https://h.example/x"\njson = { a = 1 }\n', ":3: json: a notifier sends the event"),
        ('kind = "webhook"\nurl = "https://h.example/x"\n\nbody = "x"\n', ":4: body: a notifier sends the event"),
        # a target's checks name a task file's keys; a notifier's are at its top level
        ('kind = "webhook"\nurl = "https://u:p@h.example/x"\n', 'use auth.kind = "basic" or query = {'),
        (
            'kind = "webhook"\nurl = "https://h.example/x"\ntimeout_seconds = 0\n',
            "timeout_seconds: must be more than 0",
        ),
        ('kind = "webhook"\n', ":0: url: required key is missing"),
        (
            'kind = "slack"\nurl = "https://hooks.slack.com/services/T/B/X"\n',
            ":2: url: a literal secret is not allowed",
        ),
        ('kind = "slak"\nurl = { env = "S" }\n', ":1: kind: unknown kind 'slak'; did you mean 'slack'?"),
        ('kind = "slack"\nurl = { env = "S" }\ntimeout_seconds = nan\n', ":3: timeout_seconds: nan is not a finite"),
        # a value the model may not see is the only error of its key (it sees a defused copy)
        ('kind = "webhook"\nurl = "https://h.example/x"\ntimeout_seconds = 1e400\n', ":3: timeout_seconds: inf is"),
        # a quoted value of the file is shown as written, `target.` and all
        ('kind = "webhook"\nurl = "https://h.example/x"\nmethod = "target.x"\n', "'target.x'"),
        ('kind = "slack"\nurl = { env = "S" }\ntimeout_seconds = 3600\n', "timeout_seconds: must be at most 60"),
        ('kind = "slack"\nurl = { env = "S\\u0000" }\n', "NUL"),
        ("x = " + "[" * 200 + "]" * 200 + "\n", "nested more than 32 levels deep; flatten it"),
        ('url = { env = "S" }\n', ':0: kind: missing kind; write kind = "webhook" or kind = "slack"'),
        ("kind = \n", ":1: toml: syntax error"),
        ("", ":0: (file): empty notifier file"),
    ],
)
def test_a_bad_notifier_file_is_one_line_naming_file_key_and_fix(text: str, expected: str) -> None:
    notifier, errors = validate_notifier("oncall", "notifiers.d/oncall.toml", text)
    assert notifier is None and errors
    shown = [str(e) for e in errors]
    assert len({(e.line, e.key) for e in errors}) == len(errors), shown  # one error per key
    assert all("\n" not in line and line.startswith("notifiers.d/oncall.toml:") for line in shown)
    assert any(expected in line for line in shown), shown
    assert all("hooks.slack.com/services" not in line for line in shown)  # a secret URL is never echoed


def test_the_notifiers_directory_is_flat_and_optional(tmp_path: Path) -> None:
    assert load_notifiers(tmp_path / "absent").by_name == {}
    root = tmp_path / "notifiers.d"
    (root / "team").mkdir(parents=True)
    (root / "team" / "x.toml").write_text('kind = "slack"\nurl = { env = "S" }\n')
    (root / "Bad Name.toml").write_text('kind = "slack"\nurl = { env = "S" }\n')
    (root / "_defaults.toml").write_text("ignored = true\n")
    (root / "ok.toml").write_text('kind = "slack"\nurl = { env = "S" }\n')
    os.symlink("/etc/passwd", root / "out.toml")
    loaded = load_notifiers(root, "notifiers.d")
    assert list(loaded.by_name) == ["ok"]
    shown = sorted(str(e) for e in loaded.errors)
    assert any("notifiers.d/Bad Name.toml:0: name:" in line for line in shown), shown
    assert any("notifiers.d/team/x.toml:0: (file): notifier files sit directly in" in line for line in shown)
    assert (
        "notifiers.d/out.toml:0: (file): is a symlink to a path outside notifiers.d; copy the file in instead" in shown
    )


def test_a_subscription_to_an_unknown_notifier_names_the_line_and_the_nearest_name(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(
        '[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "https://a.example/x"\n'
        '[notify]\nfailure = ["oncal"]\nlate = ["nobody"]\n'
    )
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "oncall.toml").write_text('kind = "slack"\nurl = { env = "S" }\n')
    tasks = load_dir(tmp_path, "tasks.d").tasks
    errors = [str(e) for e in NOTIFIERS.references(tasks, load_notifiers(tmp_path / "n", "notifiers.d"), None)]
    assert errors == [
        "tasks.d/job.toml:7: notify.failure: no notifier 'oncal' in notifiers.d; did you mean 'oncall'?",
        "tasks.d/job.toml:8: notify.late: no notifier 'nobody' in notifiers.d; add notifiers.d/nobody.toml or "
        "remove it here",
    ]


def test_a_notifiers_directory_that_is_a_file_or_named_and_missing_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notifiers.d").write_text("x\n")
    [error] = load_notifiers(tmp_path / "notifiers.d", "notifiers.d").errors
    assert str(error) == (
        "notifiers.d:0: (file): is not a directory; make it the directory of notifier files, or pass --notifiers-dir"
    )
    assert load_notifiers(tmp_path / "absent", "absent").errors == []  # the default one is optional
    [error] = load_notifiers(tmp_path / "absent", "absent", required=True).errors
    assert "absent:0: (file): directory not found" in str(error)


def test_a_notifier_file_may_start_with_a_byte_order_mark(tmp_path: Path) -> None:
    (tmp_path / "oncall.toml").write_bytes(b'\xef\xbb\xbfkind = "slack"\nurl = { env = "S" }\n')
    loaded = load_notifiers(tmp_path, "notifiers.d")
    assert loaded.errors == [] and list(loaded.by_name) == ["oncall"]


def test_a_task_naming_an_invalid_notifier_file_is_not_blamed_for_it(tmp_path: Path) -> None:
    """The file's own errors say what is wrong; the tasks naming it get no "no notifier" error each."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "job.toml").write_text(
        '[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "https://a.example/x"\n'
        '[notify]\nfailure = ["oncall"]\n'
    )
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "oncall.toml").write_text('kind = "webhook"\nurl = 5\n')
    notifiers = load_notifiers(tmp_path / "n", "notifiers.d")
    assert [str(e) for e in notifiers.errors] == [
        "notifiers.d/oncall.toml:2: url: Input should be a valid string (got int)"
    ]
    assert NOTIFIERS.references(load_dir(tmp_path / "t", "tasks.d").tasks, notifiers, None) == []


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            "[notify]\nlate = ['oncall']\nlate_after_seconds = 5\n",
            "notify.late_after_seconds: must be at least 10 (got 5)",
        ),
        ("[notify]\nrepeat_every_seconds = 5\n", "notify.repeat_every_seconds: must be at least 60 (got 5)"),
        ("[policy]\nretries = -1\n", "policy.retries: must be at least 0 (got -1)"),
        (
            "[target.headers]\n" + "".join(f"X-H{n} = 'v'\n" for n in range(101)),
            "target.headers: may have at most 100 entries",
        ),
    ],
)
def test_a_bound_says_what_the_value_must_be(tmp_path: Path, table: str, expected: str) -> None:
    (tmp_path / "job.toml").write_text(
        '[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "https://a.example/x"\n' + table
    )
    assert [e.key + ": " + e.message for e in load_dir(tmp_path, "tasks.d").errors] == [expected]


def test_a_trigger_without_kind_lists_the_kinds(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text('[trigger]\nexpr = "* * * * *"\n[target]\nurl = "https://a.example/x"\n')
    [error] = load_dir(tmp_path, "tasks.d").errors
    assert error.message == "missing kind; use one of 'cron', 'interval', 'calendar', 'business_day', 'once'"


def ended(status: str, n: int, repeat: int | None = None) -> Ended:
    return Ended("job", n, T0 + timedelta(minutes=n), status, SUBS, repeat)


def test_failure_and_recovery_only_on_a_change_of_state() -> None:
    runs = [ended("failed", 1), ended("failed", 2), ended("lost", 3), ended("succeeded", 4), ended("succeeded", 5)]
    events, after = transitions({}, runs, T0)
    assert [(e.event, e.run_id) for e in events] == [("failure", 1), ("recovery", 4)]
    assert after["job"] == State()
    events, _ = transitions({"job": State(True, T0)}, [ended("lost", 6)], T0)
    assert events == []  # already failing: a lost run says nothing new
    events, _ = transitions({}, [ended("lost", 7)], T0)
    assert [e.event for e in events] == ["lost"]


def test_repeat_every_seconds_reminds_while_the_task_keeps_failing() -> None:
    state = {"job": State(True, T0)}
    events, after = transitions(state, [ended("failed", 1, repeat=3600)], T0 + timedelta(minutes=59))
    assert events == [] and after["job"] == State(True, T0)
    later = T0 + timedelta(hours=1)
    events, after = transitions(state, [ended("failed", 2, repeat=3600)], later)
    assert [e.event for e in events] == ["failure"] and after["job"] == State(True, later)
    assert events[0].payload["run_id"] == 2 and events[0].payload["hints"]["runs"] == "reconciler runs job"


def test_subscribers_in_another_order_are_the_same_subscribers() -> None:
    spec = {"notify": {"failure": ["b", "a", "b"], "late": ["x"]}}
    assert stateful(spec) == stateful({"notify": {"failure": ["a", "b"]}}) == {"failure": ["a", "b"]}


@pytest.mark.parametrize(("late", "grace", "status"), [(0.3, 0, "running"), (1.5, 0, "missed"), (59, 60, "running")])
def test_a_claim_within_a_second_is_on_time_whatever_the_grace(late: float, grace: int, status: str) -> None:
    [decision] = decide([T0], T0 + timedelta(seconds=late), Policy(misfire_grace_seconds=grace), free_slots=1)
    assert decision.status == status
