"""Windows that block every instant are known to, from their crons' own period, without walking them (issue 49):
the answer matches a minute-by-minute oracle in UTC, stays true across DST nights in a zone that has them, and a
task whose every occurrence is blocked is answered at once, however many windows its calendars hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.schedule.blackout import Blackout, WithBlackouts
from reconciler.schedule.periodic import Cron, blocks_for_ever, period_minutes
from reconciler.schedule.preview import never_fires
from tests.helpers import schedule, spec

MONDAY = datetime(2026, 9, 7, tzinfo=UTC)
MINUTES = st.sampled_from(["0", "*/2", "*/15", "5,35", "*", "59"])
HOURS = st.sampled_from(["*", "0", "*/2", "9-17", "1-23", "0-11", "12-23"])
WEEKDAYS = st.sampled_from(["*", "1-5", "0,6", "6", "1-6", "0-3", "4-6,0"])
RULES = st.lists(st.tuples(MINUTES, HOURS, WEEKDAYS, st.integers(1, 36 * 60)), min_size=1, max_size=4)


def covered_every_minute(rules: list[tuple[str, str, str, int]]) -> bool:
    """The oracle: every minute of a week (UTC) inside a window opened by one of the crons, walked with croniter."""
    covered = bytearray(7 * 24 * 60)
    for minute, hour, weekday, length in rules:
        walker = croniter(f"{minute} {hour} * * {weekday}", MONDAY - timedelta(minutes=length + 1), day_or=True)
        while (opening := walker.get_next(datetime)) < MONDAY + timedelta(days=7):
            first = int((opening - MONDAY).total_seconds() // 60)
            low, high = max(first, 0), min(first + length, len(covered))
            covered[low:high] = b"\x01" * max(high - low, 0)
    return all(covered)


@pytest.mark.oracle
@settings(max_examples=60, deadline=None)
@given(RULES)
def test_blocks_for_ever_matches_a_minute_by_minute_oracle_in_utc(rules: list[tuple[str, str, str, int]]) -> None:
    windows = [(Cron((m, h, "*", "*", d), ZoneInfo("UTC")), length * 60) for m, h, d, length in rules]
    assert blocks_for_ever(windows) == covered_every_minute(rules)


@pytest.mark.parametrize(
    ("fields", "period"),
    [
        (("0", "*", "*", "*", "*"), 24 * 60),
        (("0", "9", "*", "*", "1-5"), 7 * 24 * 60),
        (("0", "9", "1", "*", "*"), None),  # a day of month: months differ
        (("0", "9", "*", "*", "5L"), None),
    ],
)
def test_a_cron_repeats_daily_or_weekly_only_when_no_date_is_named(fields: tuple[str, ...], period: int | None) -> None:
    assert period_minutes(Cron(fields, ZoneInfo("UTC"))) == period
    assert period_minutes(Cron(fields, ZoneInfo("Europe/Berlin"))) is None  # DST: not a period of UTC


def test_in_a_zone_with_dst_for_ever_means_every_minute_of_both_dst_nights() -> None:
    # Hourly windows 7 h long hold every instant even when the clocks go back; 2 h long, the margin for DST
    # leaves the question to the walk (which finds the union endless too, one window after another).
    berlin = {"timezone": "Europe/Berlin", "window": [{"cron": "0 * * * *", "duration": "7h"}]}
    calendar = Blackout.stored("b", berlin)
    assert blocks_for_ever((rule.cron, int(rule.length.total_seconds())) for rule in calendar.repeating if rule.cron)
    for night in (datetime(2026, 3, 28, 22, tzinfo=UTC), datetime(2026, 10, 24, 22, tzinfo=UTC)):
        for minute in range(0, 8 * 60, 7):
            assert calendar.end(night + timedelta(minutes=minute)) is not None
    short = Blackout.stored("b", {**berlin, "window": [{"cron": "0 * * * *", "duration": "2h"}]})
    assert not blocks_for_ever((r.cron, int(r.length.total_seconds())) for r in short.repeating if r.cron)


def blocked_by(windows: list[dict[str, str]], calendars: int = 1, expr: str = "* * * * *") -> Any:
    found = {f"c{index}": {"kind": "blackout", "window": windows} for index in range(calendars)}
    return schedule("UTC", {"kind": "cron", "expr": expr}, found, blackouts=list(found))


def test_a_minute_task_in_hourly_two_hour_windows_never_fires() -> None:
    sched = blocked_by([{"cron": "0 * * * *", "duration": "2h"}])
    assert isinstance(sched, WithBlackouts) and sched.blackouts.endless
    assert sched.next_fire_time(MONDAY) is None
    assert sched.previous_fire_time(MONDAY) is None
    task = spec("UTC", {"kind": "cron", "expr": "* * * * *"}, blackouts=["c0"])
    found = never_fires(task, sched, MONDAY)
    assert found is not None and found[0] == "policy.blackouts" and "exclude every occurrence" in found[1]


def test_the_documented_maxima_of_blocking_windows_answer_at_once() -> None:
    # 20 calendars of 100 windows each, every one opening daily at its own time for two hours: together they
    # hold every minute. The old walk asked each of the 2,000 windows at each of 2,000 steps per occurrence.
    windows = [{"cron": f"{index % 60} {index % 24} * * *", "duration": "2h"} for index in range(100)]
    sched = blocked_by(windows, calendars=20)
    assert sched.next_fire_time(MONDAY) is None


def test_windows_that_leave_a_minute_free_are_not_taken_as_endless() -> None:
    sched = blocked_by([{"cron": "0 * * * *", "duration": "59m"}])
    assert isinstance(sched, WithBlackouts) and not sched.blackouts.endless
    assert sched.next_fire_time(MONDAY) == MONDAY + timedelta(minutes=59)


def test_a_saturday_task_in_a_weekend_freeze_stops_after_one_week_of_blocked_occurrences() -> None:
    sched = blocked_by([{"cron": "0 22 * * 5", "duration": "56h"}], expr="0 9 * * 6")
    assert isinstance(sched, WithBlackouts) and sched.period == timedelta(days=7)
    assert sched.next_fire_time(MONDAY) is None
