"""What a target receives: auth, headers and bodies, OAuth tokens, secrets never stored, no shared cookies.

run_once(now) with injected time against a real PostgreSQL and a real local HTTP server.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from tests.builders import cron
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, SECRET, runs, setup


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
