"""Sub-hourly crons keep their frequency through a fall-back night (SPEC §1, DST overlap).

A cron whose minute field begins with `*` (`*`, `*/N`) fires on both passes of a repeated
hour even when its hour field is restricted; a fixed list of minutes fires on the first
pass only. Expected values are written by hand, as ISO strings with offsets. The fall-back
nights of 2026: Europe/Berlin 25 Oct (02:00–02:59 twice), America/New_York 1 Nov
(01:00–01:59 twice), Australia/Lord_Howe 5 Apr (01:30–01:59 twice, a 30-minute shift).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reconciler.output.explain import TaskState, explain, occurrences_around
from reconciler.schedule.preview import dst_warnings
from reconciler.schedule.triggers import compile_schedule
from tests.helpers import fires_iso, schedule, spec

BERLIN, NEW_YORK, LORD_HOWE = "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"

CASES = [
    # every minute between 01:00 and 06:59: no silent repeated hour
    (BERLIN, "* 1-6 * * *", "2026-10-25T02:58:00+02:00",
     ["2026-10-25T02:59:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T02:01:00+01:00"]),
    (NEW_YORK, "* 1-6 * * *", "2026-11-01T01:58:00-04:00",
     ["2026-11-01T01:59:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:01:00-05:00"]),
    (LORD_HOWE, "* 1-6 * * *", "2026-04-05T01:58:00+11:00",
     ["2026-04-05T01:59:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:31:00+10:30"]),
    # every five minutes between 00:00 and 06:59
    (BERLIN, "*/5 0-6 * * *", "2026-10-25T02:50:00+02:00",
     ["2026-10-25T02:55:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T02:05:00+01:00"]),
    (NEW_YORK, "*/5 0-6 * * *", "2026-11-01T01:50:00-04:00",
     ["2026-11-01T01:55:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:05:00-05:00"]),
    (LORD_HOWE, "*/5 0-6 * * *", "2026-04-05T01:50:00+11:00",
     ["2026-04-05T01:55:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:35:00+10:30"]),
    # every 20 minutes in hour 2: both passes where hour 2 repeats (Berlin), untouched elsewhere
    (BERLIN, "*/20 2 * * *", "2026-10-25T01:30:00+02:00",
     ["2026-10-25T02:00:00+02:00", "2026-10-25T02:20:00+02:00", "2026-10-25T02:40:00+02:00",
      "2026-10-25T02:00:00+01:00", "2026-10-25T02:20:00+01:00", "2026-10-25T02:40:00+01:00",
      "2026-10-26T02:00:00+01:00"]),
    (NEW_YORK, "*/20 2 * * *", "2026-11-01T00:30:00-04:00",
     ["2026-11-01T02:00:00-05:00", "2026-11-01T02:20:00-05:00", "2026-11-01T02:40:00-05:00",
      "2026-11-02T02:00:00-05:00"]),
    (LORD_HOWE, "*/20 2 * * *", "2026-04-05T01:00:00+11:00",
     ["2026-04-05T02:00:00+10:30", "2026-04-05T02:20:00+10:30", "2026-04-05T02:40:00+10:30",
      "2026-04-06T02:00:00+10:30"]),
    # the same in the hour that repeats in New York and Lord Howe
    (NEW_YORK, "*/20 1 * * *", "2026-11-01T00:30:00-04:00",
     ["2026-11-01T01:00:00-04:00", "2026-11-01T01:20:00-04:00", "2026-11-01T01:40:00-04:00",
      "2026-11-01T01:00:00-05:00", "2026-11-01T01:20:00-05:00", "2026-11-01T01:40:00-05:00",
      "2026-11-02T01:00:00-05:00"]),
    (LORD_HOWE, "*/20 1 * * *", "2026-04-05T00:30:00+11:00",
     ["2026-04-05T01:00:00+11:00", "2026-04-05T01:20:00+11:00", "2026-04-05T01:40:00+11:00",
      "2026-04-05T01:40:00+10:30", "2026-04-06T01:00:00+10:30"]),
    # a fixed list of minutes is a pair of fixed times: first pass only
    (BERLIN, "0,30 2 * * *", "2026-10-25T01:30:00+02:00",
     ["2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-26T02:00:00+01:00"]),
    (NEW_YORK, "0,30 1 * * *", "2026-11-01T00:30:00-04:00",
     ["2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:00:00-05:00"]),
    (NEW_YORK, "0,30 2 * * *", "2026-11-01T00:30:00-04:00",
     ["2026-11-01T02:00:00-05:00", "2026-11-01T02:30:00-05:00", "2026-11-02T02:00:00-05:00"]),
    (LORD_HOWE, "0,30 1 * * *", "2026-04-05T00:30:00+11:00",
     ["2026-04-05T01:00:00+11:00", "2026-04-05T01:30:00+11:00", "2026-04-06T01:00:00+10:30"]),
    (LORD_HOWE, "0,30 2 * * *", "2026-04-05T01:00:00+11:00",
     ["2026-04-05T02:00:00+10:30", "2026-04-05T02:30:00+10:30", "2026-04-06T02:00:00+10:30"]),
]  # fmt: skip


@pytest.mark.parametrize(("zone", "expr", "after", "expected"), CASES)
def test_fall_back_night(zone: str, expr: str, after: str, expected: list[str]) -> None:
    assert fires_iso(zone, {"kind": "cron", "expr": expr}, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("overlap", "expected"),
    [
        ("first", ["2026-10-25T02:55:00+02:00", "2026-10-25T03:00:00+01:00"]),
        ("last", ["2026-10-25T01:55:00+02:00", "2026-10-25T02:00:00+01:00"]),
        ("both", ["2026-10-25T02:55:00+02:00", "2026-10-25T02:00:00+01:00"]),
    ],
)
def test_policy_dst_overlap_still_overrides_the_rule(overlap: str, expected: list[str]) -> None:
    """`*/5 0-6` defaults to both passes; `first` silences the repeated hour, `last` the first one."""
    after = "2026-10-25T02:50:00+02:00" if overlap != "last" else "2026-10-25T01:50:00+02:00"
    trigger = {"kind": "cron", "expr": "*/5 0-6 * * *"}
    assert fires_iso(BERLIN, trigger, after, 2, dst_overlap=overlap) == expected


def test_plan_warning_says_fires_on_both_passes() -> None:
    now = datetime(2026, 10, 1, tzinfo=UTC)
    frequent = dst_warnings(schedule(BERLIN, {"kind": "cron", "expr": "*/5 0-6 * * *"}), BERLIN, now)
    fixed = dst_warnings(schedule(BERLIN, {"kind": "cron", "expr": "0,30 2 * * *"}), BERLIN, now)
    assert any("2026-10-25 02:00 happens twice (DST overlap); fires on both passes" in n for n in frequent), frequent
    assert any("2026-10-25 02:00 happens twice (DST overlap); fires on the first pass only" in n for n in fixed), fixed


def test_explain_shows_the_second_pass() -> None:
    task_spec = spec(BERLIN, {"kind": "cron", "expr": "*/5 0-6 * * *"})
    at = datetime.fromisoformat("2026-10-25T02:57:00+02:00")
    shown = occurrences_around(compile_schedule(task_spec), at)
    lines = explain(TaskState("frequent", task_spec, True, None), shown, [], at, at)
    after_t = lines[lines.index(next(line for line in lines if "(T)" in line)) + 1 :]
    assert "2026-10-25 02:00:00 CET" in after_t[0] and "fires on both passes, this is the second" in after_t[0]
