"""The fair share of a limit's room between tasks (engine/limits.py: Gate.share), pure: table cases and
hypothesis against the rules (room never exceeded, each task's runs in order, turns within one)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.db.queries import LimitRow
from reconciler.engine.limits import Gate

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def row(name: str, *, max_in_flight: int | None = None, rate: float | None = None, in_flight: int = 0,
        tokens: float = 0.0) -> LimitRow:  # fmt: skip
    return LimitRow(
        source="s", name=name, max_in_flight=max_in_flight, rate_per_second=rate, burst=None,
        in_flight=in_flight, tokens=tokens, at=T0,
    )  # fmt: skip


def moments(*minutes: int) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in minutes]


def test_two_runs_are_not_behind_forty() -> None:
    gate = Gate([row("api", max_in_flight=2)])
    granted = gate.share({"many": ("s", ("api",), moments(*range(40))), "few": ("s", ("api",), moments(20, 40))})
    assert granted == {"many": (1, "api"), "few": (1, "api")}


def test_across_claims_the_task_with_fewest_in_flight_goes_first() -> None:
    # A saturated limit frees one slot at a time: the claim that takes it gives it to the task with fewest runs in
    # flight, not always to the one whose waiting run is oldest (which would put `few` behind all of `many`).
    gate = Gate([row("api", max_in_flight=2, in_flight=1)])
    parties = {"many": ("s", ("api",), moments(*range(2, 40))), "few": ("s", ("api",), moments(40))}
    assert gate.share(parties, {"many": 1, "few": 0}) == {"many": (0, "api"), "few": (1, None)}


def test_oldest_first_between_tasks_in_a_turn() -> None:
    gate = Gate([row("api", max_in_flight=1)])
    granted = gate.share({"late": ("s", ("api",), moments(5)), "early": ("s", ("api",), moments(1))})
    assert granted == {"early": (1, None), "late": (0, "api")}


def test_every_limit_a_task_names_must_have_room() -> None:
    gate = Gate([row("wide", max_in_flight=10), row("narrow", rate=1.0, tokens=1.5)])
    granted = gate.share({"a": ("s", ("wide", "narrow"), moments(1, 2, 3)), "b": ("s", ("wide",), moments(1, 2))})
    assert granted == {"a": (1, "narrow"), "b": (2, None)}
    assert gate.buckets[("s", "wide")].started == 3 and gate.buckets[("s", "narrow")].tokens == 0.5


def test_a_limit_not_in_the_database_holds_nothing() -> None:
    assert Gate([]).share({"a": ("s", ("gone",), moments(1, 2))}) == {"a": (2, None)}


@settings(deadline=None)
@given(
    room=st.integers(0, 30),
    in_flight=st.integers(0, 5),
    wants=st.lists(st.integers(0, 12), min_size=1, max_size=8),
)
def test_the_share_keeps_to_the_room_and_takes_turns(room: int, in_flight: int, wants: list[int]) -> None:
    gate = Gate([row("g", max_in_flight=room, in_flight=in_flight)])
    parties = {f"t{i}": ("s", ("g",), moments(*range(i, i + n))) for i, n in enumerate(wants)}
    granted = gate.share(parties)
    started = sum(count for count, _ in granted.values())
    assert started == min(max(0, room - in_flight), sum(wants))  # all the room, never more
    for party, (count, stopped) in granted.items():
        want = len(parties[party][2])
        assert count <= want and (stopped is None) == (count == want)
    # turns: a task stopped by the limit has at most one run fewer than any task that got more than it
    for _, (count, stopped) in granted.items():
        if stopped is not None:
            assert all(other <= count + 1 for other, _ in granted.values())
