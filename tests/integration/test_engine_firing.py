"""Firing on time with an injected `now`: what is due fires once, what is not does not.

run_once(now) with injected time against a real PostgreSQL and a real local HTTP server.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import psycopg

from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from tests.builders import cron
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, next_run, runs, setup


async def test_not_due_fires_nothing_then_due_fires_once(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a")})
    assert (await engine.run_once(NOW + timedelta(minutes=4, seconds=59))).fired == 0
    assert rec.paths("/a") == []
    report = await engine.run_once(NOW + timedelta(minutes=5, seconds=3))
    assert (report.fired, report.succeeded) == (1, 1)
    [request] = rec.paths("/a")
    assert request.method == "POST"
    assert request.headers["Idempotency-Key"] == "a@2026-12-02T12:05:00Z"
    assert request.headers["X-Reconciler-Task"] == "a"
    assert request.headers["X-Reconciler-Scheduled-For"] == "2026-12-02T12:05:00+00:00"
    assert request.headers["X-Reconciler-Attempt"] == "1"
    [run] = runs(dsn)
    assert (run["status"], run["kind"], run["attempt"], run["http_status"]) == ("succeeded", "scheduled", 1, 200)
    assert next_run(dsn, "a") == NOW + timedelta(minutes=10)
    assert (await engine.run_once(NOW + timedelta(minutes=5, seconds=4))).fired == 0


async def test_once_fires_once_then_idle(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    text = f'[trigger]\nkind = "once"\nat = 2026-12-02T12:30:00Z\n[target]\nurl = "{url}/o"\n'
    await setup(store, tmp_path, {"o": text})
    assert (await engine.run_once(NOW + timedelta(minutes=30))).fired == 1
    assert next_run(dsn, "o") is None
    assert (await engine.run_once(NOW + timedelta(days=30))).fired == 0
    assert len(rec.paths("/o")) == 1


async def test_disabled_task_never_fires(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"d": cron(f"{url}/d", top="enabled = false")})
    assert (await engine.run_once(NOW + timedelta(hours=2))).fired == 0
    assert rec.paths("/d") == [] and runs(dsn) == []


async def test_end_at_stops_the_schedule(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    text = f'[trigger]\nkind = "cron"\nexpr = "*/5 * * * *"\nend_at = 2026-12-02T12:10:00Z\n[target]\nurl = "{url}/e"\n'
    await setup(store, tmp_path, {"e": text})
    await engine.run_once(NOW + timedelta(minutes=5))
    assert next_run(dsn, "e") is None  # 12:10 is excluded (end_at is exclusive)
    assert (await engine.run_once(NOW + timedelta(minutes=10))).fired == 0
    assert len(rec.paths("/e")) == 1


async def test_manual_trigger_runs_now_and_keeps_schedule(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a", expr="0 0 * * *")})
    before = next_run(dsn, "a")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt) "
            "VALUES ('a', %s, 'manual', 'queued', 0)",
            (NOW + timedelta(minutes=1),),
        )
    report = await engine.run_once(NOW + timedelta(minutes=1))
    assert report.succeeded == 1 and len(rec.paths("/a")) == 1
    assert next_run(dsn, "a") == before
    assert [(r["kind"], r["status"]) for r in runs(dsn)] == [("manual", "succeeded")]


async def test_a_spec_edited_by_hand_fires_as_edited_at_once(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"a": cron(f"{url}/before")})
    await engine.run_once(NOW + timedelta(minutes=5))
    with psycopg.connect(dsn, autocommit=True) as conn:  # the hash column untouched: only the text changed
        conn.execute("UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{target,url}', %s::jsonb)",
                     (f'"{url}/after"',))  # fmt: skip
    await engine.run_once(NOW + timedelta(minutes=10))
    assert [r.path for r in rec.requests] == ["/before", "/after"]
