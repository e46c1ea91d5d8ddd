"""Late claims: misfire grace, coalesce, catch-up caps and instance limits.

run_once(now) with injected time against a real PostgreSQL and a real local HTTP server.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from tests.builders import cron
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, next_run, runs, setup


async def test_misfire_beyond_grace_is_recorded_missed(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a")})
    report = await engine.run_once(NOW + timedelta(minutes=6, seconds=1))  # 61 s late, grace 60
    assert (report.fired, report.missed) == (0, 1)
    assert rec.paths("/a") == []
    [run] = runs(dsn)
    assert run["status"] == "missed" and "late by 61 s" in str(run["error"])


async def test_coalesce_collapses_into_latest(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a", policy="misfire_grace_seconds = 3600")})
    report = await engine.run_once(NOW + timedelta(minutes=17))
    assert report.fired == 1
    assert [r.headers["Idempotency-Key"] for r in rec.paths("/a")] == ["a@2026-12-02T12:15:00Z"]
    assert [(r["kind"], r["status"]) for r in runs(dsn)] == [
        ("catchup", "missed"),
        ("catchup", "missed"),
        ("scheduled", "succeeded"),
    ]
    assert next_run(dsn, "a") == NOW + timedelta(minutes=20)


async def test_no_coalesce_fires_each_in_grace(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    policy = "misfire_grace_seconds = 500\ncoalesce = false\nmax_running_instances = 10"
    await setup(store, tmp_path, {"a": cron(f"{url}/a", policy=policy)})
    await engine.run_once(NOW + timedelta(minutes=17))  # 12:05 is 720 s late: missed; 12:10, 12:15 fire
    keys = sorted(r.headers["Idempotency-Key"] for r in rec.paths("/a"))
    assert keys == ["a@2026-12-02T12:10:00Z", "a@2026-12-02T12:15:00Z"]
    assert [(r["kind"], r["status"]) for r in runs(dsn)] == [
        ("catchup", "missed"),
        ("catchup", "succeeded"),
        ("scheduled", "succeeded"),
    ]


async def test_catchup_is_capped_at_100_per_claim(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    text = (
        f'[trigger]\nkind = "interval"\nevery = "1m"\n[target]\nurl = "{url}/i"\n'
        "[policy]\nmisfire_grace_seconds = 100000\ncoalesce = false\nmax_running_instances = 1000\n"
    )
    await setup(store, tmp_path, {"i": text})
    report = await engine.run_once(NOW + timedelta(minutes=300))
    assert report.fired == 100
    assert len(rec.paths("/i")) == 100 and len(runs(dsn)) == 100
    # the oldest 100 of the 300 due occurrences within the grace; the 101st stays due for the next claim
    assert runs(dsn)[0]["scheduled_for"] == NOW + timedelta(minutes=1)
    assert next_run(dsn, "i") == NOW + timedelta(minutes=101)
    for _ in range(2):
        assert (await engine.run_once(NOW + timedelta(minutes=300, seconds=30))).fired == 100
    assert len(runs(dsn)) == 300 and len({r.headers["Idempotency-Key"] for r in rec.paths("/i")}) == 300
    assert next_run(dsn, "i") == NOW + timedelta(minutes=301)


async def test_catchup_counts_against_max_instances_oldest_first(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _rec = http
    policy = "misfire_grace_seconds = 3600\ncoalesce = false\nmax_running_instances = 2"
    await setup(store, tmp_path, {"a": cron(f"{url}/a", policy=policy)})
    await engine.run_once(NOW + timedelta(minutes=15))
    assert [r["status"] for r in runs(dsn)] == ["succeeded", "succeeded", "skipped"]
    assert "max_running_instances = 2" in str(runs(dsn)[2]["error"])
