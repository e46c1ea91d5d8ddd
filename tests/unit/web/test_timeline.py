"""The dashboard's timeline across DST nights: every occurrence in exactly one real hour, and the
hours of a fall-back night each once, labelled with their own offsets (pure: no database)."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from reconciler.web.timeline import MARKS_PER_TASK, SPAN, Planned, timeline
from tests.helpers import schedule
from tests.unit.schedule.test_cron_oracle import Oracle

BERLIN = ZoneInfo("Europe/Berlin")
FALL_BACK_EVE = datetime(2026, 10, 24, 22, 0, tzinfo=UTC)  # Berlin's clocks go back at 01:00 UTC on the 25th
SPRING_EVE = datetime(2026, 3, 28, 22, 0, tzinfo=UTC)  # and forward at 01:00 UTC on 2026-03-29


def planned(task_id: str, expr: str, zone: str = "Europe/Berlin") -> Planned:
    return Planned(task_id, zone, schedule(zone, {"kind": "cron", "expr": expr}))


def marks(data: dict[str, Any], task_id: str) -> list[str]:
    return [fire["at"] for hour in data["hours"] for fire in hour["fires"] if fire["id"] == task_id]


@pytest.mark.parametrize("start", [FALL_BACK_EVE, SPRING_EVE], ids=["fall-back", "spring-forward"])
@pytest.mark.parametrize("expr", ["30 2 * * *", "*/15 1-3 * * *", "0 * * * *", "45 */3 * * *"])
def test_timeline_marks_are_the_oracles_occurrences_once_each(start: datetime, expr: str) -> None:
    data = timeline([planned("t", expr)], start, BERLIN)
    expected = [moment.isoformat() for moment in Oracle(expr, BERLIN).fires(start, start + SPAN)]
    assert marks(data, "t") == expected
    assert all(count == 1 for count in Counter(marks(data, "t")).values())


def test_the_repeated_hour_of_a_fall_back_night_is_two_rows_with_two_offsets() -> None:
    data = timeline([planned("t", "*/15 1-3 * * *")], FALL_BACK_EVE, BERLIN)
    labels = [hour["label"] for hour in data["hours"]]
    assert len(labels) == len(set(labels)) == 25  # 24 real hours and the partial one at each end
    assert "2026-10-25 02:00 CEST" in labels and "2026-10-25 02:00 CET" in labels
    assert labels.index("2026-10-25 02:00 CEST") + 1 == labels.index("2026-10-25 02:00 CET")
    starts = [datetime.fromisoformat(hour["start"]) for hour in data["hours"]]
    assert all((b - a).total_seconds() == 3600 for a, b in itertools.pairwise(starts))
    [change] = data["transitions"]
    assert change["zone"] == "Europe/Berlin" and change["at"] == "2026-10-25T01:00:00+00:00"
    assert change["text"] == "clocks go back: 03:00 CEST becomes 02:00 CET"


def test_a_spring_forward_night_has_no_row_for_the_skipped_hour() -> None:
    data = timeline([planned("t", "30 2 * * *")], SPRING_EVE, BERLIN)
    labels = [hour["label"] for hour in data["hours"]]
    assert not any(label.startswith("2026-03-29 02:") for label in labels)
    assert data["transitions"][0]["text"] == "clocks go forward: 02:00 CET becomes 03:00 CEST"
    # the gap's occurrence fires at the first instant after it, once (policy.dst_gap = "shift")
    assert marks(data, "t") == ["2026-03-29T01:00:00+00:00"]


def test_a_dense_schedule_is_cut_and_said_so() -> None:
    data = timeline([planned("dense", "* * * * *", "UTC")], FALL_BACK_EVE, ZoneInfo("UTC"))
    assert len(marks(data, "dense")) == MARKS_PER_TASK
    assert data["cut"] == [{"id": "dense", "shown": MARKS_PER_TASK}]
