"""Claims and leases: expired leases, engines racing for rows, the room a claim may take, specs validated ahead.

run_once(now) with injected time against a real PostgreSQL and a real local HTTP server.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import psycopg

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.targets.http import Firer, parsed_url
from tests.builders import cron
from tests.helpers import leases
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, runs, setup


async def test_expired_lease_marks_run_lost_and_frees_slot(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _rec = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a")})
    with psycopg.connect(dsn, autocommit=True) as conn:  # a dead engine's run and lease
        [(run_id,)] = conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, engine_id) "
            "VALUES ('a', %s, 'scheduled', 'running', 1, 'dead') RETURNING id",
            (NOW - timedelta(minutes=5),),
        ).fetchall()
        conn.execute(
            "INSERT INTO scheduler.run_leases VALUES ('a', %s, 'dead', %s)", (run_id, NOW + timedelta(minutes=7))
        )
    report = await engine.run_once(NOW + timedelta(minutes=5))  # lease still valid: the slot is taken
    assert report.skipped == 1 and report.fired == 0
    report = await engine.run_once(NOW + timedelta(minutes=10))
    assert report.lost == 1 and report.fired == 1
    statuses = [(r["status"], r["error"]) for r in runs(dsn)]
    assert statuses[0][0] == "lost" and "engine dead" in str(statuses[0][1])
    assert [s for s, _ in statuses[1:]] == ["skipped", "succeeded"]


async def test_two_engines_claim_each_occurrence_once(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {f"t{i:03d}": cron(f"{url}/x/{i}") for i in range(150)})
    engines = [Engine(store, EngineConfig(f"e{i}", batch=20)) for i in range(3)]
    fired = []
    while True:  # each run_once claims one batch; all three race for the same rows
        reports = await asyncio.gather(*(e.run_once(NOW + timedelta(minutes=5)) for e in engines))
        if not any(r.fired for r in reports):
            break
        fired.append([r.fired for r in reports])
    assert sum(map(sum, fired)) == 150
    assert all(n > 0 for n in fired[0])  # the first round really was concurrent
    keys = [r.headers["Idempotency-Key"] for r in rec.paths("/x")]
    assert len(keys) == len(set(keys))
    for e in engines:
        await e.firer.close()


async def test_a_claim_takes_no_more_than_the_engine_can_start_soon(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await setup(store, tmp_path, {f"t{i:02d}": cron(f"{url}/t{i}") for i in range(20)})
    engine = Engine(store, EngineConfig("small", batch=10, concurrency=2), Firer(concurrency=2))
    assert engine.claim_room() == 4  # 2 slots and a queue of 2: a batch of 10 would wait past its leases
    report = await engine.claim(NOW + timedelta(minutes=5), engine.claim_room())
    assert (report.claimed_tasks, len(report.runs)) == (4, 4)
    assert len(runs(dsn)) == 4  # the other 16 stay due, for this engine's next claim or another replica
    await engine.firer.close()


async def test_claims_running_at_once_share_the_room_and_never_the_same_task(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    """serve() runs up to two claims at a time: the second may take only the room the first
    leaves, and SKIP LOCKED keeps their tasks apart."""
    url, _ = http
    await setup(store, tmp_path, {f"t{i:02d}": cron(f"{url}/t{i}") for i in range(20)})
    engine = Engine(store, EngineConfig("two", batch=10, concurrency=3), Firer(concurrency=3))
    at = NOW + timedelta(minutes=5)
    assert engine.claim_room() == 6
    first = asyncio.create_task(engine.claim(at, 4))
    engine.claims[first] = 4
    assert engine.claim_room() == 2  # what the first may take is not room for the second
    second = asyncio.create_task(engine.claim(at, engine.claim_room()))
    engine.claims[second] = 2
    reports = await asyncio.gather(first, second)
    fired = [run.task_id for report in reports for run in report.runs]
    assert sorted(r.claimed_tasks for r in reports) == [2, 4]
    assert len(fired) == len(set(fired)) == 6 == len(runs(dsn))
    engine._collect()
    assert (engine.claims, len(engine.queue)) == ({}, 6)
    await engine.firer.close()


async def test_a_finished_run_whose_result_is_not_written_yet_holds_no_slot(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    # max_running_instances = 1, and a lease (timeout + margin) that outlasts the 5 minutes to the next run
    await setup(store, tmp_path, {"a": cron(f"{url}/a", target="timeout_seconds = 600")})
    first = await engine.claim(NOW + timedelta(minutes=5))
    [claimed] = first.runs
    await engine.execute(claimed)  # finished: its result (and lease release) waits in the writer's queue
    assert engine.results.finished() == [claimed.run_id] and leases(dsn) == 1
    report = await engine.claim(NOW + timedelta(minutes=10))  # the serve loop claims without flushing first
    assert (report.fired, report.skipped) == (1, 0)
    await engine.results.flush()
    await asyncio.gather(*(engine.execute(c) for c in report.runs))
    await engine.results.flush()
    assert [r["status"] for r in runs(dsn)] == ["succeeded", "succeeded"] and leases(dsn) == 0
    assert len(rec.paths("/a")) == 2


async def test_idle_time_validates_soon_due_specs_and_a_changed_spec_still_wins(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"a": cron(f"{url}/old"), "later": cron(f"{url}/later", expr="0 3 * * *")})
    assert await engine.claimer.warm(NOW + timedelta(minutes=5), budget=5.0) == 1  # only what falls due by then
    assert await engine.claimer.warm(NOW + timedelta(minutes=5), budget=5.0) == 0  # already validated
    hits = parsed_url.cache_info().hits
    parsed_url(f"{url}/old")  # the URL was parsed when the spec was, not left to the request
    assert parsed_url.cache_info().hits == hits + 1
    await setup(store, tmp_path, {"a": cron(f"{url}/new")})  # changed after it was validated ahead
    report = await engine.run_once(NOW + timedelta(minutes=5))
    assert (report.fired, report.succeeded) == (1, 1)
    assert [r.path for r in rec.requests] == ["/new"]
