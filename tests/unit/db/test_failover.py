"""The pure parts of following a failover (db/failover.py) and of showing where an engine is connected."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors

from reconciler.db.failover import RECONNECT_CAP_SECONDS, _CappedAttempt, writable_dsn, wrong_server
from reconciler.output.text import database_text


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"), True),
        (errors.AdminShutdown("terminating connection due to administrator command"), True),
        (errors.CrashShutdown("terminating connection because of crash of another server process"), True),
        (errors.CannotConnectNow("the database system is starting up"), True),
        (errors.UniqueViolation("duplicate key"), False),
        (errors.InsufficientPrivilege("permission denied"), False),
        (psycopg.OperationalError("connection refused"), False),  # no SQLSTATE: a fault the pool sees itself
        (ValueError("not a database error"), False),
    ],
)
def test_what_counts_as_a_server_that_cannot_take_writes(exc: BaseException, expected: bool) -> None:
    assert wrong_server(exc) is expected


@pytest.mark.parametrize(
    ("dsn", "attrs"),
    [
        ("host=db port=5432 dbname=app", "read-write"),
        ("host=a,b port=5432,5433 dbname=app", "read-write"),
        ("postgresql://u@a:5432,b:5433/app", "read-write"),
        ("host=a,b target_session_attrs=any dbname=app", "any"),  # the DSN's own choice stands
        ("host=a target_session_attrs=primary", "primary"),
        ("", "read-write"),  # libpq's defaults (PGHOST, the socket)
    ],
)
def test_every_dsn_asks_for_a_writable_server_unless_it_says_otherwise(dsn: str, attrs: str) -> None:
    made = writable_dsn(dsn)
    assert psycopg.conninfo.conninfo_to_dict(made)["target_session_attrs"] == attrs
    kept = {k: v for k, v in psycopg.conninfo.conninfo_to_dict(made).items() if k != "target_session_attrs"}
    assert kept == {k: v for k, v in psycopg.conninfo.conninfo_to_dict(dsn).items() if k != "target_session_attrs"}


def test_an_unparsable_dsn_is_left_for_the_connection_to_refuse() -> None:
    assert writable_dsn("host='unterminated") == "host='unterminated"


def test_the_pools_reconnection_waits_at_most_the_cap() -> None:
    attempt, now, delays = _CappedAttempt(timeout=300.0), 0.0, []
    for _ in range(12):
        attempt.update_delay(now)
        delays.append(attempt.delay)
        now += attempt.delay
    assert delays[0] == pytest.approx(1.0, abs=0.11)  # psycopg_pool's first wait, jittered
    assert max(delays) <= RECONNECT_CAP_SECONDS
    assert delays[-1] == RECONNECT_CAP_SECONDS  # psycopg_pool's own would be 2,048 s by now
    assert now < 30  # twelve tries within half a minute


@pytest.mark.parametrize(
    ("database", "server", "primary", "shown"),
    [
        ("10.0.0.5:5432", "10.0.0.5:5432", True, ", database 10.0.0.5:5432 (primary)"),
        ("127.0.0.1:6432", "127.0.0.1:5433", True, ", database 127.0.0.1:6432 -> server 127.0.0.1:5433 (primary)"),
        ("/run/postgresql:5432", None, True, ", database /run/postgresql:5432 (primary)"),  # a Unix socket
        ("db:5432", "10.0.0.6:5432", False, ", database db:5432 -> server 10.0.0.6:5432 (standby)"),
        (None, None, None, ""),  # a row of an engine from before these columns
    ],
)
def test_status_shows_the_database_each_engine_reached(
    database: str | None, server: str | None, primary: bool | None, shown: str
) -> None:
    assert database_text(database, server, primary) == shown
