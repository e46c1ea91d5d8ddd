"""Shared fixtures: one real PostgreSQL per test run, a fresh database per test, an HTTP server.

The run owns a temporary folder (`reconciler-test-*` in the system temp directory): the
embedded server lives in it, and so does pytest's basetemp, so every server a test or a
subprocess starts under `tmp_path` is found and stopped when the run ends, passed or failed.
With RECONCILER_TEST_DSN the server is that one instead; database names carry a per-run
prefix, so two runs on one server never share a database.
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from reconciler.db.store import Store
from tests.httpserver import Recorder, serving
from tests.pgcontrol import stop_all_under
from tests.replication import stop_bouncers_under

RUN_ROOT = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)  # before pytest reads basetemp
def pytest_configure(config: pytest.Config) -> None:
    root = Path(tempfile.mkdtemp(prefix="reconciler-test-"))
    config.stash[RUN_ROOT] = root
    if config.option.basetemp is None:
        config.option.basetemp = str(root / "tmp")


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(RUN_ROOT, None)
    if root is not None:
        stop_bouncers_under(root)  # PgBouncers a failed failover test left running (tests/replication.py)
        stop_all_under(root)
        shutil.rmtree(root, ignore_errors=True)


def with_db(dsn: str, dbname: str) -> str:
    """The same server, another database."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})


@dataclass
class SuiteServer:
    """The run's server: an admin connection, and the empty template every test database copies."""

    dsn: str
    admin: psycopg.Connection[tuple[object, ...]]
    prefix: str
    counter: itertools.count[int]

    @property
    def template(self) -> str:
        return f"{self.prefix}_template"

    def create(self) -> str:
        name = f"{self.prefix}_{next(self.counter)}"
        self.admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(self.template))
        )
        return name

    def drop(self, name: str) -> None:
        self.admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def test_server(request: pytest.FixtureRequest) -> Iterator[SuiteServer]:
    """RECONCILER_TEST_DSN, or an embedded server in this run's own folder."""
    admin_dsn = os.environ.get("RECONCILER_TEST_DSN")
    if not admin_dsn:
        from reconciler.db.embedded import embedded_dsn

        admin_dsn = embedded_dsn(request.config.stash[RUN_ROOT] / "server")
    prefix = f"rt_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        server = SuiteServer(admin_dsn, admin, prefix, itertools.count(1))
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(server.template)))
        try:
            yield server
        finally:
            server.drop(server.template)


@pytest.fixture
def http() -> Iterator[tuple[str, Recorder]]:
    """A real HTTP server on 127.0.0.1 that records every request: (base URL, recorder)."""
    with serving() as served:
        yield served


@pytest.fixture
def dsn(test_server: SuiteServer) -> Iterator[str]:
    """A database of this test's own with no scheduler schema: every test starts from nothing."""
    name = test_server.create()
    try:
        yield with_db(test_server.dsn, name)
    finally:
        test_server.drop(name)


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[Store]:
    async with Store(dsn) as opened:
        await opened.init_schema()
        yield opened
