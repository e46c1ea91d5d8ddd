"""Catch-up is computed, not walked: `previous_fire_time` and the claim's `due_occurrences` agree with a
brute-force forward walk of `next_fire_time`, across DST nights, for every trigger kind, and cost the
same few steps whatever the downtime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.engine.claim_plan import decide
from reconciler.schedule.base import Schedule
from reconciler.schedule.catchup import CATCHUP_CAP, ON_TIME_SECONDS, SharedSchedule, due_occurrences
from reconciler.spec.task import Policy
from tests.helpers import schedule
from tests.unit.schedule.test_cron_oracle import EXPRESSIONS, STARTS, ZONES

CALENDARS = st.fixed_dictionaries(
    {
        "kind": st.just("calendar"),
        "every": st.integers(1, 3),
        "unit": st.sampled_from(["days", "weeks", "months"]),
        "at": st.lists(st.sampled_from(["00:00", "01:30", "02:30", "03:00", "09:15", "23:59"]), min_size=1, max_size=3),
        "start_at": st.sampled_from(["2026-01-31", "2026-03-01", "2025-12-29"]),
    }
)
INTERVALS = st.fixed_dictionaries(
    {"kind": st.just("interval"), "every": st.sampled_from(["1s", "7s", "90s", "15m", "6h", "2d"])}
)
TRIGGERS = st.one_of(EXPRESSIONS.map(lambda expr: {"kind": "cron", "expr": expr}), CALENDARS, INTERVALS)


# How far back the oracle walks: a few hundred steps of the most frequent schedule of each kind.
SPANS = {"cron": timedelta(days=2), "interval": timedelta(minutes=30), "calendar": timedelta(days=100)}


def walk(compiled: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Every occurrence in (start, end], by stepping forward: the oracle."""
    found: list[datetime] = []
    moment = compiled.next_fire_time(start)
    while moment is not None and moment <= end:
        found.append(moment)
        moment = compiled.next_fire_time(moment)
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trigger=TRIGGERS,
    zone=st.sampled_from(ZONES),
    start=st.sampled_from(STARTS),
    offset_minutes=st.integers(0, 36 * 60),
    seconds=st.integers(0, 59),
    overlap=st.sampled_from([None, "first", "last", "both"]),
    gap=st.sampled_from(["shift", "skip"]),
)
def test_the_previous_occurrence_is_the_last_one_a_forward_walk_finds(
    trigger: dict[str, Any], zone: str, start: datetime, offset_minutes: int, seconds: int, overlap: str | None,
    gap: str,
) -> None:  # fmt: skip
    policy: dict[str, Any] = {"dst_gap": gap} | ({"dst_overlap": overlap} if overlap else {})
    compiled = schedule(zone, trigger, **policy)
    before = start + timedelta(minutes=offset_minutes, seconds=seconds)
    span = SPANS[trigger["kind"]]
    found = walk(compiled, before - span, before - timedelta(microseconds=1))
    expected = found[-1] if found else None
    if expected is None:  # nothing in the span walked: the answer, if any, is older
        got = compiled.previous_fire_time(before)
        assert got is None or got <= before - span
        return
    assert compiled.previous_fire_time(before) == expected
    # And stepping back from there gives the walk's occurrences in reverse.
    back, moment = [], compiled.previous_fire_time(before)
    while moment is not None and len(back) < len(found) and len(back) < 30:
        back.append(moment)
        moment = compiled.previous_fire_time(moment)
    assert back == found[::-1][: len(back)]


