"""Schedules that cannot fire are flagged (issue 12): warnings, not errors, computed from `now`."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reconciler.files.problems import FileWarning
from reconciler.files.tasks import Task, fire_warnings, load_text
from reconciler.schedule.cron import matches_every_year
from reconciler.schedule.preview import A_YEAR, TEN_YEARS, never_fires
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.trigger import cron_problem
from tests.builders import run_main
from tests.helpers import spec

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
URL = "http://127.0.0.1:9/x"


def load(trigger: str, top: str = "", policy: str = "") -> Task:
    text = f'{top}\n[trigger]\n{trigger}\n[target]\nurl = "{URL}"\n' + (f"[policy]\n{policy}\n" if policy else "")
    task, errors = load_text("t", "tasks.d/t.toml", text)
    assert errors == [] and task is not None, [str(e) for e in errors]
    return task


def cron(expr: str, window: str = "") -> str:
    return f'kind = "cron"\nexpr = "{expr}"\n{window}'


# (trigger TOML, top-level TOML, expected (key, words) or None)
CASES: list[tuple[str, str, tuple[str, str] | None]] = [
    (cron("0 0 30 2 *"), "", ("trigger.expr", "'0 0 30 2 *' matches no date")),
    (cron("0 0 31 4,6,9,11 *"), "", ("trigger.expr", "matches no date")),
    (cron("0 0 30 2 *"), 'timezone = "Europe/Berlin"', ("trigger.expr", "matches no date")),
    (cron("0 0 29 2 *"), "", None),  # 2028-02-29
    (cron("0 0 31 * *"), "", None),
    (cron("0 0 * * 1#5"), "", None),
    (cron("30 2 * * *"), 'timezone = "Europe/Berlin"', None),
    (cron("@yearly"), "", None),
    (cron("0 0 29 2 *", "start_at = 2036-03-01T00:00:00Z"), "",
     ("trigger.expr", "the next occurrence, 2040-02-29 00:00:00 UTC, is more than ten years away")),
    (cron("0 * * * *", "start_at = 2040-01-01T00:00:00Z"), "",
     ("trigger.start_at", "the next occurrence, 2040-01-01 00:00:00 UTC, is more than ten years away")),
    (cron("0 0 1 1 *", "end_at = 2026-12-20T00:00:00Z"), "",
     ("trigger.end_at", "no occurrence before end_at (2026-12-20 00:00:00 UTC), so this task will not fire")),
    (cron("0 * * * *", "end_at = 2026-12-20T00:00:00Z"), "", None),
    (cron("0 * * * *", "end_at = 2026-06-01T00:00:00"), 'timezone = "Europe/Berlin"',
     ("trigger.end_at", "the window ended at 2026-06-01 00:00:00 CEST (2026-05-31 22:00:00 UTC), so this task "
                        "will not fire again")),
    ('kind = "once"\nat = 2026-01-01T09:00:00', 'timezone = "Europe/Berlin"',
     ("trigger.at", "2026-01-01 09:00:00 CET (2026-01-01 08:00:00 UTC) is in the past, so this task "
                    "will not fire (again)")),
    ('kind = "once"\nat = 2026-12-03T12:00:00Z', "", ("trigger.at", "is in the past")),
    ('kind = "once"\nat = 2026-12-03T12:00:01Z', "", None),
    ('kind = "once"\nat = 2040-01-01T00:00:00Z', "", ("trigger.at", "more than ten years away")),
    ('kind = "interval"\nevery = "1h30m"\nend_at = 2026-06-01T00:00:00Z', "", ("trigger.end_at", "window ended")),
    ('kind = "interval"\nevery = "1h30m"\nend_at = 2027-06-01T00:00:00Z', "", None),
    ('kind = "interval"\nevery = "36500d"\nstart_at = 2020-01-01T00:00:00Z', "",
     ("trigger", "the next occurrence, 2119-12-08 00:00:00 UTC, is more than ten years away")),
    ('kind = "calendar"\nunit = "years"\nat = "09:00"\nstart_at = 2040-01-01', "",
     ("trigger.start_at", "more than ten years away")),
    ('kind = "calendar"\nunit = "months"\nat = "09:30"\nstart_at = 2026-01-31', "", None),
    ('kind = "calendar"\nevery = 20\nunit = "years"\nat = "09:00"\nstart_at = 2020-01-01', "",
     ("trigger", "the next occurrence, 2040-01-01 09:00:00 UTC, is more than ten years away")),
]  # fmt: skip


@pytest.mark.parametrize(("trigger", "top", "expected"), CASES)
def test_schedule_that_cannot_fire_is_flagged(trigger: str, top: str, expected: tuple[str, str] | None) -> None:
    task = load(trigger, top)
    found = never_fires(task.spec, task.schedule, NOW)
    if expected is None:
        assert found is None
        return
    assert found is not None
    key, message = found
    assert key == expected[0] and expected[1] in message, found
    [warning] = fire_warnings([task], NOW)
    assert isinstance(warning, FileWarning)
    assert warning.line == task.line_of(*key.split(".")) > 0
    assert str(warning) == f"tasks.d/t.toml:{warning.line}: warning: {key}: {message}"


def test_disabled_task_is_flagged_too() -> None:
    task = load(cron("0 0 30 2 *"), "enabled = false")
    assert [w.key for w in fire_warnings([task], NOW)] == ["trigger.expr"]


def test_now_must_be_aware() -> None:
    task = load(cron("0 0 30 2 *"))
    with pytest.raises(ValueError, match="aware"):
        fire_warnings([task], NOW.replace(tzinfo=None))


def test_ten_thousand_tasks_are_checked_quickly() -> None:
    exprs = ["30 2 * * 1-5", "*/5 * * * *", "0 9 1 * *", "15 3 * * 0", "0 0 1 1 *", "0 0 31 * *"]
    tasks = [load(cron(expr), 'timezone = "Europe/Berlin"') for expr in exprs]
    many = [tasks[i % len(tasks)] for i in range(10_000)]
    started = time.perf_counter()
    assert fire_warnings(many, NOW) == []
    # Most crons are decided from their text; measured 0.1 s here (2 cores, shared).
    assert time.perf_counter() - started < 5


MINUTES = st.sampled_from(["0", "*/15", "30"])
HOURS = st.sampled_from(["0", "2", "*/3", "23"])
DAYS = st.sampled_from(["*", "1", "5-9", "28", "29", "30", "31", "*/2", "30-2", "1,31", "29-31", "L", "15W", "?"])
MONTHS = st.sampled_from(["*", "2", "4,6", "jan-mar", "11", "2,4"])
WEEKDAYS = st.sampled_from(["*", "1-5", "0", "5#3", "L5", "7", "sat,sun"])
ZONES = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"])
NOWS = st.sampled_from([NOW, datetime(2027, 3, 28, 0, 59, tzinfo=UTC), datetime(2030, 2, 28, 23, 0, tzinfo=UTC)])


@settings(max_examples=300, deadline=None)
@given(
    fields=st.tuples(MINUTES, HOURS, DAYS, MONTHS, WEEKDAYS),
    zone=ZONES,
    gap=st.sampled_from(["shift", "skip"]),
    now=NOWS,
)
def test_text_shortcut_agrees_with_the_schedule(fields: tuple[str, ...], zone: str, gap: str, now: datetime) -> None:
    """A cron decided from its text alone does fire within a year; the answer is the schedule's own."""
    trigger: dict[str, Any] = {"kind": "cron", "expr": " ".join(fields)}
    assume(cron_problem(trigger["expr"]) is None)
    task_spec = spec(zone, trigger, dst_gap=gap)
    schedule = compile_schedule(task_spec)
    upcoming_at = schedule.next_fire_time(now)
    if matches_every_year(task_spec):
        assert upcoming_at is not None and upcoming_at <= now + A_YEAR, (trigger, upcoming_at)
    fires_in_ten_years = upcoming_at is not None and upcoming_at <= now + TEN_YEARS
    assert (never_fires(task_spec, schedule, now) is None) == fires_in_ten_years


