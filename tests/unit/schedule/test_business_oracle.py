"""Business days and blackouts against a brute-force oracle that walks elapsed minutes and applies the
calendar itself (SPEC §6), in zones where DST moves an hour and where it moves midnight, across both DST
nights of 2026, for every policy: skip / next / previous business day, the Nth business day, blackouts
skipped or deferred.

The oracle shares no code with reconciler.schedule: a calendar is plain sets of dates and weekdays, the
cron matcher and its DST rules are tests/unit/schedule/test_cron_oracle.py's, a business day's source days and the
Nth business day are found by walking dates, and blocked minutes by marking every window's minutes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.schedule.base import Schedule
from reconciler.schedule.blackout import Repeating
from reconciler.schedule.preview import upcoming
from tests.helpers import schedule
from tests.unit.schedule.test_cron_oracle import EXPRESSIONS, Oracle

pytestmark = pytest.mark.oracle  # no database: CI's extra pass (another server) leaves them out

ZONES = ["America/New_York", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Africa/Cairo"]
WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
SPAN = timedelta(days=4)
MINUTE = timedelta(minutes=1)


@cache
def transitions(zone: str) -> list[datetime]:
    """The instants of 2026 at which the zone's offset changes (found hour by hour)."""
    tz = ZoneInfo(zone)
    found = []
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    while moment.year == 2026:
        if (moment + timedelta(hours=1)).astimezone(tz).utcoffset() != moment.astimezone(tz).utcoffset():
            found.append(moment)
        moment += timedelta(hours=1)
    return found


@dataclass(frozen=True)
class Cal:
    """A business-days calendar as plain sets."""

    weekend: frozenset[int]
    holidays: frozenset[date]
    workdays: frozenset[date]

    def business(self, day: date) -> bool:
        return day in self.workdays or (day.weekday() not in self.weekend and day not in self.holidays)

    def stored(self) -> dict[str, Any]:
        return {
            "kind": "business_days",
            "weekend": [WEEKDAY_NAMES[d] for d in sorted(self.weekend)],
            "resolved": {"holidays": {d.isoformat(): "Oracle Day" for d in sorted(self.holidays)}},
            "extra_workdays": [d.isoformat() for d in sorted(self.workdays)],
        }


def source_days(cal: Cal, day: date, move: str) -> list[date]:
    """The days whose wall times an occurrence on `day` carries: itself and, moving, the days that move to it."""
    if not cal.business(day):
        return []
    found = [day]
    step = -1 if move == "next" else 1
    other = day + timedelta(days=step)
    while move != "skip" and not cal.business(other) and len(found) < 366:  # moves of up to 365 days
        found.append(other)
        other += timedelta(days=step)
    return found


class BusinessOracle(Oracle):
    def __init__(self, expr: str, zone: ZoneInfo, cal: Cal, move: str) -> None:
        super().__init__(expr, zone)
        self.cal, self.move = cal, move

    def matches(self, wall: datetime) -> bool:
        return any(
            super(BusinessOracle, self).matches(datetime.combine(d, wall.time()))
            for d in source_days(self.cal, wall.date(), self.move)
        )


class NthOracle(Oracle):
    def __init__(self, zone: ZoneInfo, cal: Cal, nth: int, times: list[time]) -> None:
        super().__init__("0 0 * * *", zone)
        self.both_passes = False
        self.cal, self.nth, self.times = cal, nth, times

    def matches(self, wall: datetime) -> bool:
        if wall.time() not in self.times:
            return False
        first = wall.date().replace(day=1)
        days = [first + timedelta(days=i) for i in range(31) if (first + timedelta(days=i)).month == first.month]
        business = [d for d in days if self.cal.business(d)]
        index = self.nth - 1 if self.nth > 0 else self.nth
        return -len(business) <= index < len(business) and business[index] == wall.date()


def walked(sched: Schedule, after: datetime, until: datetime) -> list[str]:
    got = []
    cursor = after
    while (nxt := sched.next_fire_time(cursor)) is not None and nxt <= until:
        got.append(nxt.isoformat())
        cursor = nxt
    return got


def backwards(sched: Schedule, after: datetime, until: datetime) -> list[str]:
    got = []
    cursor = until + timedelta(microseconds=1)
    while (found := sched.previous_fire_time(cursor)) is not None and found > after:
        got.append(found.isoformat())
        cursor = found
    return got[::-1]


