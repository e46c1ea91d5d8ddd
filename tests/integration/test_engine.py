"""run_once(now) with injected time against a real PostgreSQL and a real local HTTP server."""

from __future__ import annotations

import asyncio
import itertools
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from reconciler.db.store import Store
from reconciler.engine.loop import Engine, EngineConfig
from reconciler.errors import DatabaseUnavailable
from reconciler.targets.http import Firer, parsed_url
from tests.helpers import async_wait_until, leases
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, SECRET, cron, next_run, runs, setup


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


async def test_retries_with_backoff_then_success(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/r", statuses=[503, 502, 200])
    await setup(store, tmp_path, {"r": cron(f"{url}/r", policy="retries = 3\nretry_backoff_seconds = 0.2")})
    report = await engine.run_once(NOW + timedelta(minutes=5))
    assert report.succeeded == 1
    got = rec.paths("/r")
    assert [r.headers["X-Reconciler-Attempt"] for r in got] == ["1", "2", "3"]
    assert len({r.headers["Idempotency-Key"] for r in got}) == 1
    gaps = [b.at - a.at for a, b in itertools.pairwise(got)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4  # doubled per attempt
    [run] = runs(dsn)
    assert (run["status"], run["attempt"], run["http_status"]) == ("succeeded", 3, 200)


async def test_retries_exhausted_fail_and_4xx_is_not_retried(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/down", statuses=[500])
    rec.script("/bad", statuses=[404])
    policy = "retries = 2\nretry_backoff_seconds = 0.01"
    await setup(store, tmp_path, {"down": cron(f"{url}/down", policy=policy), "bad": cron(f"{url}/bad", policy=policy)})
    await engine.run_once(NOW + timedelta(minutes=5))
    assert len(rec.paths("/down")) == 3 and len(rec.paths("/bad")) == 1
    status = {r["task_id"]: (r["status"], r["attempt"], r["error"]) for r in runs(dsn)}
    assert status == {"down": ("failed", 3, "HTTP 500"), "bad": ("failed", 1, "HTTP 404")}


async def test_retry_after_is_honoured(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/slow", statuses=[429, 200], headers={"Retry-After": "1"})
    await setup(store, tmp_path, {"s": cron(f"{url}/slow", policy="retries = 1\nretry_backoff_seconds = 0.01")})
    await engine.run_once(NOW + timedelta(minutes=5))
    first, second = rec.paths("/slow")
    assert second.at - first.at >= 1.0


async def test_connect_error_is_retried(store: Store, dsn: str, engine: Engine, tmp_path: Path) -> None:
    await setup(
        store, tmp_path, {"c": cron("http://127.0.0.1:9/nothing", policy="retries = 2\nretry_backoff_seconds = 0.01")}
    )
    await engine.run_once(NOW + timedelta(minutes=5))
    [run] = runs(dsn)
    assert run["status"] == "failed" and run["attempt"] == 3 and str(run["error"]).startswith("connect error")


async def test_bearer_basic_headers_json_body_arrive(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    bearer = (
        'method = "PUT"\nheaders = { X-Tenant = "eu", X-Api-Key = { env = "API_KEY" } }\njson = { n = 1 }\n'
        '[target.auth]\nkind = "bearer"\ntoken = { env = "API_KEY" }\n'
    )
    basic = 'body = "raw text"\n[target.auth]\nkind = "basic"\nusername = "svc"\npassword = { env = "PW" }\n'
    await setup(store, tmp_path, {"b": cron(f"{url}/b", target=bearer), "p": cron(f"{url}/p", target=basic)})
    await engine.run_once(NOW + timedelta(minutes=5))
    [b] = rec.paths("/b")
    assert b.method == "PUT" and b.headers["X-Tenant"] == "eu" and b.headers["X-Api-Key"] == SECRET
    assert b.headers["Authorization"] == f"Bearer {SECRET}" and b.body == b'{"n":1}'
    [p] = rec.paths("/p")
    import base64

    assert p.headers["Authorization"] == "Basic " + base64.b64encode(f"svc:{SECRET}".encode()).decode()
    assert p.body == b"raw text"


OAUTH = (
    '[target.auth]\nkind = "oauth2_client_credentials"\ntoken_url = "{url}/oauth/token"\n'
    'client_id = "scheduler"\nclient_secret = {{ env = "IDP_SECRET" }}\nscope = "run"\n'
)


async def test_oauth_token_requested_once_for_many_runs(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    files = {f"t{i}": cron(f"{url}/protected/{i}", target=OAUTH.format(url=url)) for i in range(20)}
    await setup(store, tmp_path, files)
    report = await engine.run_once(NOW + timedelta(minutes=5))
    assert report.succeeded == 20
    assert rec.tokens_issued == 1
    await engine.run_once(NOW + timedelta(minutes=10))
    assert rec.tokens_issued == 1 and len(rec.paths("/protected")) == 40


async def test_oauth_401_refreshes_once_and_retries(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"o": cron(f"{url}/protected/o", target=OAUTH.format(url=url))})
    await engine.run_once(NOW + timedelta(minutes=5))
    rec.valid_tokens.clear()  # the IdP revokes every token
    await engine.run_once(NOW + timedelta(minutes=10))
    assert rec.tokens_issued == 2
    assert [r["status"] for r in runs(dsn)] == ["succeeded", "succeeded"]
    assert [r.headers["Authorization"] for r in rec.paths("/protected")] == [
        "Bearer token-1",
        "Bearer token-1",
        "Bearer token-2",
    ]


async def test_missing_env_fails_that_run_only_and_secrets_are_never_stored_or_logged(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, rec = http
    caplog.set_level(logging.DEBUG)
    good = 'headers = { X-Api-Key = { env = "API_KEY" } }\n'
    missing = '[target.auth]\nkind = "bearer"\ntoken = { env = "NOT_SET_ANYWHERE" }\n'
    await setup(store, tmp_path, {"good": cron(f"{url}/g", target=good), "missing": cron(f"{url}/m", target=missing)})
    await engine.run_once(NOW + timedelta(minutes=5))
    status = {r["task_id"]: (r["status"], r["error"]) for r in runs(dsn)}
    assert status["good"] == ("succeeded", None)
    assert status["missing"][0] == "failed"
    assert "NOT_SET_ANYWHERE is not set" in str(status["missing"][1])
    assert rec.paths("/m") == []
    with psycopg.connect(dsn) as conn:
        dump = "".join(
            str(conn.execute(f"SELECT json_agg(t)::text FROM scheduler.{table} t").fetchone())
            for table in ("tasks", "runs", "run_leases", "engines")
        )
    assert SECRET not in dump and "client-secret-value" not in dump
    assert SECRET not in caplog.text


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


async def test_result_kept_while_database_is_away_and_written_after(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/slow", delay=1.5)
    await setup(store, tmp_path, {"s": cron(f"{url}/slow")})
    async with Store(dsn, timeout=2) as quick:  # a short pool timeout: the outage is noticed in 2 s, not 10
        engine = Engine(quick, EngineConfig("test-engine"), Firer(concurrency=1))
        try:
            await _result_survives_outage(engine, dsn, rec)
        finally:
            await engine.firer.close()
    [run] = runs(dsn)
    assert (run["status"], run["http_status"]) == ("succeeded", 200)
    assert leases(dsn) == 0


async def _result_survives_outage(engine: Engine, dsn: str, rec: Recorder) -> None:
    report = await engine.claim(NOW + timedelta(minutes=5))
    [claimed] = report.runs
    firing = asyncio.create_task(engine.execute(claimed))
    assert await async_wait_until(lambda: rec.in_flight.get("/slow") == 1, 30), "the request never started"
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True, dbname="postgres") as admin:  # the database goes away
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(dbname)))
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )
    try:
        outcome = await firing
        assert outcome.status == "succeeded"
        with pytest.raises(DatabaseUnavailable):
            await engine.results.flush()
        assert len(engine.results.pending) == 1  # kept, not lost
    finally:
        with psycopg.connect(dsn, autocommit=True, dbname="postgres") as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(dbname)))
    await engine.store.recover()  # what the serve loop does after a fault
    assert await engine.results.flush() == 0


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


async def test_retention_keeps_newest_runs_per_task_and_prunes_by_age(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await setup(
        store,
        tmp_path,
        {"kept": cron(f"{url}/k", "* * * * *", policy="keep_runs = 3"), "all": cron(f"{url}/a", "* * * * *")},
    )
    firer = Firer(concurrency=5)
    engine = Engine(store, EngineConfig("pruner", keep_runs_days=1, prune_batch=2), firer)
    try:
        for minute in range(1, 7):
            await engine.run_once(NOW + timedelta(minutes=minute))
        with psycopg.connect(dsn) as conn:  # one run from long ago, and one still running
            conn.execute(
                "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, finished_at) VALUES "
                "('all', %(old)s, 'scheduled', 'succeeded', %(old)s), ('all', %(old2)s, 'scheduled', 'running', NULL)",
                {"old": NOW - timedelta(days=3), "old2": NOW - timedelta(days=3, minutes=1)},
            )
        deleted = await engine.prune_runs(NOW + timedelta(minutes=7))
    finally:
        await firer.close()
    assert deleted == 3 + 1
    kept = [r["scheduled_for"] for r in runs(dsn, "kept")]
    assert kept == [NOW + timedelta(minutes=m) for m in (4, 5, 6)]  # the newest three
    statuses = [(r["scheduled_for"], r["status"]) for r in runs(dsn, "all")]
    assert len(statuses) == 7 and (NOW - timedelta(days=3, minutes=1), "running") in statuses
    assert await engine.prune_runs(NOW + timedelta(minutes=7)) == 0


async def test_replicas_pruning_at_once_share_the_work(store: Store, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, finished_at) "
            "SELECT 'old', %(old)s - interval '1 minute' * g, 'scheduled', 'succeeded', %(old)s "
            "  FROM generate_series(1, 50) g",
            {"old": NOW - timedelta(days=40)},
        )
    pruners = [Engine(store, EngineConfig(f"p{i}", keep_runs_days=30, prune_batch=3)) for i in range(3)]
    deleted = await asyncio.gather(*(p.prune_runs(NOW) for p in pruners))
    assert sum(deleted) == 50 and runs(dsn, "old") == []
    for pruner in pruners:
        await pruner.firer.close()


async def test_serve_prunes_the_history_beside_its_claims(store: Store, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, finished_at) VALUES "
            "('old', %(old)s, 'scheduled', 'failed', %(old)s), ('new', %(new)s, 'scheduled', 'succeeded', %(new)s)",
            {"old": datetime.now(UTC) - timedelta(days=31), "new": datetime.now(UTC) - timedelta(days=29)},
        )
    engine = Engine(store, EngineConfig("pruning", keep_runs_days=30, max_sleep=0.2))
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop))
    try:
        assert await async_wait_until(lambda: not runs(dsn, "old"), 30)
        assert len(runs(dsn, "new")) == 1  # inside the 30 days
    finally:
        stop.set()
        await serving


