"""Property: cron next_fire_time agrees with a brute-force oracle that walks elapsed minutes.

The oracle shares no code with reconciler.schedule.triggers: it parses the generated expression
itself, walks UTC minutes, reads each minute's wall clock with zoneinfo and applies the
SPEC's DST rules directly (gap → the first instant after the gap, overlap → first pass
unless the hour field is `*`/`*/1` or the minute field begins with `*`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import schedule

pytestmark = pytest.mark.oracle  # no database: CI's extra pass (another server) leaves them out

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"]
# Transition instants of 2026/2027 (UTC) plus ordinary days, to start near.
STARTS = [
    datetime(2026, 3, 8, 6, 0, tzinfo=UTC),
    datetime(2026, 3, 29, 0, 0, tzinfo=UTC),
    datetime(2026, 4, 4, 15, 0, tzinfo=UTC),
    datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
    datetime(2026, 10, 25, 0, 0, tzinfo=UTC),
    datetime(2026, 11, 1, 5, 0, tzinfo=UTC),
    datetime(2027, 3, 14, 6, 0, tzinfo=UTC),
    datetime(2027, 3, 28, 0, 0, tzinfo=UTC),
    datetime(2027, 4, 3, 15, 0, tzinfo=UTC),
    datetime(2027, 10, 2, 15, 30, tzinfo=UTC),
    datetime(2027, 10, 31, 0, 0, tzinfo=UTC),
    datetime(2027, 11, 7, 5, 0, tzinfo=UTC),
    datetime(2026, 6, 15, 12, 0, tzinfo=UTC),
]
HORIZON = timedelta(hours=36)


def field(low: int, high: int, allow_star_step: bool = True) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    single = number.map(str)
    span = st.tuples(number, number).map(lambda ab: f"{min(ab)}-{max(ab)}")
    stepped = st.tuples(number, number, st.integers(1, max(1, (high - low) // 2))).map(
        lambda abs_: f"{min(abs_[0], abs_[1])}-{max(abs_[0], abs_[1])}/{abs_[2]}"
    )
    items = st.lists(st.one_of(single, span, stepped), min_size=1, max_size=3).map(",".join)
    options = [st.just("*"), items]
    if allow_star_step:
        options.append(st.integers(1, max(1, (high - low) // 2)).map(lambda n: f"*/{n}"))
    return st.one_of(*options)


EXPRESSIONS = st.tuples(
    field(0, 59),
    st.one_of(field(0, 23), st.sampled_from(["*", "*/1", "2", "1,2,3", "0-3"])),
    field(1, 31, allow_star_step=False),
    st.just("*"),
    field(0, 6, allow_star_step=False),
).map(" ".join)


def expand(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            start, stop = low, high
        elif "-" in base:
            a, b = base.split("-")
            start, stop = int(a), int(b)
        else:
            start = stop = int(base)
            if step:
                stop = high
        values.update(range(start, stop + 1, int(step or 1)))
    return values


class Oracle:
    def __init__(self, expr: str, zone: ZoneInfo) -> None:
        minute, hour, dom, month, dow = expr.split()
        self.minute = expand(minute, 0, 59)
        self.hour = expand(hour, 0, 23)
        self.dom = expand(dom, 1, 31)
        self.month = expand(month, 1, 12)
        self.dow = expand(dow, 0, 6)
        self.dom_star, self.dow_star = dom == "*", dow == "*"
        self.both_passes = hour in ("*", "*/1") or minute.startswith("*")
        self.zone = zone

    def matches(self, wall: datetime) -> bool:
        if wall.minute not in self.minute or wall.hour not in self.hour or wall.month not in self.month:
            return False
        dom_ok = wall.day in self.dom
        dow_ok = (wall.isoweekday() % 7) in self.dow
        if not self.dom_star and not self.dow_star:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def fires(self, after: datetime, until: datetime) -> list[datetime]:
        out: list[datetime] = []
        moment = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
        while moment <= until:
            local = moment.astimezone(self.zone)
            previous = (moment - timedelta(minutes=1)).astimezone(self.zone)
            jump = local.utcoffset() - previous.utcoffset()  # type: ignore[operator]
            wall = local.replace(tzinfo=None)
            fire = False
            if jump > timedelta(0):
                # First instant after a gap: any skipped wall minute (or this one) fires here, once.
                skipped = [wall - timedelta(minutes=m) for m in range(1, int(jump.total_seconds() // 60) + 1)]
                fire = self.matches(wall) or any(self.matches(w) for w in skipped)
            elif self.matches(wall):
                later = (moment + timedelta(hours=3)).astimezone(self.zone)
                earlier = (moment - timedelta(hours=3)).astimezone(self.zone)
                repeated = (
                    wall.replace(tzinfo=self.zone, fold=0).utcoffset()
                    != wall.replace(tzinfo=self.zone, fold=1).utcoffset()
                    and earlier.utcoffset() != later.utcoffset()
                )
                fire = not repeated or self.both_passes or local.fold == 0
            if fire:
                out.append(moment)
            moment += timedelta(minutes=1)
        return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expr=EXPRESSIONS,
    zone=st.sampled_from(ZONES),
    start=st.sampled_from(STARTS),
    shift_minutes=st.integers(-36 * 60, 36 * 60),
)
def test_cron_matches_brute_force_oracle(expr: str, zone: str, start: datetime, shift_minutes: int) -> None:
    after = start + timedelta(minutes=shift_minutes, seconds=17)
    until = after + HORIZON
    expected = Oracle(expr, ZoneInfo(zone)).fires(after, until)
    sched = schedule(zone, {"kind": "cron", "expr": expr})
    got: list[datetime] = []
    cursor = after
    while True:
        nxt = sched.next_fire_time(cursor)
        if nxt is None or nxt > until:
            break
        got.append(nxt)
        cursor = nxt
    assert [g.isoformat() for g in got] == [e.isoformat() for e in expected]
