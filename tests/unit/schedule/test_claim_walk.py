"""The claim's due occurrences: the occurrence they end on is the schedule's next after `now`,
and a schedule shared by many tasks (SharedSchedule) answers exactly as its own would."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.schedule.catchup import SharedSchedule, due_occurrences
from reconciler.spec.task import Policy
from tests.helpers import schedule
from tests.unit.schedule.test_cron_oracle import EXPRESSIONS, STARTS, ZONES


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expr=EXPRESSIONS,
    zone=st.sampled_from(ZONES),
    start=st.sampled_from(STARTS),
    late_minutes=st.integers(0, 6 * 60),
    cap=st.integers(1, 5),
)
def test_the_walk_ends_on_the_next_occurrence_after_now(
    expr: str, zone: str, start: object, late_minutes: int, cap: int
) -> None:
    own = schedule(zone, {"kind": "cron", "expr": expr})
    first = own.next_fire_time(start)  # type: ignore[arg-type]
    if first is None:
        return
    now = first + timedelta(minutes=late_minutes, seconds=17)
    shared = SharedSchedule(schedule(zone, {"kind": "cron", "expr": expr}))
    for compiled in (own, shared, shared):  # the shared one twice: its remembered answers too
        due, following = due_occurrences(compiled, first, now, Policy(), cap)
        assert following == own.next_fire_time(now)
        assert due and due[-1] <= now and len(due) <= cap
        assert following is None or following > now


def test_a_long_catch_up_still_reports_the_next_occurrence_after_now() -> None:
    every_second = schedule("UTC", {"kind": "interval", "every": "1s"})
    first = STARTS[0]
    now = first + timedelta(days=30)  # far more occurrences than the walk takes
    due, following = due_occurrences(every_second, first, now, Policy(), cap=3)
    assert due == [now - timedelta(seconds=2), now - timedelta(seconds=1), now]
    assert following == now + timedelta(seconds=1)
