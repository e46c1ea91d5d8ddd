"""Limits planned and applied on a real PostgreSQL: a plan shows a limit created, changed (field by field) and
deleted; apply writes its numbers and its bucket to scheduler.limits and a second plan is empty; a limit is
owned by its source; a limit deleted while tasks name it is refused naming them (on their rows too); and the
plan warns of a limit whose tasks are due more often in one minute than it serves, in text, json and markdown,
and not of one they fit."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from reconciler.db.store import Store
from reconciler.files.limits import LIMITS, load_limits
from reconciler.files.tasks import load_dir
from reconciler.output.plan_json import plan_json
from reconciler.output.plan_markdown import plan_markdown
from reconciler.output.plan_text import plan_text
from reconciler.reconcile.apply import apply_tasks, read_plan
from reconciler.reconcile.plan import Plan
from tests.builders import run_reconciler, write_tasks

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # the next 02:00 UTC is 2026-03-03 02:00
BILLING = 'max_in_flight = 4\nrate_per_second = 10.0\ndescription = "the billing API"\n'
SLOW = "rate_per_second = 0.5\n"  # serves 31 a minute: a full bucket of 1, then 30


def task(expr: str = "0 2 * * *", limits: str = '["billing-api"]', url: str = "http://127.0.0.1:9/x") -> str:
    return f'[trigger]\nkind = "cron"\nexpr = "{expr}"\n[target]\nurl = "{url}"\n[policy]\nlimits = {limits}\n'


def write(root: Path, tasks: dict[str, str], limits: dict[str, str]) -> Path:
    """limits.d and tasks.d under `root` holding these files only; returns tasks.d."""
    write_tasks(root / "limits.d", limits, replace=True)
    return write_tasks(root / "tasks.d", tasks, replace=True)


async def apply(store: Store, root: Path, plan_only: bool = False, source: str = "default") -> Plan:
    loaded = load_dir(root / "tasks.d", "tasks.d")
    limits = load_limits(root / "limits.d", "limits.d")
    assert [*loaded.errors, *limits.errors, *LIMITS.references(loaded.tasks, limits, None)] == []
    if plan_only:
        return await read_plan(store, loaded.tasks, source, NOW, declared=[limits])
    return (await apply_tasks(store, loaded.tasks, source, NOW, declared=[limits])).plan


def rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT source, name, max_in_flight, rate_per_second, burst, tokens, spec FROM scheduler.limits"
            " ORDER BY source, name"
        ).fetchall()


async def test_a_limit_is_created_changed_and_deleted_and_apply_writes_its_numbers(
    store: Store, dsn: str, tmp_path: Path
) -> None:
    write(tmp_path, {"charge": task()}, {"billing-api": BILLING, "only-runs": "max_in_flight = 2\n"})
    plan = await apply(store, tmp_path, plan_only=True)
    assert [(c.op, c.name) for c in plan.changes_of(LIMITS)] == [("create", "billing-api"), ("create", "only-runs")]
    text = plan_text(plan)
    assert "+ limit billing-api\n+     at most 4 in flight; 10 a second, bursts of 10" in text
    assert "+ limit only-runs\n+     at most 2 in flight" in text
    assert "; limits: 2 to create, 0 to update, 0 to delete." in text
    await apply(store, tmp_path)
    assert rows(dsn) == [
        (
            "default",
            "billing-api",
            4,
            10.0,
            10.0,
            10.0,
            {"max_in_flight": 4, "rate_per_second": 10.0, "description": "the billing API"},
        ),
        ("default", "only-runs", 2, None, None, 0.0, {"max_in_flight": 2}),
    ]
    assert (await apply(store, tmp_path, plan_only=True)).has_changes is False

    # A changed rate and burst: the plan shows each field, apply writes the new bucket.
    write(tmp_path, {"charge": task()}, {"billing-api": BILLING.replace("10.0", "20.0") + "burst = 5\n"})
    plan = await apply(store, tmp_path, plan_only=True)
    assert [(c.op, c.name) for c in plan.changes_of(LIMITS)] == [("update", "billing-api"), ("delete", "only-runs")]
    [update, delete] = plan.changes_of(LIMITS)
    assert [(f.path, f.old, f.new) for f in update.fields] == [("burst", None, 5), ("rate_per_second", 10.0, 20.0)]
    text = plan_text(plan)
    assert "~ limit billing-api\n~     burst: (absent) → 5\n~     rate_per_second: 10.0 → 20.0" in text
    assert "- limit only-runs\n-     at most 2 in flight" in text
    assert delete.before == {"max_in_flight": 2}
    shown = json.loads(plan_json(plan))["limits"]
    assert [(item["op"], item["name"], item["summary"]) for item in shown] == [
        ("update", "billing-api", "at most 4 in flight; 20 a second, bursts of 5"),
        ("delete", "only-runs", "at most 2 in flight"),
    ]
    assert "**Limits: 2 change(s)**" in plan_markdown(plan)
    await apply(store, tmp_path)
    [(_, _, max_in_flight, rate, burst, tokens, _)] = rows(dsn)
    assert (max_in_flight, rate, burst, tokens) == (4, 20.0, 5.0, 5.0)  # the bucket kept its tokens, at most 5
    assert (await apply(store, tmp_path, plan_only=True)).has_changes is False


async def test_a_limit_is_owned_by_its_source(store: Store, dsn: str, tmp_path: Path) -> None:
    write(tmp_path / "a", {"a/charge": task()}, {"billing-api": BILLING})
    write(tmp_path / "b", {"b/charge": task()}, {"billing-api": "max_in_flight = 1\n"})
    await apply(store, tmp_path / "a", source="a")
    await apply(store, tmp_path / "b", source="b")
    assert [(source, name, max_in_flight) for source, name, max_in_flight, *_ in rows(dsn)] == [
        ("a", "billing-api", 4),
        ("b", "billing-api", 1),
    ]
    assert (await apply(store, tmp_path / "a", plan_only=True, source="a")).has_changes is False


def test_the_cli_applies_limits_and_a_second_plan_is_empty(dsn: str, tmp_path: Path) -> None:
    tasks = write(tmp_path, {"charge": task()}, {"billing-api": BILLING})
    done = run_reconciler("--tasks-dir", str(tasks), "validate", ok=True)
    assert "1 task file(s) in" in done.stdout and "and 1 limit file(s) in" in done.stdout
    done = run_reconciler("--tasks-dir", str(tasks), "apply", dsn=dsn, ok=True)
    assert "+ limit billing-api" in done.stdout and "Apply complete: 2 change(s) written." in done.stdout
    done = run_reconciler("--tasks-dir", str(tasks), "plan", "--detailed-exitcode", dsn=dsn)
    assert done.returncode == 0 and "No changes." in done.stdout, done.stdout + done.stderr
    with psycopg.connect(dsn) as conn:
        [(details,)] = conn.execute("SELECT details FROM scheduler.audit WHERE action = 'apply'").fetchall()
    assert details["limits"] == {"billing-api": "create"}


def test_deleting_a_limit_in_use_is_refused_naming_the_tasks(dsn: str, tmp_path: Path) -> None:
    tasks = write(tmp_path, {"a": task(), "b": task(limits='["other", "billing-api"]')}, {"billing-api": BILLING})
    (tmp_path / "limits.d" / "other.toml").write_text("max_in_flight = 1\n")
    run_reconciler("--tasks-dir", str(tasks), "apply", dsn=dsn, ok=True)
    (tmp_path / "limits.d" / "billing-api.toml").unlink()
    # validate parses every file; plan and apply let unchanged files stand on their rows, checked there
    for command in ("validate", "plan", "apply"):
        done = run_reconciler("--tasks-dir", str(tasks), command, dsn=dsn)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "policy.limits: no limit 'billing-api' in " in done.stderr, (command, done.stderr)
        assert "limits.d (used by 2 task(s): a, b); add " in done.stderr
        assert "limits.d/billing-api.toml, or stop naming it in those tasks" in done.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM scheduler.limits").fetchone() == (2,)


def test_a_saved_plan_is_stale_once_a_limit_file_changes(dsn: str, tmp_path: Path) -> None:
    tasks = write(tmp_path, {"charge": task()}, {"billing-api": BILLING})
    saved = tmp_path / "plan.json"
    run_reconciler("--tasks-dir", str(tasks), "plan", "--out", str(saved), dsn=dsn, ok=True)
    (tmp_path / "limits.d" / "billing-api.toml").write_text(BILLING.replace("4", "5"))
    done = run_reconciler("--tasks-dir", str(tasks), "apply", str(saved), dsn=dsn)
    assert done.returncode == 1 and "the saved plan is stale: task files changed" in done.stderr, done.stderr


def test_export_writes_the_limits_beside_the_tasks_and_they_plan_to_no_changes(dsn: str, tmp_path: Path) -> None:
    tasks = write(tmp_path / "repo", {"charge": task()}, {"billing-api": BILLING, "slow": SLOW})
    run_reconciler("--tasks-dir", str(tasks), "apply", dsn=dsn, ok=True)
    out = tmp_path / "exported" / "tasks.d"
    done = run_reconciler("export", "--out-dir", str(out), dsn=dsn, ok=True)
    assert "and 2 limit(s) to" in done.stdout, done.stdout
    assert sorted(p.name for p in (out.parent / "limits.d").iterdir()) == ["billing-api.toml", "slow.toml"]
    assert (out.parent / "limits.d" / "slow.toml").read_text() == "rate_per_second = 0.5\n"
    plan = run_reconciler("--tasks-dir", str(out), "plan", dsn=dsn, ok=True)
    assert "No changes." in plan.stdout, plan.stdout


# ---------------------------------------------------------------- the rate warning

CROWD = "limit slow: its 40 task(s) are due 40 times in the minute from 02:00 UTC (worst of the next day); at 0.5/s"


async def test_the_plan_warns_of_a_crowded_minute_and_not_of_tasks_that_fit(store: Store, tmp_path: Path) -> None:
    crowd = {f"crowd/{n:02}": task("0 2 * * *", '["slow"]') for n in range(40)}  # 40 at 02:00 against 31
    fits = {f"fits/{n:02}": task("0 3 * * *", '["roomy"]') for n in range(31)}  # 31 at 03:00 against 31
    spread = {f"spread/{n:02}": task(f"{n} 4 * * *", '["spread"]') for n in range(40)}  # 40, one a minute
    write(tmp_path, {**crowd, **fits, **spread}, {"slow": SLOW, "roomy": SLOW, "spread": SLOW})
    plan = await apply(store, tmp_path, plan_only=True)
    [warning] = plan.warnings
    assert warning.startswith(CROWD), warning
    assert warning.endswith(
        "(burst 1) it serves 31 a minute: some will wait, and those past their misfire grace are missed; "
        "raise rate_per_second or spread the tasks"
    )
    assert f"warning: {warning}" in plan_text(plan)
    assert json.loads(plan_json(plan))["warnings"] == [warning]
    assert "⚠️ **Warnings:**" in plan_markdown(plan) and CROWD in plan_markdown(plan)


async def test_a_disabled_task_and_a_limit_without_a_rate_are_not_counted(store: Store, tmp_path: Path) -> None:
    crowd = {f"crowd/{n:02}": task("0 2 * * *", '["slow", "runs"]') for n in range(40)}
    crowd["crowd/00"] = "enabled = false\n" + crowd["crowd/00"]
    write(tmp_path, crowd, {"slow": "rate_per_second = 0.5\nburst = 10\n", "runs": "max_in_flight = 1\n"})
    plan = await apply(store, tmp_path, plan_only=True)
    assert plan.warnings == []  # 39 enabled tasks against 10 + 30


def test_the_warning_stands_on_the_rows_of_unchanged_files_too(dsn: str, tmp_path: Path) -> None:
    # every second: 60 a minute each, 11 of them against 10/s with a burst of 10 (610 a minute)
    every = '[trigger]\nkind = "interval"\nseconds = 1\n[target]\nurl = "http://127.0.0.1:9/x"\n'
    crowd = {f"t{n:02}": every + '[policy]\nlimits = ["billing-api"]\n' for n in range(11)}
    tasks = write(tmp_path, crowd, {"billing-api": "rate_per_second = 10\n"})
    first = run_reconciler("--tasks-dir", str(tasks), "apply", dsn=dsn, ok=True)
    second = run_reconciler("--tasks-dir", str(tasks), "plan", "--format", "json", dsn=dsn, ok=True)
    for shown in (first.stdout, *json.loads(second.stdout)["warnings"]):
        assert "limit billing-api: its 11 task(s) are due 660 times in the minute from " in shown, shown
        assert "at 10/s (burst 10) it serves 610 a minute" in shown
