"""One hostile target or one bad stored spec is that run's `failed` result, never the engine's end.

run_once(now) with injected time, a real PostgreSQL, real targets on 127.0.0.1 (tests/hostile.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.targets.http import Firer
from tests.builders import cron
from tests.helpers import async_wait_until, leases
from tests.hostile import Stats, hostile_serving
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, SECRET, setup

DUE = NOW + timedelta(minutes=5, seconds=1)
TOKEN = "bearer-token-0123456789"
ENV = {"API_KEY": SECRET, "PW": SECRET, "TOKEN": TOKEN, "NON_ASCII": "grüße", "CRLF": "a\r\nX-Injected: 1"}


@pytest.fixture
def hostile() -> Iterator[tuple[str, Stats]]:
    with hostile_serving() as served:
        yield served


def engine_with(store: Store, concurrency: int = 10, **config: float) -> Engine:
    return Engine(store, EngineConfig("hostile-engine", **config), Firer(concurrency=concurrency, env=ENV))  # type: ignore[arg-type]


def results(dsn: str) -> dict[str, dict[str, object]]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        rows = conn.execute(
            "SELECT task_id, status, attempt, http_status, error, response_excerpt, duration_ms"
            " FROM scheduler.runs ORDER BY id"
        ).fetchall()
    return {str(row["task_id"]): row for row in rows}


async def test_each_hostile_target_fails_alone_and_the_batch_is_recorded(
    store: Store, dsn: str, hostile: tuple[str, Stats], http: tuple[str, Recorder], tmp_path: Path
) -> None:
    bad, stats = hostile
    good, rec = http
    files = {
        "nul": cron(f"{bad}/nul"),
        "nul500": cron(f"{bad}/nul?status=500"),
        "endless": cron(f"{bad}/endless", target="timeout_seconds = 20"),
        "trickle": cron(f"{bad}/trickle", target="timeout_seconds = 2"),
        "cut": cron(f"{bad}/cut", policy="retries = 2\nretry_backoff_seconds = 0"),
        "nonascii": cron(f"{bad}/echo", target='headers = { X-Name = { env = "NON_ASCII" } }'),
        "crlf": cron(f"{bad}/echo", target='headers = { X-Name = { env = "CRLF" } }'),
        "forbidden": cron(f"{bad}/echo", target='headers = { X-Dsn = { env = "RECONCILER_DSN" } }'),
        "good": cron(f"{good}/good"),
    }
    await setup(store, tmp_path, files)
    engine = engine_with(store)
    started = time.monotonic()
    report = await engine.run_once(DUE)
    elapsed = time.monotonic() - started
    await engine.firer.close()
    found = results(dsn)
    assert set(found) == set(files) and report.fired == len(files)
    assert found["good"]["status"] == "succeeded" and len(rec.paths("/good")) == 1
    # A 200 whose body PostgreSQL cannot store is a success with a sanitized excerpt.
    assert found["nul"]["status"] == "succeeded"
    assert "\x00" not in str(found["nul"]["response_excerpt"]) and "before" in str(found["nul"]["response_excerpt"])
    assert (found["nul500"]["status"], found["nul500"]["error"]) == ("failed", "HTTP 500")
    # The endless body is read only up to the excerpt; the trickle is cut at timeout_seconds.
    assert found["endless"]["status"] == "succeeded" and len(str(found["endless"]["response_excerpt"])) == 1024
    assert found["trickle"]["status"] == "failed" and str(found["trickle"]["error"]).startswith("timeout after 2 s")
    assert int(str(found["trickle"]["duration_ms"])) < 10_000 and elapsed < 30
    cut = found["cut"]
    assert (cut["status"], cut["attempt"]) == ("failed", 3)
    assert str(cut["error"]).startswith("response error: ServerDisconnectedError after the request was sent")
    for task, name in (("nonascii", "NON_ASCII"), ("crlf", "CRLF")):
        assert found[task]["status"] == "failed"
        assert found[task]["error"] == (
            f"invalid header value for X-Name (from environment variable {name}):"
            " only visible ASCII, spaces and tabs can be sent"
        )
    assert found["forbidden"]["status"] == "failed"
    assert found["forbidden"]["error"] == (
        "target.headers.X-Dsn names environment variable RECONCILER_DSN: tasks may not read the engine's own"
        " settings (RECONCILER_*, DATABASE_URL, PG*); see engine --allow-env"
    )
    assert stats.requests.get("/echo", 0) == 0  # none of the bad-header tasks sent anything
    assert leases(dsn) == 0


async def test_echoed_credentials_are_scrubbed_from_the_excerpt(
    store: Store, dsn: str, hostile: tuple[str, Stats], tmp_path: Path
) -> None:
    bad, _ = hostile
    files = {
        "bearer": cron(
            f"{bad}/echo?status=500",
            target='headers = { X-Api-Key = { env = "API_KEY" } }\n[target.auth]\nkind = "bearer"\n'
            'token = { env = "TOKEN" }\n',
        ),
        "basic": cron(
            f"{bad}/echo", target='[target.auth]\nkind = "basic"\nusername = "svc"\npassword = { env = "PW" }\n'
        ),
    }
    await setup(store, tmp_path, files)
    engine = engine_with(store)
    await engine.run_once(DUE)
    await engine.firer.close()
    found = results(dsn)
    dump = json.dumps(found, default=str)
    for secret in (SECRET, TOKEN, "c3ZjOnMzY3IzdC12YWx1ZS1uZXZlci1zdG9yZWQtN2YzYQ=="):
        assert secret not in dump
    assert "X-Api-Key: [redacted]" in str(found["bearer"]["response_excerpt"])
    assert "Authorization: Bearer [redacted]" in str(found["bearer"]["response_excerpt"])
    assert "Authorization: Basic [redacted]" in str(found["basic"]["response_excerpt"])


async def test_retry_after_beyond_the_lease_fails_now_and_backoff_holds_no_slot(
    store: Store, dsn: str, hostile: tuple[str, Stats], http: tuple[str, Recorder], tmp_path: Path
) -> None:
    bad, stats = hostile
    good, rec = http
    rec.script("/flaky", statuses=[503, 200])
    files = {
        "later": cron(f"{bad}/retry-after", policy="retries = 3"),
        "flaky": cron(f"{good}/flaky", policy="retries = 1\nretry_backoff_seconds = 2"),
        "bystander": cron(f"{good}/bystander", expr="6 12 * * *"),
    }
    await setup(store, tmp_path, files)
    engine = engine_with(store, concurrency=1)
    waits: list[float] = []

    async def until_the_bystander_is_sent(seconds: float) -> None:  # the backoff, ended by a condition, not time
        waits.append(seconds)
        assert await async_wait_until(lambda: rec.paths("/bystander"), 60), "the bystander was never sent"

    engine.firer.sleep = until_the_bystander_is_sent
    first_claim = asyncio.create_task(engine.run_once(DUE))
    assert await async_wait_until(lambda: len(rec.paths("/flaky")) == 1, 30)
    await engine.run_once(DUE + timedelta(minutes=1))  # while "flaky" waits out its backoff
    await first_claim
    await engine.firer.close()
    found = results(dsn)
    later = found["later"]
    assert (later["status"], later["attempt"], stats.requests["/retry-after"]) == ("failed", 1, 1)
    assert later["error"] == "HTTP 503; not retried: waiting 3600 s would outlive the run's lease"
    assert found["flaky"]["status"] == "succeeded" and found["bystander"]["status"] == "succeeded"
    assert waits == [2.0]  # flaky's one backoff; "later" was never retried
    # With one slot, the bystander was sent while "flaky" waited for its retry.
    [_, second] = rec.paths("/flaky")
    [bystander] = rec.paths("/bystander")
    assert bystander.at < second.at


async def test_a_run_never_outlives_its_lease(
    store: Store, dsn: str, hostile: tuple[str, Stats], tmp_path: Path
) -> None:
    bad, _ = hostile
    # timeout 20 s, margin 2 s: the lease is 22 s; the attempt is cut before it ends.
    await setup(store, tmp_path, {"slow": cron(f"{bad}/trickle", target="timeout_seconds = 20")})
    engine = engine_with(store, lease_margin=2)
    claimed = await engine.claim(DUE)
    [run] = claimed.runs
    assert run.deadline is not None
    run.deadline -= 17  # as if the run had waited 17 s for a free slot
    outcome = await engine.execute(run)
    await engine.results.flush()
    await engine.firer.close()
    assert outcome.status == "failed"
    assert str(outcome.last.error).endswith("cut short to end before the run's lease")
    assert outcome.last.duration_ms < 8000


async def test_bad_stored_specs_fail_their_own_runs_and_retention_survives(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    good, rec = http
    files = {name: cron(f"{good}/{name}") for name in ("port", "header", "huge", "ok")}
    await setup(store, tmp_path, files)
    # Specs written by an older version that the current validation would reject.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{target,url}', '\"http://127.0.0.1:99999/p\"')"
            " WHERE id = 'port'"
        )
        conn.execute(
            "UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{target,headers}', '{\"X-Ü\": \"ä\"}'),"
            " spec_hash = 'tampered' WHERE id = 'header'"
        )
        conn.execute(
            "UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{policy,keep_runs}', '2147483648') WHERE id = 'huge'"
        )
    engine = engine_with(store)
    await engine.run_once(DUE)
    assert await engine.prune_runs(DUE) == 0
    await engine.firer.close()
    found = results(dsn)
    assert found["ok"]["status"] == "succeeded" and len(rec.paths("/ok")) == 1
    assert [found[t]["status"] for t in ("port", "header", "huge")] == ["failed"] * 3
    assert rec.paths("/port") == rec.paths("/header") == rec.paths("/huge") == []


async def test_a_result_the_database_refuses_does_not_cost_the_batch(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    good, _ = http
    await setup(store, tmp_path, {"a": cron(f"{good}/a"), "b": cron(f"{good}/b")})
    engine = engine_with(store)
    report = await engine.claim(DUE)
    now = datetime.now(UTC)
    for index, claimed in enumerate(report.runs):
        excerpt = "bad\x00byte" if index == 0 else "fine"  # bypasses the sanitizing, as a bug would
        engine.results.add(
            {"run_id": claimed.run_id, "attempt": 1, "started_at": now, "http_status": 200, "error": None,
             "duration_ms": 1, "excerpt": excerpt, "status": "succeeded", "finished_at": now}
        )  # fmt: skip
    await engine.results.flush()
    await engine.firer.close()
    found = results(dsn)
    assert [found[t]["status"] for t in ("a", "b")] == ["succeeded", "succeeded"]
    refused = report.runs[0].task_id
    assert found[refused]["response_excerpt"] is None
    assert "could not be stored" in str(found[refused]["error"])
    assert leases(dsn) == 0