def calendars() -> st.SearchStrategy[Cal]:
    near = st.integers(-6, 10).map(lambda n: date(2026, 1, 1) + timedelta(days=n))  # shifted per example
    return st.builds(
        Cal,
        weekend=st.one_of(st.frozensets(st.integers(0, 6), max_size=3), st.just(frozenset(range(7)))),
        holidays=st.frozensets(near, max_size=5),
        workdays=st.frozensets(near, max_size=2),
    )


def shifted(cal: Cal, around: date) -> Cal:
    """The calendar's listed dates moved from around 2026-01-01 to around `around`."""
    delta = around - date(2026, 1, 1)
    return Cal(cal.weekend, frozenset(d + delta for d in cal.holidays), frozenset(d + delta for d in cal.workdays))


STARTS = st.tuples(st.sampled_from(ZONES), st.integers(0, 1), st.integers(-3 * 24 * 60, 24 * 60))


def start_of(zone: str, which: int, shift: int) -> datetime:
    return transitions(zone)[which] + timedelta(minutes=shift, seconds=17)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=EXPRESSIONS, start=STARTS, cal=calendars(), move=st.sampled_from(["skip", "next", "previous"]))
def test_business_days_match_the_oracle(expr: str, start: tuple[str, int, int], cal: Cal, move: str) -> None:
    zone, which, shift = start
    after = start_of(zone, which, shift)
    until = after + SPAN
    cal = shifted(cal, after.date())
    expected = [m.isoformat() for m in BusinessOracle(expr, ZoneInfo(zone), cal, move).fires(after, until)]
    trigger = {"kind": "cron", "expr": expr, "business_days": "cal", "on_non_business_day": move}
    sched = schedule(zone, trigger, {"cal": cal.stored()})
    assert walked(sched, after, until) == expected
    assert backwards(sched, after, until) == expected


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=STARTS,
    cal=calendars(),
    nth=st.sampled_from([1, 2, 3, 5, 20, 23, -1, -2, -5, -23]),
    times=st.lists(st.sampled_from([time(0, 0), time(0, 30), time(2, 30), time(9, 0), time(23, 30)]), min_size=1),
)
def test_nth_business_day_matches_the_oracle(
    start: tuple[str, int, int], cal: Cal, nth: int, times: list[time]
) -> None:
    zone, which, shift = start
    after = start_of(zone, which, shift) - timedelta(days=20)
    until = after + timedelta(days=45)
    cal = shifted(cal, after.date() + timedelta(days=15))
    oracle = NthOracle(ZoneInfo(zone), cal, nth, sorted(set(times)))
    trigger = {"kind": "business_day", "business_days": "cal", "day": nth, "at": [t.strftime("%H:%M") for t in times]}
    sched = schedule(zone, trigger, {"cal": cal.stored()})
    expected = [m.isoformat() for m in oracle.fires(after, until)]
    assert walked(sched, after, until) == expected
    assert backwards(sched, after, until) == expected


# ---------------------------------------------------------------- blackouts


@dataclass(frozen=True)
class Window:
    """A cron window (expr, minutes) or a fixed local range (from, until)."""

    expr: str | None = None
    minutes: int = 0
    start: datetime | None = None
    end: datetime | None = None

    def stored(self) -> dict[str, Any]:
        if self.expr is not None:
            return {"cron": self.expr, "duration": f"{self.minutes}m"}
        assert self.start is not None and self.end is not None
        return {"from": self.start.isoformat(), "until": self.end.isoformat()}


def blocked_minutes(windows: list[Window], zone: ZoneInfo, low: datetime, high: datetime) -> set[datetime]:
    """Every UTC minute in [low, high) that a window holds."""
    blocked: set[datetime] = set()
    for window in windows:
        if window.expr is not None:
            opens = Oracle(window.expr, zone).fires(low - timedelta(minutes=window.minutes + 1), high)
            spans = [(o, o + timedelta(minutes=window.minutes)) for o in opens]
        else:
            assert window.start is not None and window.end is not None
            spans = [(local_instant(window.start, zone), local_instant(window.end, zone))]
        for a, b in spans:
            moment = max(a, low)
            while moment < min(b, high):
                blocked.add(moment)
                moment += MINUTE
    return blocked


def local_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    return wall.replace(tzinfo=zone).astimezone(UTC)


def unambiguous(wall: datetime, zone: ZoneInfo) -> bool:
    first, second = wall.replace(tzinfo=zone, fold=0), wall.replace(tzinfo=zone, fold=1)
    return first.utcoffset() == second.utcoffset()


