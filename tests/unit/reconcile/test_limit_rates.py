"""The plan's warning of a crowded limit, without a database: the busiest minute of weighted schedules, the
warning's words, and the bounds on what it counts (tasks sharing a schedule are counted once; past the budget
nothing more is counted, so a huge plan stays quick and never gets a false warning)."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from reconciler.files.kinds import validate
from reconciler.files.limits import LIMITS, Limits
from reconciler.files.tasks import Task, load_text
from reconciler.reconcile import limit_rates
from reconciler.reconcile.limit_rates import rate_warnings
from reconciler.reconcile.plan import make_plan
from reconciler.schedule.busiest import busiest_minute

NOW = datetime(2026, 3, 3, 0, 0, tzinfo=UTC)
EVERY_SECOND = '[trigger]\nkind = "interval"\nseconds = 1\nstart_at = 2026-03-03T02:00:00\n'
EXAMPLE = (
    "limit billing-api: its 40 task(s) are due 2,400 times in the minute from 02:00 UTC (worst of the next day); "
    "at 10/s (burst 10) it serves 610 a minute: some will wait, and those past their misfire grace are missed; "
    "raise rate_per_second or spread the tasks"
)


def task(trigger: str, limits: str = '["billing-api"]', task_id: str = "t") -> Task:
    text = trigger + f'[target]\nurl = "https://example.com/x"\n[policy]\nlimits = {limits}\n'
    found, errors = load_text(task_id, f"tasks.d/{task_id}.toml", text)
    assert found is not None, errors
    return found


def copies(template: Task, count: int, prefix: str = "t") -> list[Task]:
    """`count` tasks of one file's spec (ids t0000…): what many files alike parse to, parsed once."""
    return [replace(template, id=f"{prefix}{n:04}") for n in range(count)]


def limits(**texts: str) -> Limits:
    found = {}
    for name, text in texts.items():
        limit, errors = validate(LIMITS, name, f"limits.d/{name}.toml", text)
        assert limit is not None, errors
        found[name] = limit
    return Limits(LIMITS, "limits.d", found, [])


def warnings(tasks: list[Task], declared: Limits) -> list[str]:
    return rate_warnings(make_plan(tasks, [], "default", NOW), declared)


def test_forty_tasks_every_second_against_ten_a_second_warn_in_the_words_of_the_docs() -> None:
    tasks = copies(task(EVERY_SECOND), 40)
    assert warnings(tasks, limits(**{"billing-api": "rate_per_second = 10\n"})) == [EXAMPLE]
    assert warnings(tasks, limits(**{"billing-api": "rate_per_second = 40\n"})) == []  # 40 + 2,400


def test_the_busiest_minute_is_weighted_and_the_earliest_of_the_busiest() -> None:
    at = task('[trigger]\nkind = "cron"\nexpr = "0 2,3 * * *"\n').schedule
    other = task('[trigger]\nkind = "cron"\nexpr = "0 3 * * *"\n').schedule
    found = busiest_minute([(at, 5), (other, 0)], NOW, NOW + timedelta(days=1), 10, 100)
    assert (found.minute, found.count, found.counted) == (NOW.replace(hour=2), 5, 3)
    found = busiest_minute([(at, 5), (other, 5)], NOW, NOW + timedelta(days=1), 10, 100)
    assert (found.minute, found.count) == (NOW.replace(hour=3), 10)


def test_a_schedule_and_the_plan_are_counted_within_their_caps() -> None:
    every = task(EVERY_SECOND).schedule
    found = busiest_minute([(every, 1)] * 3, NOW, NOW + timedelta(days=1), 100, 250)
    assert found.counted == 250  # 100 + 100 + 50: each schedule's cap, then the budget, then nothing more
    assert (found.minute, found.count) == (NOW.replace(hour=2), 60 + 60 + 50)  # from 02:00:00, a second apart


def test_tasks_sharing_a_schedule_are_counted_once_and_a_big_plan_stays_quick() -> None:
    tasks = copies(task(EVERY_SECOND), 5_000)
    started = time.perf_counter()
    [warning] = warnings(tasks, limits(**{"billing-api": "rate_per_second = 10\n"}))
    assert "its 5,000 task(s) are due 300,000 times in the minute from 02:00 UTC" in warning
    assert time.perf_counter() - started < 10  # one schedule of 79,200 occurrences, not 5,000 of them


def test_what_is_left_out_past_the_caps_is_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    crowd = [replace(task(f'[trigger]\nkind = "cron"\nexpr = "{n % 60} 2 * * *"\n'), id=f"t{n:03}") for n in range(120)]
    crowd += copies(task('[trigger]\nkind = "cron"\nexpr = "30 5 * * *"\n'), 40, "z")
    slow = limits(**{"billing-api": "rate_per_second = 0.5\n"})  # 31 a minute
    assert len(warnings(crowd, slow)) == 1
    monkeypatch.setattr(limit_rates, "TASKS", 120)  # the 40 at 05:30 come last: not looked at
    assert warnings(crowd, slow) == []
    monkeypatch.setattr(limit_rates, "TASKS", 1_000)
    monkeypatch.setattr(limit_rates, "BUDGET", 10)  # the most shared schedule first: the 40 at 05:30
    assert len(warnings(crowd, slow)) == 1
    monkeypatch.setattr(limit_rates, "BUDGET", 0)
    assert warnings(crowd, slow) == []


def test_disabled_tasks_other_limits_and_limits_without_a_rate_are_not_counted() -> None:
    at_two = '[trigger]\nkind = "cron"\nexpr = "0 2 * * *"\n'
    crowd = copies(task(at_two, '["slow", "runs"]'), 31)
    disabled = copies(task("enabled = false\n" + at_two, '["slow"]'), 10, "d")
    elsewhere = copies(task(at_two, '["roomy"]'), 10, "e")
    declared = limits(slow="rate_per_second = 0.5\n", runs="max_in_flight = 1\n", roomy="rate_per_second = 1\n")
    assert warnings([*crowd, *disabled, *elsewhere], declared) == []
    assert len(warnings([*crowd, *copies(task(at_two, '["slow"]'), 1, "x")], declared)) == 1