def test_validate_prints_warnings_and_exits_0(tmp_path: Path) -> None:
    body = f'[target]\nurl = "{URL}"\n'
    (tmp_path / "feb30.toml").write_text(f"[trigger]\n{cron('0 0 30 2 *')}\n{body}")
    (tmp_path / "past.toml").write_text(f'[trigger]\nkind = "once"\nat = 2020-01-01T00:00:00Z\n{body}')
    (tmp_path / "ended.toml").write_text(f"[trigger]\n{cron('0 * * * *', 'end_at = 2020-01-01')}\n{body}")
    (tmp_path / "fine.toml").write_text(f"[trigger]\n{cron('0 * * * *')}\n{body}")
    code, out, err = run_main(["--tasks-dir", str(tmp_path), "validate"])
    assert code == 0
    assert out.strip() == f"4 task file(s) in {tmp_path} are valid (3 warning(s) on stderr)"
    assert err.splitlines() == [
        f"{tmp_path}/ended.toml:4: warning: trigger.end_at: the window ended at 2020-01-01 00:00:00 UTC, "
        "so this task will not fire again; move end_at or remove it",
        f"{tmp_path}/feb30.toml:3: warning: trigger.expr: '0 0 30 2 *' matches no date (a day its months lack, "
        "such as 30 February?), so this task will not fire",
        f"{tmp_path}/past.toml:3: warning: trigger.at: 2020-01-01 00:00:00 UTC is in the past, so this task "
        "will not fire (again); set a later time or remove it",
    ]


def test_validate_without_warnings_prints_nothing_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "fine.toml").write_text(f'[trigger]\n{cron("0 * * * *")}\n[target]\nurl = "{URL}"\n')
    code, out, err = run_main(["--tasks-dir", str(tmp_path), "validate"])
    assert (code, err) == (0, "")
    assert out.strip().endswith("are valid")
