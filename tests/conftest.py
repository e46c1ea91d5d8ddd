"""Shared fixtures: a real PostgreSQL (embedded, or RECONCILER_TEST_DSN), a fresh schema per test, an HTTP server."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from reconciler.store import Store
from tests.httpserver import Recorder, serving

TEST_DB = "reconciler_test"


def _server_dsn() -> str:
    external = os.environ.get("RECONCILER_TEST_DSN")
    if external:
        return external
    from reconciler.embedded import embedded_dsn

    home = Path(os.environ.get("RECONCILER_TEST_HOME", Path(tempfile.gettempdir()) / "reconciler-test-pg"))
    return embedded_dsn(home)


def _with_db(dsn: str, dbname: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})


@pytest.fixture(scope="session")
def database_dsn() -> Iterator[str]:
    """A dedicated database on the test server, dropped at the end of the session."""
    admin = _server_dsn()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEST_DB)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEST_DB)))
    yield _with_db(admin, TEST_DB)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEST_DB)))


@pytest.fixture
def http() -> Iterator[tuple[str, Recorder]]:
    """A real HTTP server on 127.0.0.1 that records every request: (base URL, recorder)."""
    with serving() as served:
        yield served


@pytest.fixture
def dsn(database_dsn: str) -> str:
    """The test database with no scheduler schema: every test starts from nothing."""
    with psycopg.connect(database_dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS scheduler CASCADE")
    return database_dsn


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[Store]:
    async with Store(dsn) as opened:
        await opened.init_schema()
        yield opened
