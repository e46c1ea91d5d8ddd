"""Pause and resume with real engine processes and a real HTTP server: a paused task fires nothing while
another keeps firing, its occurrences are recorded skipped with who paused it and why (runs, explain,
status), a resume fires from now without a catch-up burst, and a pause with `--until` ends by itself."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import psycopg

from tests.builders import (
    EngineProcess,
    interval_trigger,
    run_reconciler,
    start_engines,
    stop,
    task_text,
    wait_registered,
    write_tasks,
)
from tests.helpers import wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import runs


def every_second(url: str) -> str:
    return task_text(trigger=interval_trigger("1s"), url=url)


def fired_for(rec: Recorder, path: str) -> list[datetime]:
    """When each request to `path` was scheduled for (its X-Reconciler-Scheduled-For)."""
    return [datetime.fromisoformat(r.headers["X-Reconciler-Scheduled-For"]) for r in rec.paths(path)]


def database_now(dsn: str) -> datetime:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    moment: datetime = row[0]
    return moment


def finished(engines: list[EngineProcess]) -> None:
    results = stop(engines)
    assert [code for code, _ in results] == [0] * len(engines), [err[-2000:] for _, err in results]


def test_pause_resume_and_until_with_a_running_engine(dsn: str, http: tuple[str, Recorder], tmp_path: Path) -> None:
    url, rec = http
    tasks = write_tasks(tmp_path / "tasks.d", {"a": every_second(f"{url}/a"), "b": every_second(f"{url}/b")})
    base = ["--tasks-dir", str(tasks)]

    def cli(*args: str) -> str:
        return run_reconciler(*base, *args, dsn=dsn, ok=True).stdout

    def skipped(task_id: str) -> list[dict[str, object]]:
        return [r for r in runs(dsn, task_id) if r["status"] == "skipped"]

    engines = start_engines(dsn, ["pause-0"], tmp_path)
    try:
        wait_registered(dsn, engines)
        cli("apply")
        assert wait_until(lambda: len(rec.paths("/a")) >= 2 and len(rec.paths("/b")) >= 2, 60)

        cli("--actor", "alice", "pause", "a", "--reason", "db migration")

        def settled() -> bool:  # a claim after the pause skipped one of a's occurrences; none of a is in flight
            rows = runs(dsn, "a")
            return bool(skipped("a")) and not any(r["status"] in ("running", "queued") for r in rows)

        assert wait_until(settled, 60), runs(dsn, "a")
        sent_a, sent_b, skips = len(rec.paths("/a")), len(rec.paths("/b")), len(skipped("a"))
        assert wait_until(lambda: len(rec.paths("/b")) >= sent_b + 3 and len(skipped("a")) >= skips + 3, 60)
        assert len(rec.paths("/a")) == sent_a  # nothing for a, while b kept firing
        assert {r["error"] for r in skipped("a")} == {"paused by alice: db migration"}

        assert "skipped" in cli("runs", "a") and "paused by alice: db migration" in cli("runs", "a")
        explained = cli("explain", "a")
        assert "  paused: by alice since " in explained and "skipped, claimed " in explained
        assert "by pause-0: paused by alice: db migration" in explained
        status = cli("status")
        assert "‖ paused a by alice since " in status and "until resumed: db migration" in status
        [line_a] = [line for line in status.splitlines() if line.startswith("a ")]
        assert line_a.rstrip().endswith("PAUSED")
    finally:
        finished(engines)

    # No engine for an hour while paused: a resume fires from now, no burst of the paused hour
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE scheduler.tasks SET next_run_at = now() - interval '1 hour' WHERE id = 'a'")
    resumed_at = database_now(dsn)  # the resume's "now" is later than this
    resumed = cli("--actor", "bob", "resume", "a", "--reason", "migration done")
    assert "resumed a (paused by alice: db migration); next run " in resumed
    sent_a, recorded = len(rec.paths("/a")), len(runs(dsn, "a"))

    engines = start_engines(dsn, ["pause-1"], tmp_path)
    try:
        wait_registered(dsn, engines)
        assert wait_until(lambda: len(rec.paths("/a")) >= sent_a + 3, 60)
        # Nothing of the paused hour is run or recorded: every occurrence after the resume is from its "now".
        # (An engine that starts late on a loaded machine coalesces the seconds it missed since then into a
        # catch-up run, their rows `missed`, and a run still going a second later makes the next occurrence
        # `skipped` under max_running_instances = 1: the engine's policies, not a burst of the paused hour, and
        # not the pause.)
        after = runs(dsn, "a")[recorded:]
        assert after and all(r["scheduled_for"] > resumed_at for r in after), after  # type: ignore[operator]
        assert {r["status"] for r in after} <= {"succeeded", "running", "missed", "skipped"}, after
        assert not [r for r in after if "paused" in str(r["error"] or "")], after
        assert all(moment > resumed_at for moment in fired_for(rec, "/a")[sent_a:])

        # --until: b pauses for a few seconds of the database's clock (room for the command to start on a
        # loaded machine), then fires again by itself
        until = database_now(dsn).replace(microsecond=0) + timedelta(seconds=6)
        cli("--actor", "carol", "pause", "b", "--reason", "short", "--until", until.isoformat())
        assert wait_until(lambda: any(moment >= until for moment in fired_for(rec, "/b")), 60)
        assert wait_until(lambda: bool(skipped("b")), 60)
        with psycopg.connect(dsn) as conn:
            [paused_at] = conn.execute("SELECT paused_at FROM scheduler.pauses WHERE task_id = 'b'").fetchone() or [
                None
            ]
        assert paused_at is not None
        # a run claimed just before the pause may still go; none scheduled a second after it, before its end
        held = [m for m in fired_for(rec, "/b") if paused_at.timestamp() + 1 < m.timestamp() < until.timestamp()]
        assert held == []
        assert {r["error"] for r in skipped("b")} == {"paused by carol: short"}
        assert all(r["scheduled_for"] < until for r in skipped("b"))  # type: ignore[operator]
        assert "PAUSED" not in next(line for line in cli("status").splitlines() if line.startswith("b "))
    finally:
        finished(engines)

    actions = [line.split()[4:6] for line in cli("audit").splitlines()]
    assert actions == [["carol", "pause"], ["bob", "resume"], ["alice", "pause"], [actions[-1][0], "apply"]]
