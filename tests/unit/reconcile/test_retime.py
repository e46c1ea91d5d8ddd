"""A retimed task in a plan: the occurrences its change adds and removes in the next 30 days, counted over the
schedule as applied (its row and the calendars bound then) and the files' (pure, no database); and the plan's
warning of a limit no task names."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.db.rows import TaskRow
from reconciler.files.limits import load_limits
from reconciler.files.tasks import Task, load_text
from reconciler.output.plan_json import plan_dict
from reconciler.output.plan_text import plan_text
from reconciler.reconcile.plan import attach_declared, make_plan
from reconciler.reconcile.retime import WALKED, retimed, stored_schedule
from reconciler.schedule.triggers import compile_schedule

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
US_OLD = {"kind": "business_days", "weekend": ["sat", "sun"], "extra_holidays": ["2026-12-25"]}
US_NEW = {**US_OLD, "extra_holidays": ["2026-12-24", "2026-12-25"], "extra_workdays": ["2026-12-26"]}
DAILY = """
timezone = "Europe/Berlin"
[trigger]
kind = "cron"
expr = "0 9 * * *"
business_days = "us"
[target]
url = "http://127.0.0.1:9/close"
"""


def bound(body: str, calendars: dict[str, Any]) -> Task:
    found, errors = load_text("ops/close", "tasks.d/ops/close.toml", body)
    assert found is not None, errors
    return found.bind(calendars)


def row_of(task: Task, calendars: dict[str, Any]) -> TaskRow:
    spec = task.normalized
    return TaskRow(
        task.id, "default", json.dumps(spec), task.spec_hash, task.enabled, task.timezone, None, "1", False, calendars
    )


def test_a_calendar_change_shows_the_occurrences_it_adds_and_removes() -> None:
    applied, wanted = bound(DAILY, {"us": US_OLD}), bound(DAILY, {"us": US_NEW})
    plan = make_plan([wanted], [row_of(applied, {"us": US_OLD})], "default", NOW)
    [change] = plan.changes
    assert change.op == "update" and change.retime
    found = change.preview.retimed
    assert found is not None and found.complete and found.days == 30
    assert (found.added, found.removed, found.before, found.after) == (1, 1, 21, 21)
    assert found.first_removed == [datetime(2026, 12, 24, 8, 0, tzinfo=UTC)]
    assert found.first_added == [datetime(2026, 12, 26, 8, 0, tzinfo=UTC)]
    text = plan_text(plan)
    assert "    occurrences in the next 30 days: 1 added, 1 removed (21 → 21)" in text
    assert "    added: 2026-12-26 09:00:00 CET (2026-12-26 08:00:00 UTC)" in text
    assert "    removed: 2026-12-24 09:00:00 CET (2026-12-24 08:00:00 UTC)" in text
    [shown] = plan_dict(plan)["changes"]  # type: ignore[call-overload]
    assert shown["occurrences"]["first_removed"] == ["2026-12-24T08:00:00+00:00"]
    assert (shown["occurrences"]["added"], shown["occurrences"]["removed"]) == (1, 1)


def test_a_change_that_moves_nothing_in_the_horizon_says_so() -> None:
    later = {**US_OLD, "extra_holidays": ["2026-12-25", "2027-06-01"]}
    plan = make_plan(
        [bound(DAILY, {"us": later})], [row_of(bound(DAILY, {"us": US_OLD}), {"us": US_OLD})], "default", NOW
    )
    assert "occurrences in the next 30 days: none added or removed (21)" in plan_text(plan)


def test_enabling_a_disabled_task_adds_every_occurrence() -> None:
    applied = bound("enabled = false\n" + DAILY, {"us": US_OLD})
    row = row_of(applied, {"us": US_OLD})
    found = make_plan([bound(DAILY, {"us": US_OLD})], [row], "default", NOW).changes[0].preview.retimed
    assert found is not None and (found.added, found.removed, found.before, found.after) == (21, 0, 0, 21)


def test_a_minute_task_is_counted_within_a_bounded_walk() -> None:
    every_minute = DAILY.replace("0 9 * * *", "* * * * *")
    old = compile_schedule(bound(every_minute, {"us": US_OLD}).spec)
    new = compile_schedule(bound(every_minute, {"us": US_NEW}).spec)
    started = time.perf_counter()
    found = retimed(old, new, NOW)
    spent = time.perf_counter() - started
    assert not found.complete and found.before <= WALKED and found.until < NOW.replace(day=31)
    assert spent < 5, spent  # two walks of at most WALKED occurrences, not 2 x 43,200
    assert stored_schedule({"trigger": "not a trigger"}, None, True) is None


def test_a_plan_warns_of_a_limit_no_task_names(tmp_path: Path) -> None:
    (tmp_path / "limits.d").mkdir()
    (tmp_path / "limits.d" / "api.toml").write_text("max_in_flight = 2\n")
    task = bound(DAILY, {"us": US_OLD})
    plan = make_plan([task], [], "default", NOW)
    attach_declared(plan, load_limits(tmp_path / "limits.d", "limits.d"), [], [task], [])
    assert plan.warnings == [
        "limits.d/api.toml: no task names limit 'api'; delete it, or name it in a task's policy.limits"
    ]
    assert "warning: limits.d/api.toml: no task names limit 'api'" in plan_text(plan)