def blackout_oracle(
    base: list[datetime], blocked: set[datetime], defer: bool, after: datetime, until: datetime
) -> list[str]:
    out = {m for m in base if m not in blocked and after < m <= until}
    if defer:
        for m in base:
            if m in blocked:
                end = m
                while end in blocked:
                    end += MINUTE
                if after < end <= until:
                    out.add(end)
    return [m.isoformat() for m in sorted(out)]


WINDOW_CRONS = st.sampled_from(["0 22 * * 5", "30 1 * * *", "0 2 * * 0", "*/45 * * * *", "0 0 * * *", "15 23 * * 6"])


def windows(zone: ZoneInfo, around: datetime) -> st.SearchStrategy[list[Window]]:
    repeating = st.builds(Window, expr=WINDOW_CRONS, minutes=st.integers(1, 36 * 60))
    local = around.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
    walls = st.integers(-3 * 24 * 60, 3 * 24 * 60).map(lambda m: local + timedelta(minutes=m))
    fixed = st.tuples(walls, st.integers(1, 3 * 24 * 60)).map(
        lambda w: Window(start=w[0], end=w[0] + timedelta(minutes=w[1]))
    )
    usable = fixed.filter(lambda w: unambiguous(w.start, zone) and unambiguous(w.end, zone))  # type: ignore[arg-type]
    return st.lists(st.one_of(repeating, usable), min_size=1, max_size=3)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=EXPRESSIONS, start=STARTS, defer=st.booleans(), data=st.data(), zone_of_windows=st.sampled_from(ZONES))
def test_blackouts_match_the_oracle(
    expr: str, start: tuple[str, int, int], defer: bool, data: st.DataObject, zone_of_windows: str
) -> None:
    zone, which, shift = start
    after = start_of(zone, which, shift)
    until = after + SPAN
    window_zone = ZoneInfo(zone_of_windows)
    drawn = data.draw(windows(window_zone, after))
    low, high = after - timedelta(days=4), until + timedelta(days=4)
    blocked = blocked_minutes(drawn, window_zone, low, high)
    base = Oracle(expr, ZoneInfo(zone)).fires(low, high)
    if defer and any(m in blocked for m in (low, high - MINUTE)):
        return  # a blocked span reaching past the oracle's walk: its end is not known there
    expected = blackout_oracle(base, blocked, defer, after, until)
    stored = {"kind": "blackout", "timezone": zone_of_windows, "window": [w.stored() for w in drawn]}
    policy = {"blackouts": ["freeze"], "on_blackout": "defer" if defer else "skip"}
    sched = schedule(zone, {"kind": "cron", "expr": expr}, {"freeze": stored}, **policy)
    assert walked(sched, after, until) == expected
    assert backwards(sched, after, until) == expected


# ---------------------------------------------------------------- facts checked by hand

US = {
    "kind": "business_days",
    "weekend": ["sat", "sun"],
    "resolved": {"holidays": {"2025-05-26": "Memorial Day", "2025-09-01": "Labor Day"}},
}


def fires(
    zone: str, trigger: dict[str, Any], calendars: dict[str, Any], after: str, count: int, **policy: Any
) -> list[str]:
    sched = schedule(zone, trigger, calendars, **policy)
    return [f.at.astimezone(ZoneInfo(zone)).isoformat() for f in upcoming(sched, datetime.fromisoformat(after), count)]


def test_the_first_us_business_day_of_september_2025_is_the_2nd() -> None:
    trigger = {"kind": "business_day", "business_days": "us", "day": 1, "at": "09:00"}
    got = fires("America/New_York", trigger, {"us": US}, "2025-08-15T00:00:00+00:00", 1)
    assert got == ["2025-09-02T09:00:00-04:00"]


def test_the_last_us_business_day_of_may_2025_is_the_30th() -> None:
    trigger = {"kind": "business_day", "business_days": "us", "day": -1, "at": "09:00"}
    got = fires("America/New_York", trigger, {"us": US}, "2025-05-01T00:00:00+00:00", 1)
    assert got == ["2025-05-30T09:00:00-04:00"]


def test_moving_to_the_next_business_day_over_labor_day_weekend_fires_once_on_tuesday() -> None:
    trigger = {"kind": "cron", "expr": "0 9 * * *", "business_days": "us", "on_non_business_day": "next"}
    got = fires("America/New_York", trigger, {"us": US}, "2025-08-29T14:00:00+00:00", 2)
    assert got == ["2025-09-02T09:00:00-04:00", "2025-09-03T09:00:00-04:00"]