def brute_due(
    compiled: Schedule, first: datetime, now: datetime, policy: Policy, cap: int
) -> tuple[list[datetime], datetime | None]:
    """What a claim decides, by walking every occurrence from `first` (the old way, uncapped)."""
    every = [first, *walk(compiled, first, now)]
    if len(every) == 1:
        return every, compiled.next_fire_time(first)
    if policy.coalesce:
        return every[-cap:], compiled.next_fire_time(now)
    floor = now - timedelta(seconds=max(policy.misfire_grace_seconds, ON_TIME_SECONDS))
    missed = [m for m in every if m < floor][-cap:]
    within = [m for m in every if m >= floor]
    fired = within[:cap]
    following = within[cap] if len(within) > cap else compiled.next_fire_time(now)
    return missed + fired, following


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trigger=TRIGGERS,
    zone=st.sampled_from(ZONES),
    start=st.sampled_from(STARTS),
    late=st.one_of(st.integers(0, 600), st.integers(0, 36 * 3600)),
    coalesce=st.booleans(),
    grace=st.sampled_from([0, 1, 10, 60, 300, 3600]),
    cap=st.integers(1, 5),
)
def test_due_occurrences_equal_the_brute_force_walk(
    trigger: dict[str, Any], zone: str, start: datetime, late: int, coalesce: bool, grace: int, cap: int
) -> None:
    compiled = schedule(zone, trigger)
    first = compiled.next_fire_time(start)
    if first is None:
        return
    if trigger["kind"] == "interval":  # the oracle walks every occurrence: keep it to a few thousand
        late = min(late, 2000 * int(compiled.period.total_seconds()))  # type: ignore[attr-defined]
    now = first + timedelta(seconds=late, microseconds=250)
    policy = Policy(coalesce=coalesce, misfire_grace_seconds=grace)
    expected = brute_due(compiled, first, now, policy, cap)
    for answering in (compiled, SharedSchedule(compiled)):
        assert due_occurrences(answering, first, now, policy, cap) == expected


@pytest.mark.parametrize("days", [1 / 24, 3, 30, 365])
@pytest.mark.parametrize(
    "trigger", [{"kind": "cron", "expr": "* * * * *"}, {"kind": "interval", "every": "1s"}], ids=["cron", "interval"]
)
def test_a_long_downtime_gives_the_latest_occurrence_in_a_few_steps(trigger: dict[str, Any], days: float) -> None:
    """Coalesce fires the latest occurrence however long the engine was down (a 200,000-step walk used
    to stop at 3 January for a 1 s interval down all of January)."""
    compiled = schedule("Europe/Berlin", trigger)
    first = datetime(2026, 1, 1, tzinfo=UTC)
    now = first + timedelta(days=days, seconds=0.5)
    calls = 0

    class Counting:
        def next_fire_time(self, after: datetime) -> datetime | None:
            nonlocal calls
            calls += 1
            return compiled.next_fire_time(after)

        def previous_fire_time(self, before: datetime) -> datetime | None:
            nonlocal calls
            calls += 1
            return compiled.previous_fire_time(before)

    due, following = due_occurrences(Counting(), first, now, Policy(), CATCHUP_CAP)  # type: ignore[arg-type]
    latest = now.replace(microsecond=0) if trigger["kind"] == "interval" else now.replace(second=0, microsecond=0)
    period = 1 if trigger["kind"] == "interval" else 60
    assert due[-1] == latest and len(due) == min(CATCHUP_CAP, int((now - first).total_seconds()) // period + 1)
    assert following is not None and following > now
    assert calls <= CATCHUP_CAP + 3  # the newest 100 and the next: never one per missed occurrence
    decisions = decide(due, now, Policy(), free_slots=1)
    assert [d.status for d in decisions].count("running") == 1 and decisions[-1].scheduled_for == latest


def test_without_coalesce_the_oldest_within_the_grace_fire_first_and_the_rest_stay_due() -> None:
    every_second = schedule("UTC", {"kind": "interval", "every": "1s"})
    first = datetime(2026, 1, 1, tzinfo=UTC)
    now = first + timedelta(days=30)
    due, following = due_occurrences(every_second, first, now, Policy(coalesce=False, misfire_grace_seconds=300), 100)
    missed, fired = due[:100], due[100:]
    assert missed[-1] == now - timedelta(seconds=301) and fired[0] == now - timedelta(seconds=300)
    assert len(fired) == 100 and following == fired[-1] + timedelta(seconds=1)  # the 101st within grace stays due
