"""SPEC §1 DST rules, table-driven: (zone, trigger, policy, after, expected ISO strings with offsets)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.schedule.base import TriggerError
from tests.helpers import fires_iso, schedule


def cron(expr: str) -> dict[str, Any]:
    return {"kind": "cron", "expr": expr}


def daily_calendar(at: str, start: str) -> dict[str, Any]:
    return {"kind": "calendar", "every": 1, "unit": "days", "at": at, "start_at": start}


def every(text: str) -> dict[str, Any]:
    return {"kind": "interval", "every": text}


CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], str, list[str]]] = [
    # ---- Europe/Berlin: 2026-03-29 02:00→03:00, 2026-10-25 03:00→02:00, 2027-03-28, 2027-10-31
    (
        "berlin-gap-2026-fixed",
        "Europe/Berlin",
        cron("30 2 * * *"),
        {},
        "2026-03-28T00:00:00+01:00",
        ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
    ),
    (
        "berlin-overlap-2026-fixed",
        "Europe/Berlin",
        cron("30 2 * * *"),
        {},
        "2026-10-24T00:00:00+02:00",
        ["2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
    ),
    (
        "berlin-gap-2027-fixed",
        "Europe/Berlin",
        cron("30 2 * * *"),
        {},
        "2027-03-27T00:00:00+01:00",
        ["2027-03-27T02:30:00+01:00", "2027-03-28T03:00:00+02:00", "2027-03-29T02:30:00+02:00"],
    ),
    (
        "berlin-overlap-2027-fixed",
        "Europe/Berlin",
        cron("30 2 * * *"),
        {},
        "2027-10-30T00:00:00+02:00",
        ["2027-10-30T02:30:00+02:00", "2027-10-31T02:30:00+02:00", "2027-11-01T02:30:00+01:00"],
    ),
    (
        "berlin-overlap-2026-hourly-both",
        "Europe/Berlin",
        cron("30 * * * *"),
        {},
        "2026-10-25T01:00:00+02:00",
        [
            "2026-10-25T01:30:00+02:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-25T02:30:00+01:00",
            "2026-10-25T03:30:00+01:00",
        ],
    ),
    (
        "berlin-overlap-2026-step1-both",
        "Europe/Berlin",
        cron("0 */1 * * *"),
        {},
        "2026-10-25T01:30:00+02:00",
        ["2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"],
    ),
    (
        "berlin-gap-2026-hourly",
        "Europe/Berlin",
        cron("30 * * * *"),
        {},
        "2026-03-29T01:00:00+01:00",
        ["2026-03-29T01:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"],
    ),
    (
        "berlin-gap-several-walltimes-fire-once",
        "Europe/Berlin",
        cron("0,15,30,45 2 * * *"),
        {},
        "2026-03-29T00:00:00+01:00",
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"],
    ),
    (
        "berlin-gap-shift-meets-regular-once",
        "Europe/Berlin",
        cron("0,30 2,3 * * *"),
        {},
        "2026-03-29T00:00:00+01:00",
        ["2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"],
    ),
    (
        "berlin-gap-skip",
        "Europe/Berlin",
        cron("30 2 * * *"),
        {"dst_gap": "skip"},
        "2026-03-28T00:00:00+01:00",
        ["2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00"],
    ),
    (
        "berlin-overlap-last",
        "Europe/Berlin",
        cron("30 2 * * *"),
        {"dst_overlap": "last"},
        "2026-10-24T12:00:00+02:00",
        ["2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"],
    ),
    (
        "berlin-overlap-both",
        "Europe/Berlin",
        cron("30 2 * * *"),
        {"dst_overlap": "both"},
        "2026-10-24T12:00:00+02:00",
        ["2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"],
    ),
    (
        "berlin-hourly-first-override",
        "Europe/Berlin",
        cron("30 * * * *"),
        {"dst_overlap": "first"},
        "2026-10-25T02:00:00+02:00",
        ["2026-10-25T02:30:00+02:00", "2026-10-25T03:30:00+01:00"],
    ),
    (
        "berlin-calendar-gap",
        "Europe/Berlin",
        daily_calendar("02:30", "2026-03-01"),
        {},
        "2026-03-28T00:00:00+01:00",
        ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
    ),
    (
        "berlin-calendar-overlap-2027",
        "Europe/Berlin",
        daily_calendar("02:30", "2027-01-01"),
        {},
        "2027-10-30T00:00:00+02:00",
        ["2027-10-30T02:30:00+02:00", "2027-10-31T02:30:00+02:00", "2027-11-01T02:30:00+01:00"],
    ),
    (
        "berlin-interval-elapsed-over-gap",
        "Europe/Berlin",
        every("1h"),
        {},
        "2026-03-29T00:00:00+01:00",
        ["2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00"],
    ),
    (
        "berlin-interval-elapsed-over-overlap",
        "Europe/Berlin",
        every("30m"),
        {},
        "2026-10-25T02:15:00+02:00",
        ["2026-10-25T02:30:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T02:30:00+01:00"],
    ),
    (
        "berlin-once-offset",
        "Europe/Berlin",
        {"kind": "once", "at": "2026-10-25T02:30:00+01:00"},
        {},
        "2026-10-01T00:00:00+00:00",
        ["2026-10-25T02:30:00+01:00"],
    ),
    # ---- America/New_York: 2026-03-08, 2026-11-01 (02:00→01:00), 2027-03-14, 2027-11-07
    (
        "ny-gap-2026",
        "America/New_York",
        cron("30 2 * * *"),
        {},
        "2026-03-07T00:00:00-05:00",
        ["2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
    ),
    (
        "ny-overlap-2026",
        "America/New_York",
        cron("30 1 * * *"),
        {},
        "2026-10-31T00:00:00-04:00",
        ["2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
    ),
    (
        "ny-gap-2027",
        "America/New_York",
        cron("30 2 * * *"),
        {},
        "2027-03-13T00:00:00-05:00",
        ["2027-03-13T02:30:00-05:00", "2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"],
    ),
    (
        "ny-overlap-2027",
        "America/New_York",
        cron("30 1 * * *"),
        {},
        "2027-11-06T00:00:00-04:00",
        ["2027-11-06T01:30:00-04:00", "2027-11-07T01:30:00-04:00", "2027-11-08T01:30:00-05:00"],
    ),
    (
        "ny-overlap-half-hourly-both",
        "America/New_York",
        cron("*/30 * * * *"),
        {},
        "2026-11-01T00:45:00-04:00",
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-01T02:00:00-05:00",
        ],
    ),
    (
        "ny-calendar-weekly-gap",
        "America/New_York",
        {"kind": "calendar", "every": 1, "unit": "weeks", "at": "02:15", "start_at": "2026-03-01"},
        {},
        "2026-03-01T12:00:00-05:00",
        ["2026-03-08T03:00:00-04:00", "2026-03-15T02:15:00-04:00"],
    ),
    (
        "ny-interval-over-overlap",
        "America/New_York",
        every("1h"),
        {},
        "2027-11-07T00:30:00-04:00",
        ["2027-11-07T01:00:00-04:00", "2027-11-07T01:00:00-05:00", "2027-11-07T02:00:00-05:00"],
    ),
    # ---- Australia/Sydney (southern hemisphere): overlap 2026-04-05, gap 2026-10-04, 2027-04-04, 2027-10-03
    (
        "sydney-overlap-2026",
        "Australia/Sydney",
        cron("30 2 * * *"),
        {},
        "2026-04-04T00:00:00+11:00",
        ["2026-04-04T02:30:00+11:00", "2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"],
    ),
    (
        "sydney-gap-2026",
        "Australia/Sydney",
        cron("30 2 * * *"),
        {},
        "2026-10-03T00:00:00+10:00",
        ["2026-10-03T02:30:00+10:00", "2026-10-04T03:00:00+11:00", "2026-10-05T02:30:00+11:00"],
    ),
    (
        "sydney-overlap-2027",
        "Australia/Sydney",
        cron("30 2 * * *"),
        {},
        "2027-04-03T00:00:00+11:00",
        ["2027-04-03T02:30:00+11:00", "2027-04-04T02:30:00+11:00", "2027-04-05T02:30:00+10:00"],
    ),
    (
        "sydney-gap-2027",
        "Australia/Sydney",
        cron("30 2 * * *"),
        {},
        "2027-10-02T00:00:00+10:00",
        ["2027-10-02T02:30:00+10:00", "2027-10-03T03:00:00+11:00", "2027-10-04T02:30:00+11:00"],
    ),
    (
        "sydney-calendar-overlap",
        "Australia/Sydney",
        daily_calendar("02:30", "2026-01-01"),
        {},
        "2026-04-04T12:00:00+11:00",
        ["2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"],
    ),
    (
        "sydney-interval-over-gap",
        "Australia/Sydney",
        every("1h"),
        {},
        "2026-10-04T01:30:00+10:00",
        ["2026-10-04T03:00:00+11:00", "2026-10-04T04:00:00+11:00"],
    ),
    # ---- Australia/Lord_Howe (30-minute shift): 02:00→01:30 on 2026-04-05, 02:00→02:30 on 2026-10-04
    (
        "lordhowe-overlap-2026",
        "Australia/Lord_Howe",
        cron("45 1 * * *"),
        {},
        "2026-04-04T00:00:00+11:00",
        ["2026-04-04T01:45:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
    ),
    (
        "lordhowe-gap-2026",
        "Australia/Lord_Howe",
        cron("15 2 * * *"),
        {},
        "2026-10-03T00:00:00+10:30",
        ["2026-10-03T02:15:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
    ),
    (
        "lordhowe-overlap-2027",
        "Australia/Lord_Howe",
        cron("45 1 * * *"),
        {},
        "2027-04-03T00:00:00+11:00",
        ["2027-04-03T01:45:00+11:00", "2027-04-04T01:45:00+11:00", "2027-04-05T01:45:00+10:30"],
    ),
    (
        "lordhowe-gap-2027",
        "Australia/Lord_Howe",
        cron("15 2 * * *"),
        {},
        "2027-10-02T00:00:00+10:30",
        ["2027-10-02T02:15:00+10:30", "2027-10-03T02:30:00+11:00", "2027-10-04T02:15:00+11:00"],
    ),
    (
        "lordhowe-hourly-both-passes",
        "Australia/Lord_Howe",
        cron("45 * * * *"),
        {},
        "2026-04-05T01:00:00+11:00",
        ["2026-04-05T01:45:00+11:00", "2026-04-05T01:45:00+10:30", "2026-04-05T02:45:00+10:30"],
    ),
    (
        "lordhowe-calendar-gap",
        "Australia/Lord_Howe",
        daily_calendar("02:10", "2026-09-01"),
        {},
        "2026-10-03T12:00:00+10:30",
        ["2026-10-04T02:30:00+11:00", "2026-10-05T02:10:00+11:00"],
    ),
    (
        "lordhowe-interval",
        "Australia/Lord_Howe",
        every("30m"),
        {},
        "2026-04-05T01:15:00+11:00",
        ["2026-04-05T01:30:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T02:00:00+10:30"],
    ),
    # ---- Asia/Kolkata (no DST): the European/US transition dates are ordinary days
    (
        "kolkata-fixed",
        "Asia/Kolkata",
        cron("30 2 * * *"),
        {},
        "2026-03-29T00:00:00+05:30",
        ["2026-03-29T02:30:00+05:30", "2026-03-30T02:30:00+05:30"],
    ),
    (
        "kolkata-hourly",
        "Asia/Kolkata",
        cron("30 * * * *"),
        {},
        "2026-10-25T01:00:00+05:30",
        ["2026-10-25T01:30:00+05:30", "2026-10-25T02:30:00+05:30", "2026-10-25T03:30:00+05:30"],
    ),
    (
        "kolkata-calendar-monthly-clamp",
        "Asia/Kolkata",
        {"kind": "calendar", "every": 1, "unit": "months", "at": "09:30", "start_at": "2027-01-31"},
        {},
        "2027-01-01T00:00:00+05:30",
        [
            "2027-01-31T09:30:00+05:30",
            "2027-02-28T09:30:00+05:30",
            "2027-03-31T09:30:00+05:30",
            "2027-04-30T09:30:00+05:30",
        ],
    ),
    (
        "kolkata-interval-anchor",
        "Asia/Kolkata",
        {"kind": "interval", "every": "90m", "start_at": "2027-03-28T02:00:00"},
        {},
        "2027-03-28T00:00:00+05:30",
        ["2027-03-28T02:00:00+05:30", "2027-03-28T03:30:00+05:30"],
    ),
    (
        "kolkata-once-naive",
        "Asia/Kolkata",
        {"kind": "once", "at": "2026-11-01T01:30:00"},
        {},
        "2026-10-01T00:00:00+00:00",
        ["2026-11-01T01:30:00+05:30"],
    ),
]


@pytest.mark.parametrize(
    ("zone", "trigger", "policy", "after", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_dst_table(zone: str, trigger: dict[str, Any], policy: dict[str, Any], after: str, expected: list[str]) -> None:
    assert fires_iso(zone, trigger, after, len(expected) + (1 if trigger["kind"] == "once" else 0), **policy) == (
        expected
    )


def test_croniter_double_fire_berlin_2026_10_25_does_not_happen() -> None:
    fires = fires_iso("Europe/Berlin", cron("30 2 * * *"), "2026-10-25T00:00:00+02:00", 2)
    assert fires == ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]


def test_croniter_double_fire_new_york_2026_11_01_does_not_happen() -> None:
    fires = fires_iso("America/New_York", cron("30 1 * * *"), "2026-11-01T00:00:00-04:00", 2)
    assert fires == ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]


def test_croniter_itself_still_double_fires() -> None:
    """Guards the reason for wrapping croniter: if it is ever fixed, this documents it."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from croniter import croniter

    walker = croniter("30 2 * * *", datetime(2026, 10, 25, 0, 0, tzinfo=ZoneInfo("Europe/Berlin")))
    seen = [walker.get_next(datetime).isoformat() for _ in range(2)]
    assert seen[0].startswith("2026-10-25T02:30") and seen[1].startswith("2026-10-25T02:30")