def test_moving_to_the_previous_business_day_fires_friday_once_for_the_weekend() -> None:
    trigger = {"kind": "cron", "expr": "0 9 * * 6,0", "business_days": "us", "on_non_business_day": "previous"}
    got = fires("America/New_York", trigger, {"us": US}, "2025-08-25T00:00:00+00:00", 2)
    assert got == ["2025-08-29T09:00:00-04:00", "2025-09-05T09:00:00-04:00"]


def test_a_moved_occurrence_keeps_the_dst_rules_of_its_new_day() -> None:
    # Berlin, 2026-03-29 is a Sunday and the spring-forward night: 02:30 does not exist that day. Saturday's
    # 02:30 moved to the next business day lands on that Sunday (an extra workday) and fires at 03:00.
    cal = {"kind": "business_days", "weekend": ["sat"], "extra_workdays": []}
    trigger = {"kind": "cron", "expr": "30 2 * * 6", "business_days": "c", "on_non_business_day": "next"}
    got = fires("Europe/Berlin", trigger, {"c": cal}, "2026-03-27T00:00:00+00:00", 1)
    assert got == ["2026-03-29T03:00:00+02:00"]


@pytest.mark.parametrize("cached", [Repeating.MAX_CACHED, 0])  # 0: every answer asks the cron
def test_a_weekend_freeze_over_the_fall_back_night_lasts_its_elapsed_duration(
    cached: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Repeating, "MAX_CACHED", cached)
    freeze = {"kind": "blackout", "timezone": "Europe/Berlin", "window": [{"cron": "0 22 * * 5", "duration": "56h"}]}
    trigger = {"kind": "cron", "expr": "30 2 * * *"}
    skipped = fires("Europe/Berlin", trigger, {"f": freeze}, "2026-10-22T00:00:00+00:00", 3, blackouts=["f"])
    assert skipped == ["2026-10-22T02:30:00+02:00", "2026-10-23T02:30:00+02:00", "2026-10-27T02:30:00+01:00"]
    deferred = fires(
        "Europe/Berlin", trigger, {"f": freeze}, "2026-10-23T12:00:00+00:00", 2, blackouts=["f"], on_blackout="defer"
    )
    # Friday 22:00 CEST + 56 h of real time is Monday 05:00 CET (the night of 25 October is 25 hours long).
    assert deferred == ["2026-10-26T05:00:00+01:00", "2026-10-27T02:30:00+01:00"]


# ---------------------------------------------------------------- next, occurrences in (A, B], latest at or before

TICK = timedelta(microseconds=1)
YEAR = timedelta(days=366)
SPARSE = st.sampled_from(["0 9 * * *", "30 2 * * *", "0 0 1 * *", "15 10 * * 1", "0 12 29 2 *", "0 22 * * 5,6"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expr=SPARSE,
    start=STARTS,
    cal=calendars(),
    move=st.sampled_from(["skip", "next", "previous"]),
    blackout=st.sampled_from([None, "skip", "defer"]),
    minutes=st.integers(1, 3 * 24 * 60),
)
def test_next_is_the_first_of_the_occurrences_in_the_year_after(
    expr: str, start: tuple[str, int, int], cal: Cal, move: str, blackout: str | None, minutes: int
) -> None:
    from reconciler.schedule.preview import fires_between

    zone, which, shift = start
    after = start_of(zone, which, shift)
    cal = shifted(cal, after.date())
    calendars = {
        "cal": cal.stored(),
        "f": {"kind": "blackout", "window": [{"cron": "0 22 * * 5", "duration": f"{minutes}m"}]},
    }
    policy = {"blackouts": ["f"], "on_blackout": blackout} if blackout else {}
    trigger = {"kind": "cron", "expr": expr, "business_days": "cal", "on_non_business_day": move}
    sched = schedule(zone, trigger, calendars, **policy)
    following = sched.next_fire_time(after)
    inside, _ = fires_between(sched, after, after + YEAR, 1)
    assert [f.at for f in inside] == ([following] if following is not None and following <= after + YEAR else [])
    # The same answer from the other direction: latest at or before it is itself, and nothing in (after, it).
    if following is not None:
        assert sched.previous_fire_time(following + TICK) == following
        earlier = sched.previous_fire_time(following)
        assert earlier is None or earlier <= after
    else:
        latest = sched.previous_fire_time(after + YEAR + TICK)
        assert latest is None or latest <= after
