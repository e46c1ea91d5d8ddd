"""Hostile calendars answer, and answer right: a weekend of seven days with a few workdays years apart, a year of
holidays in a row, windows that block every occurrence for ever or for eleven months of twelve, and windows
dense enough to open every minute (SPEC §6). Each question is asked under a guard that fails the test instead
of hanging the suite; the answers are checked against a day-by-day oracle.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reconciler.schedule.base import Schedule
from tests.helpers import schedule
from tests.unit.schedule.test_business_oracle import Cal, backwards, source_days, walked

pytestmark = pytest.mark.oracle

GUARD = 120  # seconds: far beyond any answer here, short of a hung CI run
EXPRESSIONS = ["0 9 1 * *", "0 9 * * 1", "0 9 29 2 *", "0 9 * * *", "0 9 31 12 *"]
BASE = date(2026, 12, 1)


@contextmanager
def guard() -> Iterator[None]:
    def expired(*_: object) -> None:
        raise TimeoutError(f"no answer in {GUARD} s: the schedule walks without end")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(GUARD)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cron_days(expr: str) -> Callable[[date], bool]:
    """The days the cron fires on (these expressions restrict at most one of day of month and weekday)."""
    dom, month, dow = expr.split()[2:]

    def matches(day: date) -> bool:
        return (
            (dom == "*" or day.day == int(dom))
            and (month == "*" or day.month == int(month))
            and (dow == "*" or day.isoweekday() % 7 == int(dow))
        )

    return matches


def expected_days(cal: Cal, expr: str, move: str, low: date, high: date) -> list[date]:
    """The business days in [low, high] on which the cron fires, day by day: one fires when the cron matches
    any of its source days (itself and, moving, the non-business days that move to it)."""
    matches = cron_days(expr)
    days = (low + timedelta(days=n) for n in range((high - low).days + 1))
    return [day for day in days if any(matches(source) for source in source_days(cal, day, move))]


def seven_day_weekends() -> st.SearchStrategy[Cal]:
    """Every day a weekend day: only a few extra workdays, up to years apart, are business days."""
    far = st.integers(-900, 900).map(lambda n: BASE + timedelta(days=n))
    return st.builds(
        Cal,
        weekend=st.just(frozenset(range(7))),
        holidays=st.just(frozenset()),
        workdays=st.frozensets(far, max_size=4),
    )


def long_holiday_runs() -> st.SearchStrategy[Cal]:
    """A usual weekend and a run of holidays (up to 400 days) near the base date."""

    def run(start: int, length: int) -> frozenset[date]:
        return frozenset(BASE + timedelta(days=start + n) for n in range(length))

    return st.builds(
        Cal,
        weekend=st.sampled_from([frozenset({5, 6}), frozenset({0, 1, 2, 3, 4, 5})]),
        holidays=st.builds(run, st.integers(-30, 30), st.integers(0, 400)),
        workdays=st.just(frozenset()),
    )


def fire_days(got: list[str]) -> list[date]:
    return [datetime.fromisoformat(moment).date() for moment in got]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cal=st.one_of(seven_day_weekends(), long_holiday_runs()),
    expr=st.sampled_from(EXPRESSIONS),
    move=st.sampled_from(["skip", "next", "previous"]),
    shift=st.integers(-1500, 1500),
)
@example(  # once walked for ever: the next business day of a monthly cron was years away
    cal=Cal(frozenset(range(7)), frozenset(), frozenset({date(2024, 11, 20), date(2027, 9, 7), date(2028, 10, 17)})),
    expr="0 9 1 * *",
    move="next",
    shift=-555,
)
@example(
    cal=Cal(frozenset(range(7)), frozenset(), frozenset({date(2028, 11, 4)})),
    expr="0 9 29 2 *",
    move="previous",
    shift=-1323,
)
def test_sparse_business_days_match_the_day_oracle(cal: Cal, expr: str, move: str, shift: int) -> None:
    after = datetime.combine(BASE + timedelta(days=shift), time(12), tzinfo=UTC)
    until = after + timedelta(days=3 * 366)
    trigger = {"kind": "cron", "expr": expr, "business_days": "cal", "on_non_business_day": move}
    sched = schedule("UTC", trigger, {"cal": cal.stored()})
    expected = expected_days(cal, expr, move, after.date() + timedelta(days=1), until.date())
    with guard():
        assert fire_days(walked(sched, after, until)) == expected
        assert fire_days(backwards(sched, after, until)) == expected
        latest = sched.previous_fire_time(after)
    earlier = expected_days(cal, expr, move, after.date() - timedelta(days=3 * 366), after.date())
    if earlier:
        assert latest is not None and latest.date() == earlier[-1]
    else:
        assert latest is None or latest.date() < after.date() - timedelta(days=3 * 366)


def test_a_minute_cron_moved_over_a_year_of_holidays_lands_whole_on_the_next_business_day() -> None:
    holidays = {f"2027-{m:02d}-{d:02d}": "Shutdown" for m in range(1, 13) for d in range(1, 29)}
    cal = {"kind": "business_days", "weekend": ["sat", "sun"], "resolved": {"holidays": holidays}}
    trigger = {"kind": "cron", "expr": "* * * * *", "business_days": "c", "on_non_business_day": "next"}
    sched = schedule("UTC", trigger, {"c": cal})
    with guard():
        got = walked(sched, datetime(2026, 12, 31, 23, 59, tzinfo=UTC), datetime(2027, 1, 30, tzinfo=UTC))
    # Friday 29 January is the first business day of 2027: every minute of the month before lands on it.
    assert got[0] == "2027-01-29T00:00:00+00:00" and len(got) == 24 * 60
    assert got[-1] == "2027-01-29T23:59:00+00:00"


FREEZE = {"cron": "0 22 * * 5", "duration": "56h"}  # Friday 22:00 to Monday 06:00


def blackout(*windows: dict[str, str]) -> dict[str, Any]:
    return {"kind": "blackout", "window": list(windows)}


NEVER = {
    "saturday-in-a-weekend-freeze": ("0 9 * * 6", blackout(FREEZE)),
    "and-a-fixed-window-in-8999": ("0 9 * * 6", blackout(FREEZE, {"from": "8999-01-01", "until": "8999-02-01"})),
    "daily-inside-a-daily-window": ("0 3 * * *", blackout({"cron": "0 2 * * *", "duration": "2h"})),
    "every-minute-blocked-every-minute": ("* * * * *", blackout({"cron": "* * * * *", "duration": "1m"})),
    "hourly-inside-windows-every-other-minute": ("0 * * * *", blackout({"cron": "*/2 * * * *", "duration": "1m"})),
}


def blocked(expr: str, calendar: dict[str, Any], **policy: Any) -> Schedule:
    return schedule("UTC", {"kind": "cron", "expr": expr}, {"f": calendar}, blackouts=["f"], **policy)


@pytest.mark.parametrize("name", NEVER)
def test_windows_that_block_every_occurrence_answer_never(name: str) -> None:
    expr, calendar = NEVER[name]
    sched = blocked(expr, calendar)
    with guard():
        assert sched.next_fire_time(datetime(2026, 12, 1, tzinfo=UTC)) is None
        assert sched.previous_fire_time(datetime(2026, 12, 1, tzinfo=UTC)) is None


def test_a_blocked_saturday_deferred_fires_when_each_freeze_ends() -> None:
    sched = blocked("0 9 * * 6", blackout(FREEZE), on_blackout="defer")
    with guard():
        got = walked(sched, datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 15, tzinfo=UTC))
    assert got == ["2026-12-07T06:00:00+00:00", "2026-12-14T06:00:00+00:00"]


def test_windows_eleven_months_of_twelve_leave_december() -> None:
    # Half-hour windows every hour from January to November: 8,000 blocked occurrences in a row, then December.
    sched = blocked("10 * * * *", blackout({"cron": "0 * * 1-11 *", "duration": "30m"}))
    with guard():
        assert sched.next_fire_time(datetime(2027, 1, 1, tzinfo=UTC)) == datetime(2027, 12, 1, 0, 10, tzinfo=UTC)
        assert sched.previous_fire_time(datetime(2027, 11, 30, tzinfo=UTC)) == datetime(
            2026, 12, 31, 23, 10, tzinfo=UTC
        )
