"""`reconciler explain ID --at T`: runs, misses, pending occurrences, disabled tasks, windows, DST skips."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from reconciler.output.explain import TaskState, explain, occurrences_around
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.task import TaskSpec
from tests.builders import cron, run_reconciler
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, setup


def explain_cli(dsn: str, task_id: str, at: datetime) -> subprocess.CompletedProcess[str]:
    return run_reconciler("--dsn", dsn, "explain", task_id, "--at", at.isoformat(), timeout=60)


async def test_explain_shows_each_occurrence_and_why(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a")})
    await engine.run_once(NOW + timedelta(minutes=5))  # 12:05 fires
    await engine.run_once(NOW + timedelta(minutes=11, seconds=30))  # 12:10 is 90 s late: missed
    done = explain_cli(dsn, "a", NOW + timedelta(minutes=10))  # shows 12:00, 12:05, 12:10 | 12:15, 12:20, 12:25
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "a — Every 5 minutes (UTC)"
    assert "  next_run_at: 2026-12-02 12:15:00 UTC" in lines

    def outcome(local: str) -> str:
        [line] = [ln for ln in lines if ln.startswith(f"  2026-12-02 {local}")]
        return line.split("→ ", 1)[1]

    assert outcome("12:00").startswith("no run recorded: next_run_at had already moved past it")  # created then
    assert outcome("12:05").startswith("succeeded, HTTP 200, attempt 1, claimed 0.0 s after due by test-engine")
    assert outcome("12:10").startswith("missed, claimed 90.0 s after due")
    assert "more than misfire_grace_seconds = 60" in outcome("12:10")
    assert outcome("12:15").startswith("due, not claimed yet")  # the clock has passed it; no engine ran
    marker = lines.index("  ---- 2026-12-02 12:10:00 UTC (T)")
    assert lines[marker - 1].startswith("  2026-12-02 12:10") and lines[marker + 1].startswith("  2026-12-02 12:15")

    earlier = explain_cli(dsn, "a", NOW).stdout.splitlines()  # shows 11:50, 11:55, 12:00 | ...
    created = "did not exist yet (created 2026-12-02 12:00:00 UTC)"
    assert any(ln.startswith("  2026-12-02 11:55") and ln.endswith(created) for ln in earlier)


def explain_offline(spec: dict[str, object], at: datetime, now: datetime, enabled: bool = True) -> list[str]:
    """explain() for a task with no runs recorded (no database)."""
    task = TaskState("t", TaskSpec.model_validate(spec), enabled, None)
    return explain(task, occurrences_around(compile_schedule(task.spec), at), [], at, now)


def test_explain_disabled_task_and_closed_window() -> None:
    spec = {
        "trigger": {"kind": "cron", "expr": "0 * * * *", "end_at": "2026-06-01T00:00:00Z"},
        "target": {"url": "http://127.0.0.1:9/x"},
        "enabled": False,
    }
    lines = explain_offline(spec, datetime(2026, 7, 1, tzinfo=UTC), datetime(2026, 7, 2, tzinfo=UTC), enabled=False)
    assert lines[1].startswith("  enabled: no — a disabled task never fires")
    assert any("T is after the window closed (end_at is exclusive)" in ln for ln in lines)
    occurrences = [ln for ln in lines if "→" in ln]
    assert occurrences and all(ln.endswith("no run: the task is disabled (disabled time is not caught up)")
                               for ln in occurrences)  # fmt: skip
    assert occurrences[-1].startswith("  2026-05-31 23:00:00 UTC")  # the last hour inside the window


def test_explain_names_the_dst_gap_skip_policy() -> None:
    spec = {
        "timezone": "Europe/Berlin",
        "trigger": {"kind": "cron", "expr": "30 2 * * *"},
        "target": {"url": "http://127.0.0.1:9/x"},
        "policy": {"dst_gap": "skip"},
    }
    at = datetime(2026, 3, 29, 12, tzinfo=UTC)
    lines = explain_offline(spec, at, at)
    [skipped] = [ln for ln in lines if 'policy.dst_gap = "skip"' in ln]
    assert skipped.startswith("  2026-03-29 03:00:00 CEST")
    assert "2026-03-29 02:30 does not exist (DST gap)" in skipped


def test_explain_unknown_task_is_one_line(store: Store, dsn: str) -> None:
    done = explain_cli(dsn, "nope", NOW)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: task 'nope' is not in the database; apply its file first (`reconciler plan` shows it)"
    )


def test_explain_lists_excluded_occurrences_in_time_order_among_the_others() -> None:
    # A daily task on business days, asked about a Monday: Thursday, Friday, Monday | Tuesday, Wednesday,
    # Thursday, with the weekend's two excluded occurrences between Friday and Monday (they came last before).
    spec = {
        "timezone": "UTC",
        "trigger": {"kind": "cron", "expr": "0 9 * * *", "business_days": "wk"},
        "target": {"url": "http://127.0.0.1:9/x"},
        "calendars": {"wk": {"kind": "business_days"}},
    }
    at = datetime(2026, 9, 7, 10, 0, tzinfo=UTC)  # a Monday
    lines = explain_offline(spec, at, now=at)
    listed = [ln for ln in lines if ln.startswith("  2026-09-")]
    days = [int(ln[10:12]) for ln in listed]
    assert days == sorted(days) and days[:4] == [3, 4, 5, 6]  # Thursday, Friday, then the weekend in its place
    assert listed[2].endswith("→ no run: weekend (wk)") and listed[3].endswith("→ no run: weekend (wk)")
    marker = lines.index("  ---- 2026-09-07 10:00:00 UTC (T)")
    assert lines[marker - 1].startswith("  2026-09-07 09:00") and lines[marker + 1].startswith("  2026-09-08 09:00")
