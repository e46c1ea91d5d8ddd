"""The engine's database state: one line when an outage starts, one per STILL_DOWN_SECONDS while it
lasts, one when it ends, whatever the number of tries (injected clock); and connection errors name
where the DSN came from, never its password."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest

from reconciler.db.embedded import DsnOrigin, configured
from reconciler.db.errors import OutageNoise
from reconciler.db.store import Store
from reconciler.engine.outage import STILL_DOWN_SECONDS, Outage
from reconciler.errors import DatabaseUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "reconciler.engine.database"]


def test_one_line_per_state_change_however_many_tries(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="reconciler.engine.database")
    clock = Clock()
    outage = Outage(clock=clock)
    outage.answered()  # up and answering: nothing to say
    assert not outage.down and lines(caplog) == []
    for _ in range(50):  # 50 tries within the first minute: the first one says it
        outage.failed(DatabaseUnavailable("cannot connect to PostgreSQL (host=db): refused; check RECONCILER_DSN"))
        clock.now += 1.0
    assert outage.down
    assert lines(caplog) == [
        "database unavailable: cannot connect to PostgreSQL (host=db): refused; check RECONCILER_DSN; "
        f"retrying (a line every {STILL_DOWN_SECONDS:g} s until it answers)"
    ]
    for _ in range(80):  # still down a minute after the first line: one more, and one more a minute later
        outage.failed(OSError("refused"))
        clock.now += 1.0
    assert lines(caplog)[1:] == [
        "database still unavailable after 60 s: refused; retrying",
        "database still unavailable after 120 s: refused; retrying",
    ]
    outage.answered()
    outage.answered()
    assert lines(caplog)[3:] == ["database reachable after 130.0 s unavailable"]
    assert not outage.down
    outage.failed(OSError("again"))  # a new outage starts with its own first line
    assert lines(caplog)[4].startswith("database unavailable: again;")


def test_the_stores_own_message_is_never_cut(caplog: pytest.LogCaptureFixture) -> None:
    """one_line cuts at 300 characters; the store's message ends with the fix, after a path and libpq's reason."""
    caplog.set_level(logging.INFO, logger="reconciler.engine.database")
    message = "cannot connect to the embedded PostgreSQL in /" + "deep/" * 80 + "pgdata: refused; the fix"
    Outage().failed(DatabaseUnavailable(message))
    Outage().failed(OSError("x" * 400))
    assert lines(caplog)[0].startswith(f"database unavailable: {message}; retrying")
    assert lines(caplog)[1].startswith(f"database unavailable: {'x' * 300}; retrying")


def test_the_lines_carry_structured_fields(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="reconciler.engine.database")
    clock = Clock()
    outage = Outage(still_every=5, clock=clock)
    outage.failed(OSError("x"))
    clock.now += 5
    outage.failed(OSError("x"))
    clock.now += 1.25
    outage.answered()
    fields = [r.fields for r in caplog.records]  # type: ignore[attr-defined]
    assert fields == [
        {"database": "unavailable"},
        {"database": "unavailable", "down_seconds": 5.0},
        {"database": "reachable", "down_seconds": 6.2},
    ]
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING", "INFO"]


SHOWN = "host=db.internal port=5432 dbname=app user=engine"


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        (DsnOrigin("--dsn"), f"cannot connect to PostgreSQL ({SHOWN}, from --dsn): refused; check --dsn"),
        (
            DsnOrigin("RECONCILER_DSN"),
            f"cannot connect to PostgreSQL ({SHOWN}, from RECONCILER_DSN): refused; check RECONCILER_DSN",
        ),
        (
            DsnOrigin("DATABASE_URL"),
            f"cannot connect to PostgreSQL ({SHOWN}, from DATABASE_URL): refused; check DATABASE_URL "
            "(used because neither --dsn nor RECONCILER_DSN is set)",
        ),
        (DsnOrigin(), f"cannot connect to PostgreSQL ({SHOWN}): refused; check the DSN"),
        (
            DsnOrigin(embedded=Path("/srv/app/.reconciler/pgdata")),
            "cannot connect to the embedded PostgreSQL in /srv/app/.reconciler/pgdata (no --dsn, RECONCILER_DSN "
            "or DATABASE_URL is set): refused; if it was stopped, any reconciler command run in the project "
            "starts it again",
        ),
    ],
)
def test_a_connection_error_names_where_the_dsn_came_from(origin: DsnOrigin, expected: str) -> None:
    assert origin.unreachable(SHOWN, "refused") == expected


def test_the_dsn_comes_from_the_flag_then_reconciler_dsn_then_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECONCILER_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert configured(None) is None  # the embedded server
    monkeypatch.setenv("DATABASE_URL", "postgresql:///c")
    assert configured(None) == ("postgresql:///c", DsnOrigin("DATABASE_URL"))
    monkeypatch.setenv("RECONCILER_DSN", "postgresql:///b")
    assert configured(None) == ("postgresql:///b", DsnOrigin("RECONCILER_DSN"))
    assert configured("postgresql:///a") == ("postgresql:///a", DsnOrigin("--dsn"))


async def test_a_store_that_cannot_connect_says_from_where_and_never_the_password() -> None:
    dsn = "postgresql://engine:s3cr3t-pw@127.0.0.1:1/app?connect_timeout=3"
    store = Store(dsn, origin=DsnOrigin("RECONCILER_DSN"))
    with pytest.raises(DatabaseUnavailable) as refused:
        await store.open()
    message = str(refused.value)
    assert message.startswith("cannot connect to PostgreSQL (user=engine dbname=app host=127.0.0.1 port=1, from ")
    assert message.endswith("; check RECONCILER_DSN") and "s3cr3t" not in message
    # A connection lost mid-statement (the listener's) is named the same way by the engine.
    lost = store.unavailable(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert str(lost).startswith("cannot connect to PostgreSQL (user=engine") and "s3cr3t" not in str(lost)
    assert store.unavailable(refused.value) is refused.value


def test_psycopgs_per_attempt_warnings_are_dropped_and_its_others_kept() -> None:
    def record(name: str, msg: str, error: object = "x") -> logging.LogRecord:
        return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, ("pool-1", error), None)

    noise = OutageNoise()
    assert not noise.filter(record("psycopg.pool", "error connecting in %r: %s"))
    assert not noise.filter(record("psycopg.pool", "discarding broken connection: %s"))
    assert noise.filter(record("psycopg.pool", "rolling back returned connection: %s"))
    lost = psycopg.OperationalError("the connection is lost")
    assert not noise.filter(record("psycopg", "error ignored terminating %r: %s", lost))
    assert noise.filter(record("psycopg", "error ignored terminating %r: %s", ValueError("a bug")))
    for name in ("psycopg.pool", "psycopg"):
        assert any(isinstance(f, OutageNoise) for f in logging.getLogger(name).filters)
