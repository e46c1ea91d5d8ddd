"""Runtime pauses against PostgreSQL, at injected instants: a paused task's occurrences are claimed, recorded
skipped with who paused it and why, and advanced, never fired; an ended pause is not caught up; a paused
occurrence raises no `missed` or `late`; an apply keeps a pause (and a delete or a move takes it along);
resume recomputes next_run_at from now; retention prunes the audit log."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.files.notifiers import load_notifiers
from reconciler.files.tasks import load_dir
from reconciler.notify.events import late_scan
from reconciler.operate.audit import Operator, whoami
from reconciler.operate.pauses import Selection, resume_tasks
from reconciler.reconcile.apply import apply_tasks
from reconciler.targets.http import Firer
from tests.builders import cli, cron, write_tasks
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, next_run, runs, setup

MINUTE = timedelta(minutes=1)


def pause_row(
    dsn: str, task_id: str, until: datetime | None = None, by: str = "alice", why: str = "db migration"
) -> None:
    """A pause as `reconciler pause` writes it, at the injected time (the command takes the database's clock)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO scheduler.pauses (task_id, paused_at, paused_by, reason, paused_until)"
            " VALUES (%s, %s, %s, %s, %s)",
            (task_id, NOW, by, why, until),
        )


def pauses(dsn: str) -> dict[str, tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return {r[0]: (r[1], r[2]) for r in conn.execute("SELECT task_id, paused_by, reason FROM scheduler.pauses")}


async def test_a_paused_task_is_recorded_skipped_and_advanced_while_the_others_fire(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a"), "b": cron(f"{url}/b")})
    pause_row(dsn, "a")
    report = await engine.run_once(NOW + 5 * MINUTE + timedelta(seconds=2))
    assert (report.fired, report.skipped) == (1, 1)
    assert [r.path for r in rec.paths()] == ["/b"]
    [skipped] = runs(dsn, "a")
    assert (skipped["status"], skipped["kind"], skipped["error"]) == (
        "skipped",
        "scheduled",
        "paused by alice: db migration",
    )
    assert next_run(dsn, "a") == NOW + 10 * MINUTE  # advanced: nothing piles up behind the pause

    # engines down for ten minutes: every due occurrence is recorded skipped, none missed, none fired
    report = await engine.run_once(NOW + 21 * MINUTE)
    assert [r.path for r in rec.paths()] == ["/b", "/b"]
    assert [(r["scheduled_for"], r["status"]) for r in runs(dsn, "a")] == [
        (NOW + m * MINUTE, "skipped") for m in (5, 10, 15, 20)
    ]
    assert next_run(dsn, "a") == NOW + 25 * MINUTE


async def test_an_ended_pause_skips_what_fell_due_before_its_end_and_fires_from_then(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a", policy="misfire_grace_seconds = 600")})
    pause_row(dsn, "a", until=NOW + 12 * MINUTE)
    # no engine claimed anything until 12:16: 12:05 and 12:10 were paused, 12:15 is after the end
    report = await engine.run_once(NOW + 16 * MINUTE)
    assert [(r["scheduled_for"], r["status"]) for r in runs(dsn, "a")] == [
        (NOW + 5 * MINUTE, "skipped"),
        (NOW + 10 * MINUTE, "skipped"),
        (NOW + 15 * MINUTE, "succeeded"),
    ]
    assert report.fired == 1 and [r.headers["X-Reconciler-Scheduled-For"] for r in rec.paths("/a")] == [
        "2026-12-02T12:15:00+00:00"
    ]


async def test_a_paused_occurrence_raises_no_missed_and_no_late(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    write_tasks(
        tmp_path,
        {
            "notifiers.d/oncall": f'kind = "webhook"\nurl = "{url}/hook"\n',
            "tasks.d/a": cron(f"{url}/a")
            + '[notify]\nmissed = ["oncall"]\nlate = ["oncall"]\nlate_after_seconds = 10\n',
        },
    )
    loaded = load_dir(tmp_path / "tasks.d", "tasks.d")
    notifiers = load_notifiers(tmp_path / "notifiers.d", "notifiers.d")
    await apply_tasks(store, loaded.tasks, "default", NOW, declared=[notifiers])
    pause_row(dsn, "a")
    assert await late_scan(store, NOW + 30 * MINUTE) == 0  # nobody is meant to claim a paused occurrence
    await engine.run_once(NOW + 30 * MINUTE)  # six occurrences due, coalesced: all skipped
    assert {r["status"] for r in runs(dsn, "a")} == {"skipped"}
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM scheduler.notifications").fetchone() == (0,)
    with psycopg.connect(dsn) as conn:
        conn.execute("DELETE FROM scheduler.pauses")
    await engine.run_once(NOW + 45 * MINUTE)  # unpaused: the same misses now raise their events
    with psycopg.connect(dsn) as conn:
        events = {r[0] for r in conn.execute("SELECT event FROM scheduler.notifications")}
    assert events == {"missed", "late"}


def test_apply_keeps_a_pause_deletes_it_with_its_task_and_moves_it_with_a_rename(
    dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    tasks = tmp_path / "tasks.d"
    write_tasks(tasks, {"a": cron(f"{url}/a"), "b": cron(f"{url}/b"), "c": cron(f"{url}/c")})
    assert cli(dsn, tasks, "apply")[0] == 0
    code, out, err = cli(dsn, tasks, "--actor", "alice", "pause", "a", "b", "c", "--reason", "incident 42")
    assert code == 0, err
    # a changes its target and its schedule, b is renamed, c is deleted
    write_tasks(tasks, {"a": cron(f"{url}/a2", expr="*/7 * * * *"), "b2": 'moved_from = "b"\n' + cron(f"{url}/b")})
    (tasks / "b.toml").unlink()
    (tasks / "c.toml").unlink()
    code, out, err = cli(dsn, tasks, "plan")
    assert code == 0, err
    assert "‖ paused a by alice since " in out and ", until resumed: incident 42" in out
    assert "‖ paused b by alice" in out and "‖ paused c by alice" in out
    code, out, err = cli(dsn, tasks, "apply", "--max-deletes", "1")
    assert code == 0 and "Apply complete" in out, err
    assert pauses(dsn) == {"a": ("alice", "incident 42"), "b2": ("alice", "incident 42")}
    code, out, _ = cli(dsn, tasks, "plan", "--format", "json")
    assert [p["id"] for p in json.loads(out)["paused"]] == ["a", "b2"]
    write_tasks(tasks, {"c": cron(f"{url}/c")})  # created again under the id: not paused
    assert cli(dsn, tasks, "apply")[0] == 0
    assert set(pauses(dsn)) == {"a", "b2"}


async def test_resume_recomputes_next_run_at_from_now_without_catching_up(
    store: Store, dsn: str, tmp_path: Path
) -> None:
    await setup(store, tmp_path, {"a": cron(expr="* * * * *"), "off": cron(top="enabled = false")})
    pause_row(dsn, "a")
    pause_row(dsn, "off")
    operator = Operator("alice", "done")
    outcome = await resume_tasks(store, Selection(("a", "off")), operator)
    assert sorted(outcome.done) == ["a", "off"] and outcome.not_paused == []
    after = next_run(dsn, "a")
    assert after is not None and outcome.now < after <= outcome.now + MINUTE  # from now: days of minutes not caught up
    assert after.second == 0 and next_run(dsn, "off") is None  # a disabled task stays without a next run
    assert pauses(dsn) == {}


async def test_an_ended_pause_cleared_by_resume_is_not_caught_up_either(store: Store, dsn: str, tmp_path: Path) -> None:
    await setup(store, tmp_path, {"a": cron(expr="* * * * *")})
    pause_row(dsn, "a", until=NOW + MINUTE)  # ended long ago (NOW is in the past of the database's clock)
    outcome = await resume_tasks(store, Selection(("a",)), Operator("alice"))
    assert (outcome.done, outcome.ended) == ([], ["a"])
    after = next_run(dsn, "a")
    assert after is not None and after > outcome.now


async def test_retention_prunes_the_audit_log_like_runs(store: Store, dsn: str, tmp_path: Path) -> None:
    await setup(store, tmp_path, {"a": cron()})
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO scheduler.audit (at, actor, action, source, task_ids) VALUES "
            "(now() - interval '40 days', 'old', 'trigger', 'default', '{a}'), "
            "(now() - interval '40 days', 'elsewhere', 'trigger', 'other', '{x}'), "
            "(now() - interval '40 days', 'several', 'pause', NULL, '{a,x}'), "
            "(now() - interval '1 day', 'recent', 'pause', 'default', '{a}')"
        )

    def actors() -> list[str]:
        with psycopg.connect(dsn) as conn:
            return sorted(r[0] for r in conn.execute("SELECT actor FROM scheduler.audit") if r[0] != whoami())

    firer = Firer(concurrency=1)
    try:
        scoped = Engine(store, EngineConfig("scoped", sources=("default",), keep_runs_days=30), firer)
        await scoped.prune_runs(datetime.now(UTC))
        assert actors() == ["elsewhere", "recent", "several"]  # only its source's rows
        every = Engine(store, EngineConfig("every", keep_runs_days=30), firer)
        await every.prune_runs(datetime.now(UTC))
        assert actors() == ["recent"]
    finally:
        await firer.close()
