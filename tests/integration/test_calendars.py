"""Calendars end to end on a real PostgreSQL and a real local HTTP server, with injected time: apply stores
the calendars and binds them to the tasks, the engine fires only on business days (no run row for an
excluded occurrence), a deferred run carries the window end's Idempotency-Key, a calendar change retimes
the tasks that name it, and a calendar deleted while tasks use it is refused naming them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg

from bench.calendars import write_project
from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from reconciler.files.calendars import CALENDARS, load_calendars
from reconciler.files.tasks import load_dir
from reconciler.reconcile.apply import apply_tasks, read_plan
from reconciler.reconcile.plan import Plan
from tests.builders import run_reconciler, write_tasks
from tests.httpserver import Recorder
from tests.integration.engine_support import next_run, runs

US = 'kind = "business_days"\nholidays = { country = "US" }\n'
FREEZE = 'kind = "blackout"\ntimezone = "Europe/Berlin"\n[[window]]\ncron = "0 22 * * 5"\nduration = "56h"\n'
# Friday 2025-08-29, before the Labor Day weekend.
FRIDAY = datetime(2025, 8, 29, 14, 0, tzinfo=UTC)  # 10:00 in New York


def payroll(url: str, move: str = "skip") -> str:
    return (
        f'timezone = "America/New_York"\n[trigger]\nkind = "cron"\nexpr = "0 9 * * *"\nbusiness_days = "us"\n'
        f'on_non_business_day = "{move}"\n[target]\nurl = "{url}/payroll"\n'
        "[policy]\nmisfire_grace_seconds = 600\n"
    )


def backup(url: str, on_blackout: str) -> str:
    return (
        f'timezone = "Europe/Berlin"\n[trigger]\nkind = "cron"\nexpr = "30 2 * * *"\n[target]\nurl = "{url}/backup"\n'
        f'[policy]\nmisfire_grace_seconds = 600\nblackouts = ["freeze"]\non_blackout = "{on_blackout}"\n'
    )


def write(root: Path, tasks: dict[str, str], calendars: dict[str, str]) -> Path:
    folder = root / "calendars.d"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.toml"):
        old.unlink()
    for name, text in calendars.items():
        (folder / f"{name}.toml").write_text(text)
    return write_tasks(root / "tasks.d", tasks)


async def apply(store: Store, root: Path, now: datetime, plan_only: bool = False) -> Plan:
    loaded = load_dir(root / "tasks.d", "tasks.d")
    calendars = load_calendars(root / "calendars.d", "calendars.d", year=now.year)
    assert [*loaded.errors, *calendars.errors, *CALENDARS.references(loaded.tasks, calendars, None)] == []
    tasks = CALENDARS.bind(loaded.tasks, calendars)
    if plan_only:
        return await read_plan(store, tasks, "default", now, declared=[calendars])
    return (await apply_tasks(store, tasks, "default", now, declared=[calendars])).plan


async def test_the_engine_fires_on_business_days_only_and_records_no_run_for_a_holiday(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    write(tmp_path, {"payroll": payroll(url)}, {"us": US})
    await apply(store, tmp_path, FRIDAY)
    assert next_run(dsn, "payroll") == datetime(2025, 9, 2, 13, 0, tzinfo=UTC)  # Tuesday: Labor Day is Monday
    for day in (datetime(2025, 9, 2, 13, 0, 5, tzinfo=UTC), datetime(2025, 9, 3, 13, 0, 5, tzinfo=UTC)):
        assert (await engine.run_once(day)).fired == 1
    keys = [r.headers["Idempotency-Key"] for r in rec.paths("/payroll")]
    assert keys == ["payroll@2025-09-02T13:00:00Z", "payroll@2025-09-03T13:00:00Z"]
    assert [r["scheduled_for"] for r in runs(dsn)] == [
        datetime(2025, 9, 2, 13, 0, tzinfo=UTC),
        datetime(2025, 9, 3, 13, 0, tzinfo=UTC),
    ]  # the weekend and Labor Day made no run rows
    assert next_run(dsn, "payroll") == datetime(2025, 9, 4, 13, 0, tzinfo=UTC)


async def test_a_deferred_run_fires_once_at_the_window_end_with_its_key(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    write(tmp_path, {"backup": backup(url, "defer")}, {"freeze": FREEZE})
    friday = datetime(2026, 10, 23, 12, 0, tzinfo=UTC)
    await apply(store, tmp_path, friday)
    # Friday 22:00 CEST + 56 h (across the fall-back night) = Monday 05:00 CET = 04:00 UTC.
    end = datetime(2026, 10, 26, 4, 0, tzinfo=UTC)
    assert next_run(dsn, "backup") == end
    assert (await engine.run_once(end + timedelta(seconds=3))).fired == 1
    assert [r.headers["Idempotency-Key"] for r in rec.paths("/backup")] == ["backup@2026-10-26T04:00:00Z"]
    assert next_run(dsn, "backup") == datetime(2026, 10, 27, 1, 30, tzinfo=UTC)


async def test_a_calendar_change_retimes_the_tasks_that_name_it_and_apply_writes_it(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    write(tmp_path, {"payroll": payroll(url), "other": backup(url, "skip")}, {"us": US, "freeze": FREEZE})
    await apply(store, tmp_path, FRIDAY)
    assert next_run(dsn, "payroll") == datetime(2025, 9, 2, 13, 0, tzinfo=UTC)
    write(
        tmp_path,
        {"payroll": payroll(url), "other": backup(url, "skip")},
        {"us": US + "extra_holidays = [2025-09-02]\n", "freeze": FREEZE},
    )
    plan = await apply(store, tmp_path, FRIDAY, plan_only=True)
    [calendar] = plan.changes_of(CALENDARS)
    assert (calendar.op, calendar.name) == ("update", "us")
    assert [f.path for f in calendar.fields] == ["extra_holidays"]
    [retimed] = [c for c in plan.changes if c.writes]
    assert (retimed.id, retimed.retime, [f.path for f in retimed.fields]) == ("payroll", True, ["calendars.us"])
    assert retimed.next_fire_times[0] == datetime(2025, 9, 3, 13, 0, tzinfo=UTC)
    await apply(store, tmp_path, FRIDAY)
    assert next_run(dsn, "payroll") == datetime(2025, 9, 3, 13, 0, tzinfo=UTC)
    assert (await apply(store, tmp_path, FRIDAY, plan_only=True)).has_changes is False
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(
            "SELECT holidays_version, spec -> 'resolved' -> 'years' FROM scheduler.calendars WHERE name = 'us'"
        ).fetchone()
    assert stored is not None and stored[0] and stored[1] == [2024, 2035]


def test_deleting_a_calendar_in_use_is_refused_naming_the_tasks(dsn: str, tmp_path: Path) -> None:
    tasks = write(tmp_path, {"a": payroll("http://127.0.0.1:9"), "b": payroll("http://127.0.0.1:9")}, {"us": US})
    run_reconciler("--tasks-dir", str(tasks), "apply", dsn=dsn, ok=True)
    (tmp_path / "calendars.d" / "us.toml").unlink()
    for command in ("validate", "plan", "apply"):
        done = run_reconciler("--tasks-dir", str(tasks), command, dsn=dsn)
        assert done.returncode == 1
        assert "calendars.d (used by 2 task(s): a, b)" in done.stderr, done.stderr
        assert "trigger.business_days: no calendar 'us' in" in done.stderr
        assert "Traceback" not in done.stderr


def test_export_writes_the_calendars_beside_the_tasks_and_they_plan_to_no_changes(dsn: str, tmp_path: Path) -> None:
    url = "http://127.0.0.1:9"
    calendars = {"us": US + "extra_workdays = [2026-11-28]\n", "freeze": FREEZE}
    tasks = write(tmp_path / "repo", {"payroll": payroll(url, "previous"), "backup": backup(url, "defer")}, calendars)
    run_reconciler("--tasks-dir", str(tasks), "apply", dsn=dsn, ok=True)
    out = tmp_path / "exported" / "tasks.d"
    done = run_reconciler("export", "--out-dir", str(out), dsn=dsn, ok=True)
    assert "and 2 calendar(s) to" in done.stdout
    assert sorted(p.name for p in (out.parent / "calendars.d").iterdir()) == ["freeze.toml", "us.toml"]
    assert "resolved" not in (out.parent / "calendars.d" / "us.toml").read_text()
    plan = run_reconciler("--tasks-dir", str(out), "plan", dsn=dsn, ok=True)
    assert "No changes." in plan.stdout, plan.stdout


async def test_the_dashboard_and_explain_name_the_excluded_occurrences(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    from tests.integration.test_dashboard import dashboard_at

    url, _ = http
    write(tmp_path, {"payroll": payroll(url, "next"), "backup": backup(url, "defer")}, {"us": US, "freeze": FREEZE})
    await apply(store, tmp_path, datetime.now(UTC))
    served = await dashboard_at(dsn)
    try:
        async with httpx.AsyncClient(base_url=served.url) as client:
            page = (await client.get("/tasks/backup", params={"format": "json"})).json()
            html = (await client.get("/tasks/backup")).text
    finally:
        await served.close()
    excluded = page["next"]["excluded"]
    assert excluded and {item["reason"] for item in excluded} == {"blackout: freeze"}
    assert "blackout: freeze" in html and 'id="excluded"' in html
    assert any("deferred: blackout freeze ended" in (note or "") for note in page["fire_notes"])
    explained = run_reconciler("explain", "backup", "--at", "2026-10-25T12:00:00Z", dsn=dsn, ok=True).stdout
    assert "→ no run: blackout: freeze" in explained
    assert "blackout at T: freeze until 2026-10-26 05:00:00 CET" in explained


def test_a_manual_run_is_never_blocked_and_trigger_says_a_blackout_holds(dsn: str, tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    window = f"from = {(now - timedelta(days=1)).isoformat()}\nuntil = {(now + timedelta(days=1)).isoformat()}\n"
    freeze = f'kind = "blackout"\n[[window]]\n{window}'
    tasks = write(tmp_path, {"backup": backup("http://127.0.0.1:9", "skip")}, {"freeze": freeze})
    run_reconciler("--tasks-dir", str(tasks), "apply", dsn=dsn, ok=True)
    done = run_reconciler("trigger", "backup", dsn=dsn, ok=True)
    assert "queued manual run" in done.stdout
    assert "note: blackout freeze (until " in done.stdout and "holds now; a manual run runs anyway" in done.stdout
    [run] = runs(dsn, "backup")
    assert (run["kind"], run["status"]) == ("manual", "queued")


def test_a_saved_plan_is_stale_once_a_calendar_file_changes(dsn: str, tmp_path: Path) -> None:
    tasks = write(tmp_path, {"payroll": payroll("http://127.0.0.1:9")}, {"us": US})
    saved = tmp_path / "plan.json"
    run_reconciler("--tasks-dir", str(tasks), "plan", "--out", str(saved), dsn=dsn, ok=True)
    (tmp_path / "calendars.d" / "us.toml").write_text(US + "extra_holidays = [2030-01-02]\n")
    done = run_reconciler("--tasks-dir", str(tasks), "apply", str(saved), dsn=dsn)
    assert done.returncode == 1 and "the saved plan is stale: task files changed" in done.stderr, done.stderr
    plan = json.loads(run_reconciler("--tasks-dir", str(tasks), "plan", "--format", "json", dsn=dsn, ok=True).stdout)
    [calendar] = plan["calendars"]
    assert (calendar["op"], calendar["name"]) == ("create", "us")
    assert calendar["summary"].startswith("business days: weekend sat, sun; ")


def test_next_and_validate_of_the_documented_maxima_blocking_every_minute_answer_that_it_never_fires(
    tmp_path: Path,
) -> None:
    # 20 calendars of 100 windows, together holding every minute (bench/calendars.py's worst case): the old walk
    # took minutes; the answer now comes from the windows' period. No timing asserted: the test completes.
    tasks = write_project(tmp_path, tasks=2)
    done = run_reconciler("--tasks-dir", str(tasks), "next", "task00", "--after", "2026-09-03T00:00:00Z", timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "  no further occurrences: its calendars take away every one"
    assert lines[2] == "  excluded: 2026-09-03 00:01:00 UTC  blackout: freeze00"
    checked = run_reconciler("--tasks-dir", str(tasks), "validate", timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert "exclude every occurrence, so this task will not fire" in checked.stderr


def test_next_and_validate_say_where_the_holiday_data_ends(tmp_path: Path) -> None:
    year = datetime.now(UTC).year  # apply and next resolve the holidays around the year they run in
    task = 'timezone = "America/New_York"\n[trigger]\nkind = "cron"\nexpr = "0 9 * * *"\nbusiness_days = "us"\n'
    tasks = write(tmp_path, {"payroll": task + '[target]\nurl = "http://127.0.0.1:9/p"\n'}, {"us": US})
    note = f"calendar us: its holidays are known for {year - 1}–{year + 10} only"
    inside = run_reconciler("--tasks-dir", str(tasks), "next", "--after", f"{year}-03-01T00:00:00Z", ok=True)
    assert note not in inside.stderr
    late = f"{year + 10}-12-20T00:00:00Z"
    beyond = run_reconciler("--tasks-dir", str(tasks), "next", "--after", late, "--count", "10")
    assert beyond.returncode == 0, beyond.stderr
    assert f"warning: {note}" in beyond.stderr
    assert f"a holiday after {year + 10} is a business day" in beyond.stderr
    assert f"{year + 11}-01-01" in beyond.stdout  # New Year's Day past the data: a business day, as warned
    checked = run_reconciler("--tasks-dir", str(tasks), "validate", ok=True)
    assert "calendars.d/us.toml:2: warning: holidays: " + note in checked.stderr
