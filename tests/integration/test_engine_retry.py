"""Retries: backoff doubling, Retry-After, exhausted retries, connect errors (the back-off waits are
recorded by an injected sleep, not waited out), and runs resting in a backoff hold no slot.

run_once(now) with injected time against a real PostgreSQL and a real local HTTP server.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.targets.http import Firer
from tests.builders import cron, interval_trigger, task_text
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, RecordingSleep, runs, setup


async def test_retries_with_backoff_then_success(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    engine.firer.sleep = sleep = RecordingSleep()
    rec.script("/r", statuses=[503, 502, 200])
    await setup(store, tmp_path, {"r": cron(f"{url}/r", policy="retries = 3\nretry_backoff_seconds = 20")})
    report = await engine.run_once(NOW + timedelta(minutes=5))
    assert report.succeeded == 1
    got = rec.paths("/r")
    assert [r.headers["X-Reconciler-Attempt"] for r in got] == ["1", "2", "3"]
    assert len({r.headers["Idempotency-Key"] for r in got}) == 1
    assert sleep.waits == [20.0, 40.0]  # doubled per attempt, and none after the success
    [run] = runs(dsn)
    assert (run["status"], run["attempt"], run["http_status"]) == ("succeeded", 3, 200)


async def test_retries_exhausted_fail_and_4xx_is_not_retried(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    engine.firer.sleep = sleep = RecordingSleep()
    rec.script("/down", statuses=[500])
    rec.script("/bad", statuses=[404])
    policy = "retries = 2\nretry_backoff_seconds = 30"
    await setup(store, tmp_path, {"down": cron(f"{url}/down", policy=policy), "bad": cron(f"{url}/bad", policy=policy)})
    await engine.run_once(NOW + timedelta(minutes=5))
    assert len(rec.paths("/down")) == 3 and len(rec.paths("/bad")) == 1
    status = {r["task_id"]: (r["status"], r["attempt"], r["error"]) for r in runs(dsn)}
    assert status == {"down": ("failed", 3, "HTTP 500"), "bad": ("failed", 1, "HTTP 404")}
    assert sleep.waits == [30.0, 60.0]  # the 500 twice, the 404 never


async def test_retry_after_is_honoured(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    engine.firer.sleep = sleep = RecordingSleep()
    rec.script("/slow", statuses=[429, 200], headers={"Retry-After": "45"})
    await setup(store, tmp_path, {"s": cron(f"{url}/slow", policy="retries = 1\nretry_backoff_seconds = 0.01")})
    await engine.run_once(NOW + timedelta(minutes=5))
    assert len(rec.paths("/slow")) == 2
    assert sleep.waits == [45.0]  # the server asked for longer than the backoff
    [run] = runs(dsn)
    assert (run["status"], run["attempt"]) == ("succeeded", 2)


async def test_connect_error_is_retried(store: Store, dsn: str, engine: Engine, tmp_path: Path) -> None:
    engine.firer.sleep = sleep = RecordingSleep()
    await setup(
        store, tmp_path, {"c": cron("http://127.0.0.1:9/nothing", policy="retries = 2\nretry_backoff_seconds = 15")}
    )
    await engine.run_once(NOW + timedelta(minutes=5))
    [run] = runs(dsn)
    assert run["status"] == "failed" and run["attempt"] == 3 and str(run["error"]).startswith("connect error")
    assert sleep.waits == [15.0, 30.0]


async def test_runs_waiting_out_a_backoff_do_not_stop_the_claims(
    store: Store, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/flaky", statuses=[500])
    retrying = "retries = 2\nretry_backoff_seconds = 60"
    files = {
        "r1": task_text(trigger=interval_trigger("1s"), policy=retrying, url=f"{url}/flaky"),
        "r2": task_text(trigger=interval_trigger("1s"), policy=retrying, url=f"{url}/flaky"),
    }
    await setup(
        store,
        tmp_path,
        {**files, "ok": task_text(trigger=interval_trigger("1s"), url=f"{url}/ok")},
        now=datetime.now(UTC),
    )
    firer = Firer(concurrency=1)
    engine = Engine(store, EngineConfig("backoff", batch=1, concurrency=1, max_sleep=0.2), firer)
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop))
    try:
        # Both flaky runs sit in a 60 s backoff holding no slot: the one slot keeps firing `ok`.
        assert await async_wait_until(lambda: len(rec.paths("/flaky")) == 2 and len(rec.paths("/ok")) >= 3, 60)
        assert firer.resting == 2
    finally:
        engine.hurry.set()
        stop.set()
        await serving
