"""Calendar files and the calendars tasks name, as a new user and an attacker write them: every mistake is
one line naming the file, the line, the key and the fix, all of them in one `validate` run, never a traceback;
and the holidays the `holidays` package gives, checked by hand."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from reconciler.files.calendars import CALENDARS, resolve_holidays
from reconciler.files.kinds import validate
from reconciler.schedule.business import BusinessDays
from reconciler.spec.calendar import HolidaySource
from tests.builders import run_reconciler, unnamed_mistakes

TARGET = '[target]\nurl = "https://example.com/x"\n'
GOOD_US = 'kind = "business_days"\nholidays = { country = "US" }\n'
GOOD_FREEZE = 'kind = "blackout"\n[[window]]\ncron = "0 22 * * 5"\nduration = "56h"\n'

# calendar file → (key, a piece of the message)
BAD_CALENDARS = {
    "country": ('kind = "business_days"\nholidays = { country = "UX" }\n', "holidays", "unknown country 'UX'"),
    "country-case": ('kind = "business_days"\nholidays = { country = "us" }\n', "holidays", "did you mean 'US'?"),
    "subdivision": (
        'kind = "business_days"\nholidays = { country = "US", subdivision = "ny" }\n',
        "holidays",
        "unknown subdivision 'ny' of US; did you mean 'NY'?",
    ),
    "weekday": ('kind = "business_days"\nweekend = ["saturday"]\n', "weekend.0", "'saturday' is not a weekday"),
    "zero": ('kind = "blackout"\n[[window]]\ncron = "0 22 * * 5"\nduration = "0h"\n', "window.0.duration", "zero"),
    "negative": (
        'kind = "blackout"\n[[window]]\ncron = "0 22 * * 5"\nduration = "-5h"\n',
        "window.0.duration",
        "not a positive duration",
    ),
    "huge": (
        'kind = "blackout"\n[[window]]\ncron = "0 22 * * 5"\nduration = "2147483648d"\n',
        "window.0.duration",
        "longer than 3660d",
    ),
    "reversed": (
        'kind = "blackout"\n[[window]]\nfrom = 2026-12-20T00:00:00\nuntil = 2026-12-19T00:00:00\n',
        "window.0",
        "until (2026-12-19T00:00:00) must be after from",
    ),
    "offsets": (  # 10:00 at -05:00 is 15:00 UTC, after the naive (UTC) until
        'kind = "blackout"\n[[window]]\nfrom = 2026-12-24T10:00:00-05:00\nuntil = 2026-12-24T12:00:00\n',
        "window.0.until",
        "until must be after from (2026-12-24T12:00:00+00:00 is not after 2026-12-24T15:00:00+00:00)",
    ),
    "offsets-both": (
        'kind = "blackout"\n[[window]]\nfrom = 2026-12-24T10:00:00-05:00\nuntil = 2026-12-24T14:00:00Z\n',
        "window.0",
        "until (2026-12-24T14:00:00+00:00) must be after from (2026-12-24T10:00:00-05:00)",
    ),
    "both": (
        'kind = "blackout"\n[[window]]\ncron = "0 1 * * *"\nduration = "1h"\nfrom = 2026-12-20T00:00:00\n',
        "window.0",
        "either cron + duration or from + until",
    ),
    "ambiguous": (
        'kind = "blackout"\ntimezone = "Europe/Berlin"\n[[window]]\nfrom = 2026-10-25T02:30:00\n'
        "until = 2026-10-26T00:00:00\n",
        "window.0.from",
        "happens twice (DST overlap)",
    ),
    "year": (
        'kind = "business_days"\nextra_holidays = [9999-12-31]\n',
        "extra_holidays.0",
        "outside the supported years",
    ),
    "datetime": ('kind = "business_days"\nextra_workdays = [2026-12-24T10:00:00]\n', "extra_workdays.0", "time of day"),
    "zone": (
        'kind = "blackout"\ntimezone = "Europe/Berln"\n[[window]]\ncron = "0 1 * * *"\nduration = "1h"\n',
        "timezone",
        "did you mean 'Europe/Berlin'?",
    ),
    "kind": ('kind = "holiday"\n', "kind", "unknown kind 'holiday'; use one of 'business_days', 'blackout'"),
    "nul": ('kind = "business_days"\nweekend = ["s\\u0000at"]\n', "weekend.0", "NUL"),
}

BAD_TASKS = {
    "no-calendar": (
        'timezone = "America/New_York"\n[trigger]\nkind = "cron"\nexpr = "0 9 * * *"\nbusiness_days = "uss"\n' + TARGET,
        "trigger.business_days",
        "no calendar 'uss' in",
    ),
    "wrong-kind": (
        '[trigger]\nkind = "cron"\nexpr = "0 9 * * *"\nbusiness_days = "freeze"\n' + TARGET,
        "trigger.business_days",
        "calendar 'freeze' is a blackout calendar",
    ),
    "wrong-kind-blackout": (
        '[trigger]\nkind = "cron"\nexpr = "0 9 * * *"\n' + TARGET + '[policy]\nblackouts = ["us"]\n',
        "policy.blackouts",
        "calendar 'us' is a business_days calendar",
    ),
    "day-zero": (
        '[trigger]\nkind = "business_day"\nbusiness_days = "us"\nday = 0\nat = "09:00"\n' + TARGET,
        "trigger.day",
        "day = 0 is out of range",
    ),
    "day-24": (
        '[trigger]\nkind = "business_day"\nbusiness_days = "us"\nday = -24\nat = "09:00"\n' + TARGET,
        "trigger.day",
        "day = -24 is out of range",
    ),
    "move-alone": (
        '[trigger]\nkind = "cron"\nexpr = "0 9 * * *"\non_non_business_day = "next"\n' + TARGET,
        "trigger",
        "on_non_business_day needs business_days",
    ),
    "interval": (
        '[trigger]\nkind = "interval"\nevery = "1h"\nbusiness_days = "us"\n' + TARGET,
        "trigger.business_days",
        "unknown key",
    ),
    "bound": (
        'calendars = { us = {} }\n[trigger]\nkind = "cron"\nexpr = "0 9 * * *"\n' + TARGET,
        "calendars",
        "unknown key",
    ),
    "defer-alone": (
        '[trigger]\nkind = "cron"\nexpr = "0 9 * * *"\n' + TARGET + '[policy]\non_blackout = "defer"\n',
        "policy",
        "on_blackout needs blackouts",
    ),
}


def test_every_mistake_is_one_line_naming_file_key_and_fix_in_one_run(tmp_path: Path) -> None:
    calendars, tasks = tmp_path / "calendars.d", tmp_path / "tasks.d"
    calendars.mkdir()
    tasks.mkdir()
    (calendars / "us.toml").write_text(GOOD_US)
    (calendars / "freeze.toml").write_text(GOOD_FREEZE)
    for name, (text, _, _) in BAD_CALENDARS.items():
        (calendars / f"{name}.toml").write_text(text)
    for name, (text, _, _) in BAD_TASKS.items():
        (tasks / f"{name}.toml").write_text(text)
    done = run_reconciler("--tasks-dir", str(tasks), "validate")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    for folder, cases in (("calendars.d", BAD_CALENDARS), ("tasks.d", BAD_TASKS)):
        expected = {name: (key, piece) for name, (_, key, piece) in cases.items()}
        assert unnamed_mistakes(done.stderr, folder, expected) == [], done.stderr
    assert done.stderr.splitlines()[-1].endswith("; nothing was changed")


def test_a_calendar_name_that_is_not_an_id_is_refused(tmp_path: Path) -> None:
    _, errors = validate(CALENDARS, "US Holidays", "calendars.d/US Holidays.toml", GOOD_US)
    assert [e.key for e in errors] == ["name"] and "rename the file" in errors[0].message


@pytest.mark.parametrize(
    ("observed", "day", "business"),
    [
        (True, date(2022, 12, 26), False),  # Christmas 2022 is a Sunday, observed on Monday
        (False, date(2022, 12, 26), True),  # … unless observed = false
        (True, date(2025, 9, 1), False),  # Labor Day
        (True, date(2025, 9, 2), True),
        (True, date(2025, 5, 26), False),  # Memorial Day
    ],
)
def test_us_holidays_from_the_package_checked_by_hand(observed: bool, day: date, business: bool) -> None:
    holidays = resolve_holidays(HolidaySource(country="US", observed=observed), 2021, 2026)
    calendar = BusinessDays.stored("us", {"weekend": ["sat", "sun"], "resolved": {"holidays": holidays}})
    assert calendar.is_business(day) is business
    assert calendar.in_month(2025, 9, 1) == date(2025, 9, 2)  # the first US business day of September 2025
    assert calendar.in_month(2025, 5, -1) == date(2025, 5, 30)  # the last of May 2025


def test_validate_warns_of_months_without_the_nth_business_day(tmp_path: Path) -> None:
    (tmp_path / "calendars.d").mkdir()
    (tmp_path / "calendars.d" / "us.toml").write_text(GOOD_US)
    tasks = tmp_path / "tasks.d"
    tasks.mkdir()
    trigger = '[trigger]\nkind = "business_day"\nbusiness_days = "us"\nday = 22\nat = "09:00"\n'
    (tasks / "late.toml").write_text(trigger + TARGET)
    done = run_reconciler("--tasks-dir", str(tasks), "validate", ok=True)
    assert "valid (2 warning(s) on stderr)" in done.stdout  # this one, and where the holiday data ends
    assert "us.toml:2: warning: holidays: calendar us: its holidays are known for " in done.stderr
    assert "late.toml:4: warning: trigger.day: day = 22:" in done.stderr
    assert "have fewer business days of calendar 'us'" in done.stderr
