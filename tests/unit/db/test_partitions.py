"""Which partitions a time-partitioned table needs and which retention may drop (db/partitions.py), against the
rule they must keep: from MINVALUE to at least AHEAD intervals past now, no hole, no overlap."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from reconciler.db.partitions import AHEAD, Bound, Partition, Partitioning, expired, missing

DAY = Partitioning("scheduled_for", 1)
NOW = datetime(2026, 12, 7, 15, 30, tzinfo=UTC)
MIDNIGHT = datetime(2026, 12, 7, tzinfo=UTC)


def made(bounds: list[Bound]) -> list[Partition]:
    return [Partition(b.name, b.lower, b.upper) for b in bounds]


def assert_covers(parts: list[Partition], now: datetime, spec: Partitioning = DAY) -> None:
    ordered = sorted(parts, key=lambda p: p.upper)
    assert ordered[0].lower is None and all(p.lower is not None for p in ordered[1:])
    for below, above in itertools.pairwise(ordered):
        assert below.upper == above.lower  # no hole, no overlap
    assert ordered[-1].upper >= now + AHEAD * spec.interval
    assert len({p.name for p in parts}) == len(parts)


def test_a_new_table_gets_everything_before_today_and_a_day_each_ahead() -> None:
    bounds = missing("runs", [], DAY, NOW)
    assert [b.name for b in bounds] == [
        "runs_before_20261207",
        "runs_p20261207",
        "runs_p20261208",
        "runs_p20261209",
        "runs_p20261210",
    ]
    assert bounds[0].lower is None and bounds[0].upper == MIDNIGHT
    assert bounds[1].lower == MIDNIGHT and bounds[1].upper == MIDNIGHT + timedelta(days=1)
    assert_covers(made(bounds), NOW)


def test_covered_enough_needs_nothing_and_a_new_day_needs_one() -> None:
    parts = made(missing("runs", [], DAY, NOW))
    assert missing("runs", parts, DAY, NOW) == []
    tomorrow = missing("runs", parts, DAY, NOW + timedelta(days=1))
    assert [b.name for b in tomorrow] == ["runs_p20261211"]


def test_a_long_outage_is_one_partition_not_a_hole() -> None:
    parts = made(missing("runs", [], DAY, NOW))
    later = NOW + timedelta(days=30)
    bounds = missing("runs", parts, DAY, later)
    assert bounds[0].lower == MIDNIGHT + timedelta(days=4) and bounds[0].upper == MIDNIGHT + timedelta(days=30)
    assert_covers(parts + made(bounds), later)


def test_retention_of_the_lowest_partition_gets_minvalue_covered_again() -> None:
    parts = made(missing("runs", [], DAY, NOW))
    gone = expired(parts, MIDNIGHT + timedelta(days=2))
    assert [p.name for p in gone] == ["runs_before_20261207", "runs_p20261207", "runs_p20261208"]
    left = [p for p in parts if p not in gone]
    bounds = missing("runs", left, DAY, NOW)
    assert [(b.lower, b.upper) for b in bounds] == [(None, MIDNIGHT + timedelta(days=2))]
    assert_covers(left + made(bounds), NOW)


@given(
    st.lists(st.integers(-400, 400), max_size=6),
    st.integers(1, 30),
    st.datetimes(datetime(1971, 1, 1), datetime(9990, 1, 1), timezones=st.just(UTC)),
)
def test_any_history_of_passes_covers_without_hole(offsets: list[int], days: int, start: datetime) -> None:
    """Passes at any times (an engine's clock, injected times, long outages), and retention between them: the
    table is always covered from MINVALUE to AHEAD intervals past the latest pass."""
    spec = Partitioning("at", days)
    parts = made(missing("t", [], spec, start))
    latest = start
    for offset in offsets:
        now = start + timedelta(days=offset)
        if offset % 3 == 0:
            parts = [p for p in parts if p not in expired(parts, now - timedelta(days=2 * days))]
        parts += made(missing("t", parts, spec, now))
        latest = max(latest, now)
        assert_covers(parts, now, spec)
    assert_covers(parts, latest, spec)