async def test_concurrent_flushes_never_drop_a_result(store: Store, dsn: str, engine: Engine) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [
            row[0]
            for row in conn.execute(
                "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status) "
                "SELECT 't', %s + interval '1 minute' * g, 'scheduled', 'running' FROM generate_series(1, 3) g "
                "RETURNING id",
                (NOW,),
            )
        ]

    def result(run_id: int) -> dict[str, object]:
        return {"run_id": run_id, "status": "succeeded", "attempt": 1, "started_at": NOW, "finished_at": NOW,
                "http_status": 204, "error": None, "duration_ms": 1, "excerpt": ""}  # fmt: skip

    # The serve loop and the background writer both flush; results keep arriving meanwhile.
    engine.results.add(result(ids[0]))
    first = asyncio.create_task(engine.results.flush())
    await asyncio.sleep(0)
    engine.results.add(result(ids[1]))
    second = asyncio.create_task(engine.results.flush())
    await asyncio.sleep(0)
    engine.results.add(result(ids[2]))
    await asyncio.gather(first, second)
    await engine.results.flush()
    assert engine.results.pending == []
    assert [r["status"] for r in runs(dsn, "t")] == ["succeeded"] * 3


async def test_a_cookie_one_target_sets_is_never_sent_with_another_run(
    store: Store, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/sets", headers={"Set-Cookie": "session=of-task-a; Path=/"})
    await setup(store, tmp_path, {"a": cron(f"{url}/sets"), "b": cron(f"{url}/reads", expr="*/10 * * * *")})
    await engine.run_once(NOW + timedelta(minutes=5))
    await engine.run_once(NOW + timedelta(minutes=10))
    assert len(rec.paths("/sets")) == 2 and len(rec.paths("/reads")) == 1
    assert all("Cookie" not in r.headers for r in rec.requests)


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


def every_second(url: str, policy: str = "") -> str:
    return f'[trigger]\nkind = "interval"\nevery = "1s"\n[target]\nurl = "{url}"\n[policy]\n{policy}\n'


async def test_runs_waiting_out_a_backoff_do_not_stop_the_claims(
    store: Store, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/flaky", statuses=[500])
    retrying = "retries = 2\nretry_backoff_seconds = 60"
    files = {"r1": every_second(f"{url}/flaky", retrying), "r2": every_second(f"{url}/flaky", retrying)}
    await setup(store, tmp_path, {**files, "ok": every_second(f"{url}/ok")}, now=datetime.now(UTC))
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


async def test_a_pooled_connection_is_checked_on_checkout_unless_used_in_the_last_second(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check is a round trip a busy engine waits a loop turn for; a connection used in the
    last second skips it (a server restart within that second fails one statement, which the
    engine backs off from)."""
    monkeypatch.setattr("reconciler.db.store.FRESH_SECONDS", 3600.0)  # "the last second", however loaded the machine
    async with Store(dsn, min_size=1, max_size=1) as store:
        async with store.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))  # returns once it is gone
        with pytest.raises(DatabaseUnavailable):  # just used: not checked, and found dead by its statement
            async with store.connection() as conn:
                await conn.execute("SELECT 1")
        async with store.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))  # returns once it is gone
        monkeypatch.setattr("reconciler.db.store.FRESH_SECONDS", 0.0)  # as if idle for longer than that
        async with store.connection() as conn:  # checked: replaced, and the statement works
            assert conn.info.backend_pid != pid
            await conn.execute("SELECT 1")


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