WINDOW_ERRORS = [
    (
        "Europe/Berlin",
        {"kind": "once", "at": "2026-10-25T02:30:00"},
        "trigger.at",
        ["2026-10-25T02:30:00+02:00 (00:30 UTC)", "2026-10-25T02:30:00+01:00 (01:30 UTC)"],
        "twice",
    ),
    (
        "Europe/Berlin",
        {"kind": "once", "at": "2026-03-29T02:30:00"},
        "trigger.at",
        ["00:30 UTC", "01:30 UTC"],
        "does not exist",
    ),
    (
        "America/New_York",
        {"kind": "cron", "expr": "0 * * * *", "start_at": "2026-11-01T01:30:00"},
        "trigger.start_at",
        ["05:30 UTC", "06:30 UTC"],
        "twice",
    ),
    (
        "Australia/Lord_Howe",
        {"kind": "interval", "every": "1h", "end_at": "2026-10-04T02:15:00"},
        "trigger.end_at",
        ["2026-10-04T02:15:00+10:30 (15:45 UTC)", "2026-10-04T02:15:00+11:00 (15:15 UTC)"],
        "does not exist",
    ),
    (
        "Australia/Sydney",
        {"kind": "once", "at": "2027-04-04T02:30:00"},
        "trigger.at",
        ["15:30 UTC", "16:30 UTC"],
        "twice",
    ),
]


