"""Read commands behind a lock or past a timeout: one line naming the timeout, exit 1, within the bound.

A second connection holds an ACCESS EXCLUSIVE lock on the table the command reads (a migration's
lock); the command's connection gets a small timeout through the DSN's `options`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from reconciler.db.store import READ_LOCK_SECONDS, READ_STATEMENT_SECONDS, Store
from tests.builders import cli

# command line → the table it reads first, and the named query that waits for it
READS = {
    ("status",): ("tasks", "status_rows"),
    ("runs", "t1"): ("runs", "runs_list"),
    ("explain", "t1"): ("tasks", "task_get"),
    ("history",): ("applies", "applies_list"),
    ("notifications",): ("notifications", "notifications_list"),
}


@contextmanager
def locked(dsn: str, table: str) -> Iterator[None]:
    """scheduler.TABLE locked ACCESS EXCLUSIVE by another session until the block ends."""
    with psycopg.connect(dsn) as holder:
        holder.execute(sql.SQL("LOCK scheduler.{} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table)))
        yield
        holder.rollback()


def run_locked(dsn: str, tmp_path: Path, args: tuple[str, ...], option: str) -> tuple[int, str, float]:
    """ARGS run with `-c OPTION` while the table they read is locked: (exit code, stderr, seconds)."""
    tasks = tmp_path / "tasks.d"
    tasks.mkdir(exist_ok=True)
    assert cli(dsn, tasks, "db", "init")[0] == 0
    table, _ = READS[args]
    with locked(dsn, table):
        start = time.monotonic()
        code, _, err = cli(f"{dsn} options='-c {option}'", tasks, *args)
        return code, err, time.monotonic() - start


@pytest.mark.parametrize("args", sorted(READS))
def test_a_read_past_statement_timeout_says_so_in_one_line(args: tuple[str, ...], dsn: str, tmp_path: Path) -> None:
    code, err, took = run_locked(dsn, tmp_path, args, "statement_timeout=300ms")
    _, query = READS[args]
    assert code == 1
    assert err.strip().splitlines() == [
        f"error: query {query} timed out after 0.3 s (statement_timeout): the database is busy; "
        "retry, or allow it longer (PGOPTIONS='-c statement_timeout=120s')"
    ], err
    assert "cannot connect" not in err
    assert took < READ_LOCK_SECONDS, took  # the statement's bound, not the lock wait's


@pytest.mark.parametrize("args", sorted(READS))
def test_a_read_behind_a_lock_gives_up_after_lock_timeout(args: tuple[str, ...], dsn: str, tmp_path: Path) -> None:
    code, err, took = run_locked(dsn, tmp_path, args, "lock_timeout=300ms")
    table, _ = READS[args]
    assert code == 1
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: waiting for a lock on scheduler.{table}"), line
    assert " for 0.3 s (lock_timeout): another session holds it" in line, line
    assert took < READ_LOCK_SECONDS, took


async def test_reads_are_bounded_by_default_and_keep_bounds_set_elsewhere(store: Store, dsn: str) -> None:
    async with store.reading() as conn:
        cursor = await conn.execute(
            "SELECT current_setting('lock_timeout') AS l, current_setting('statement_timeout') AS s"
        )
        assert await cursor.fetchone() == {"l": f"{READ_LOCK_SECONDS:g}s", "s": f"{READ_STATEMENT_SECONDS:g}s"}
    async with store.connection() as conn:  # SET LOCAL: gone with the read's transaction
        cursor = await conn.execute("SELECT current_setting('lock_timeout') AS l")
        assert await cursor.fetchone() == {"l": "0"}
    async with Store(f"{dsn} options='-c statement_timeout=7s'") as bounded, bounded.reading() as conn:
        cursor = await conn.execute("SELECT current_setting('statement_timeout') AS s")
        assert await cursor.fetchone() == {"s": "7s"}
