"""The engine's LISTEN connection: `reconciler_listen_connected` drops when its backend is terminated
and recovers when it can connect again, with a log line each way; with LISTEN broken for good the
engine polls, and still fires what is due and what is triggered.

LISTEN gets a role of its own (`--listen-dsn`), so the test can keep it from connecting again
(NOLOGIN) while the engine's pool goes on as usual.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.listener import POLL_SECONDS
from reconciler.engine.loop import Engine
from reconciler.targets.http import Firer
from tests.builders import cli, cron
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import metrics_endpoint, scrape, setup


@pytest.fixture
def listen_role(dsn: str) -> Iterator[tuple[str, str]]:
    """A LOGIN role `<database>_listen` (roles are cluster-wide) that may connect: (its name, its DSN)."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    role, password = f"{params['dbname']}_listen", secrets.token_hex(8)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
    params.update(user=role, password=password)
    try:
        yield role, psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def set_login(dsn: str, role: str, login: bool) -> None:
    """Let `role` connect, or not; not: its backends are terminated too."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE {} {}").format(sql.Identifier(role), sql.SQL("LOGIN" if login else "NOLOGIN")))
        if not login:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))


async def trigger(dsn: str, task_id: str) -> None:
    """`reconciler trigger TASK` (a manual run, and its NOTIFY), in a thread: it runs its own event loop."""
    code, _, err = await asyncio.to_thread(cli, dsn, None, "trigger", task_id, "--reason", "test")
    assert code == 0, err


async def gauge(url: str) -> float:
    [(_, value)] = (await scrape(url))["reconciler_listen_connected"]
    return value


async def serving(store: Store, listen_dsn: str) -> tuple[Engine, asyncio.Event, asyncio.Task[None]]:
    """An engine serving in this process (sleeping up to 60 s between claims: a NOTIFY or the poll wakes it)."""
    config = EngineConfig("listen-test", max_sleep=60.0, listen_dsn=listen_dsn)
    engine = Engine(store, config, Firer(concurrency=4))
    stop = asyncio.Event()
    return engine, stop, asyncio.create_task(engine.serve(stop))


async def test_the_gauge_drops_when_the_listen_backend_is_terminated_and_recovers(
    store: Store, dsn: str, listen_role: tuple[str, str], http: tuple[str, Recorder], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    url, rec = http
    role, listen_dsn = listen_role
    await setup(store, tmp_path / "tasks.d", {"hourly": cron(f"{url}/hourly", "0 * * * *")})
    engine, stop, served = await serving(store, listen_dsn)
    endpoint, metrics = await metrics_endpoint(engine, store)
    caplog.set_level(logging.INFO, logger="reconciler.engine")
    try:
        assert await async_wait_until(lambda: engine.listener.connected, 30)
        assert await gauge(metrics) == 1.0
        # LISTEN up: a manual run's NOTIFY wakes the engine, which would sleep a minute otherwise.
        await trigger(dsn, "hourly")
        assert await async_wait_until(lambda: rec.paths("/hourly"), 30), "the NOTIFY did not wake the engine"

        set_login(dsn, role, login=False)
        assert await async_wait_until(lambda: not engine.listener.connected, 30)
        assert await gauge(metrics) == 0.0
        # Polling meanwhile: a manual run is fired within the poll interval, no NOTIFY heard.
        await trigger(dsn, "hourly")
        assert await async_wait_until(lambda: len(rec.paths("/hourly")) == 2, 30), "not fired while polling"

        set_login(dsn, role, login=True)
        assert await async_wait_until(lambda: engine.listener.connected, 30)
        assert await gauge(metrics) == 1.0
    finally:
        stop.set()
        await served
        await endpoint.close()
        await engine.firer.close()
        await engine.deliverer.close()
    said = [r.getMessage() for r in caplog.records if "LISTEN connection" in r.getMessage()]
    assert len([line for line in said if " lost (" in line]) == 1, said  # once, not once per try
    assert len([line for line in said if " back after " in line]) == 1, said
    assert not [line for line in said if "password" in line or listen_dsn in line], said


async def test_with_listen_broken_for_good_the_engine_polls_and_fires_everything(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, rec = http
    await setup(store, tmp_path / "tasks.d", {"hourly": cron(f"{url}/hourly", "0 * * * *")})
    nowhere = "host=127.0.0.1 port=1 dbname=postgres user=postgres connect_timeout=2"  # nothing listens on port 1
    engine, stop, served = await serving(store, nowhere)
    caplog.set_level(logging.INFO, logger="reconciler.engine")
    try:
        for count in (1, 2, 3):
            await trigger(dsn, "hourly")
            assert await async_wait_until(lambda n=count: len(rec.paths("/hourly")) == n, 30), f"run {count} not fired"
        assert not engine.listener.connected
        assert engine.listener.sleep_cap(60.0) == POLL_SECONDS
    finally:
        stop.set()
        await served
        await engine.firer.close()
        await engine.deliverer.close()
    lost = [r.getMessage() for r in caplog.records if "LISTEN connection" in r.getMessage()]
    assert len(lost) == 1 and "polling every 1 s until it is back" in lost[0], lost