@pytest.mark.parametrize(("zone", "trigger", "key", "candidates", "what"), WINDOW_ERRORS)
def test_ambiguous_or_missing_local_time_is_an_error_naming_both(
    zone: str, trigger: dict[str, Any], key: str, candidates: list[str], what: str
) -> None:
    with pytest.raises(TriggerError) as info:
        schedule(zone, trigger)
    assert info.value.key == key
    assert what in info.value.message
    for candidate in candidates:
        assert candidate in info.value.message


def test_window_bounds_cron() -> None:
    trigger = {"kind": "cron", "expr": "0 12 * * *", "start_at": "2026-05-02T00:00:00", "end_at": "2026-05-04T12:00:00"}
    assert fires_iso("Europe/Berlin", trigger, "2026-01-01T00:00:00+00:00", 5) == [
        "2026-05-02T12:00:00+02:00",
        "2026-05-03T12:00:00+02:00",
    ]


def test_once_fires_once_then_is_idle() -> None:
    sched = schedule("UTC", {"kind": "once", "at": "2026-12-24T18:00:00Z"})
    from datetime import datetime

    first = sched.next_fire_time(datetime.fromisoformat("2026-12-01T00:00:00+00:00"))
    assert first is not None and first.isoformat() == "2026-12-24T18:00:00+00:00"
    assert sched.next_fire_time(first) is None


def test_impossible_cron_date_is_exhausted() -> None:
    from datetime import datetime

    sched = schedule("UTC", cron("0 0 30 2 *"))
    assert sched.next_fire_time(datetime.fromisoformat("2026-01-01T00:00:00+00:00")) is None


def test_naive_after_is_rejected() -> None:
    from datetime import datetime

    with pytest.raises(ValueError, match="aware"):
        schedule("UTC", cron("* * * * *")).next_fire_time(datetime(2026, 1, 1))
