"""`engine --metrics-addr`: Prometheus counters agree with the run rows; health follows the database."""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from reconciler.clock import FixedClock
from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.targets.http import Firer
from reconciler.web.gauges import OUTBOX_GAUGES
from reconciler.web.metrics import EngineMetrics
from tests.builders import cron
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, metrics_endpoint, scrape, setup
from tests.pgcontrol import PrivateServer, needs_pgserver


async def test_metrics_counters_match_run_rows(
    store: Store, dsn: str, engine: Engine, metrics_url: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/bad", statuses=[500])
    catchup = "misfire_grace_seconds = 3600\ncoalesce = false\nmax_running_instances = 1"
    files = {
        "ok": cron(f"{url}/ok"),
        "bad": cron(f"{url}/bad"),
        "catchup": cron(f"{url}/c", policy=catchup),  # second claim: two due, one slot: 1 fired, 1 skipped
    }
    await setup(store, tmp_path, files)
    await engine.run_once(NOW + timedelta(minutes=5))
    await engine.run_once(NOW + timedelta(minutes=16))  # 12:10 coalesced (missed) into 12:15

    with psycopg.connect(dsn) as conn:
        grouped = conn.execute("SELECT task_id, status, count(*) FROM scheduler.runs GROUP BY 1, 2")
        rows = Counter({(task, status): n for task, status, n in grouped})
    assert {s for _, s in rows} >= {"succeeded", "failed", "missed", "skipped"}, rows
    found = await scrape(metrics_url)
    counted = Counter({(labels["task"], labels["status"]): value for labels, value in found["reconciler_runs_total"]})
    assert counted == rows

    fired = sum(n for (_, status), n in rows.items() if status in ("succeeded", "failed"))
    [(_, lag_count)] = found["reconciler_fire_lag_seconds_count"]
    assert lag_count == fired
    [(_, claims)] = found["reconciler_claim_duration_seconds_count"]
    assert claims == 2
    assert found["reconciler_leases_held"] == [({}, 0.0)]
    assert found["reconciler_engine_up"] == [({}, 1.0)]
    assert found["reconciler_due_backlog"][0][1] >= 0


async def test_due_backlog_counts_enabled_due_tasks(
    store: Store, engine: Engine, metrics_url: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a"), "b": cron(f"{url}/b"), "c": cron(f"{url}/c", "0 0 1 1 *")})
    engine.clock = FixedClock(NOW + timedelta(minutes=7))

    async def counted() -> bool:  # read in the background: the value comes with its age
        found = await scrape(metrics_url)
        return found["reconciler_due_backlog"] == [({}, 2.0)] and found["reconciler_due_backlog_age_seconds"][0][1] < 60

    assert await async_wait_until(counted, 60, step=0.2)


async def test_per_task_gauges_tell_failing_and_overdue_tasks_and_engines_heartbeats(
    store: Store, engine: Engine, metrics_url: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/bad", statuses=[500])
    await setup(store, tmp_path, {"ok": cron(f"{url}/ok"), "bad": cron(f"{url}/bad"), "yearly": cron(url, "0 0 1 1 *")})
    await engine.run_once(NOW + timedelta(minutes=5))
    later = NOW + timedelta(minutes=12)  # ok and bad are due again at 12:10, and nobody claims them
    engine.clock = FixedClock(later)
    await engine.heartbeat()

    async def read() -> dict[str, dict[str, float]]:
        found = await scrape(metrics_url)
        return {
            name.removeprefix("reconciler_task_"): {labels["task"]: value for labels, value in found.get(name, [])}
            for name in (
                "reconciler_task_failing",
                "reconciler_task_overdue_seconds",
                "reconciler_task_last_success_timestamp_seconds",
                "reconciler_task_next_run_timestamp_seconds",
            )
        } | {
            "engines": {
                labels["engine"]: v for labels, v in found.get("reconciler_engine_last_seen_timestamp_seconds", [])
            }
        }

    async def refreshed() -> bool:  # read in the background, every few seconds
        return (await read())["overdue_seconds"].get("ok") == 120.0

    assert await async_wait_until(refreshed, 60, step=0.2)
    got = await read()
    assert got["failing"] == {"ok": 0.0, "bad": 1.0, "yearly": 0.0}
    assert got["overdue_seconds"] == {"ok": 120.0, "bad": 120.0, "yearly": 0.0}
    assert got["next_run_timestamp_seconds"]["ok"] == (NOW + timedelta(minutes=10)).timestamp()
    success = got["last_success_timestamp_seconds"]
    assert success["ok"] > 0 and math.isnan(success["bad"]) and math.isnan(success["yearly"])
    assert got["engines"] == {engine.config.engine_id: later.timestamp()}


async def test_outbox_gauges_read_the_notifications_of_the_engines_sources(
    dsn: str, engine: Engine, metrics_url: str
) -> None:
    engine.clock = FixedClock(NOW)
    engine.config = replace(engine.config, sources=("main",))
    minutes = [  # (source, status, created_at, next_attempt_at) in minutes from NOW
        ("main", "pending", -2, -2),  # never tried: due for 2 minutes
        ("main", "pending", -60, -1),  # tried before: due again for 1 minute (its age does not count)
        ("main", "pending", -30, 5),  # waits for its retry: pending, not due
        ("main", "failed", -120, -100),  # gave up today
        ("main", "failed", -25 * 60, -24 * 60),  # gave up yesterday
        ("main", "delivered", -3, -3),
        ("other", "pending", -30, -30),  # another source's: not this engine's
        ("other", "failed", -5, -5),
    ]
    with psycopg.connect(dsn) as conn:
        conn.cursor().executemany(
            "INSERT INTO scheduler.notifications (source, notifier, task_id, event, payload, status, created_at,"
            " next_attempt_at) VALUES (%s, 'ops', 'billing/report', 'failure', '{}', %s, %s, %s)",
            [
                (source, status, NOW + timedelta(minutes=created), NOW + timedelta(minutes=due))
                for source, status, created, due in minutes
            ],
        )

    async def outbox() -> dict[str, float]:
        found = await scrape(metrics_url)  # none before the engine has taken the health lease
        return {name: found[name][0][1] for name, _, _ in OUTBOX_GAUGES if name in found}

    expected = {
        "reconciler_notifications_pending": 3.0,
        "reconciler_notifications_failed": 1.0,
        "reconciler_notification_oldest_pending_age_seconds": 120.0,
    }

    async def read() -> bool:  # read in the background, every few seconds
        return await outbox() == expected

    assert await async_wait_until(read, 60, step=0.2), await outbox()


async def test_notified_counts_delivery_attempts_by_notifier_event_and_outcome(
    engine: Engine, metrics_url: str
) -> None:
    [metrics] = [observer for observer in engine.observers if isinstance(observer, EngineMetrics)]
    for event, outcome in [("failure", "retry"), ("failure", "retry"), ("failure", "delivered"), ("late", "failed")]:
        metrics.notified("ops", event, outcome)
    found = await scrape(metrics_url)
    counted = {(s["notifier"], s["event"], s["outcome"]): value for s, value in found["reconciler_notifications_total"]}
    assert counted == {
        ("ops", "failure", "retry"): 2.0,
        ("ops", "failure", "delivered"): 1.0,
        ("ops", "late", "failed"): 1.0,
    }


async def test_a_database_without_the_outbox_still_serves_the_other_gauges(
    store: Store, dsn: str, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="reconciler.metrics")
    with psycopg.connect(dsn) as conn:  # as made by a reconciler from before notifications
        conn.execute("DROP TABLE scheduler.notifications")
    endpoint, url = await metrics_endpoint(engine, store)
    try:

        def outbox_read_failed() -> bool:  # the outbox is read last: the other gauges were read first
            return "gauges not refreshed: SchemaMissing" in caplog.messages

        assert await async_wait_until(outbox_read_failed, 60, step=0.05)
        found = await scrape(url)
        assert found["reconciler_task_health_age_seconds"][0][1] < 60
        assert found["reconciler_due_backlog"] == [({}, 0.0)]
        assert all(math.isnan(found[name][0][1]) for name, _, _ in OUTBOX_GAUGES)
    finally:
        await endpoint.close()


@needs_pgserver
async def test_healthz_follows_the_database(tmp_path: Path) -> None:
    server = PrivateServer(tmp_path / "pg")
    try:
        async with Store(server.dsn, timeout=2) as store:
            await store.init_schema()
            firer = Firer(concurrency=5)
            engine = Engine(store, EngineConfig("health"), firer)
            endpoint, url = await metrics_endpoint(engine, store)
            async with httpx.AsyncClient(base_url=url, timeout=15) as client:
                assert (await client.get("/healthz")).status_code == 200
                assert (await client.get("/readyz")).status_code == 503  # no claim yet
                await engine.run_once(NOW)
                assert (await client.get("/readyz")).status_code == 200
                server.stop()
                for _ in range(3):  # never waits on the database: Prometheus would drop the scrape
                    scraped = await client.get("/metrics", timeout=1.0)
                    assert scraped.status_code == 200
                    assert "reconciler_due_backlog_age_seconds" in scraped.text
                health = await client.get("/healthz")
                assert (health.status_code, health.text) == (503, "database unreachable\n")
                assert (await client.get("/readyz")).status_code == 503
                server.start()

                async def healthy() -> bool:
                    return (await client.get("/healthz")).status_code == 200

                assert await async_wait_until(healthy, 60, step=0.25)
            await endpoint.close()
            await firer.close()
    finally:
        if server.running():
            server.stop()
