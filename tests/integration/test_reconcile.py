"""SPEC §3 on a real PostgreSQL: each test fails if its rule breaks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from reconciler.db.store import QUERIES, Store
from reconciler.errors import DatabaseRefused
from reconciler.files.tasks import Task, load_dir
from reconciler.reconcile.apply import ApplyOptions, PlanRefused, apply_tasks, read_plan
from tests.builders import cron_trigger, task_text, write_tasks
from tests.helpers import async_wait_until

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def task_file(expr: str = "0 * * * *", extra: str = "", zone: str = "UTC", enabled: bool = True) -> str:
    top = f'timezone = "{zone}"\nenabled = {str(enabled).lower()}\n{extra}'.rstrip("\n")
    return task_text(top, trigger=cron_trigger(expr))


def load(root: Path, files: dict[str, str]) -> list[Task]:
    result = load_dir(write_tasks(root, files, replace=True), "tasks.d")
    assert result.errors == []
    return result.tasks


def rows(dsn: str) -> dict[str, tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        got = conn.execute("SELECT id, source, enabled, next_run_at, spec_hash FROM scheduler.tasks").fetchall()
    return {r[0]: r[1:] for r in got}


def add_run(dsn: str, task_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status) "
            "VALUES (%s, %s, 'scheduled', 'succeeded')",
            (task_id, NOW - timedelta(hours=1)),
        )


def run_task_ids(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT task_id FROM scheduler.runs ORDER BY id")]


async def test_create_sets_next_run_from_now(store: Store, dsn: str, tmp_path: Path) -> None:
    result = await apply_tasks(store, load(tmp_path, {"a": task_file("15 * * * *")}), "default", NOW)
    assert result.written == 1
    assert rows(dsn)["a"][2] == datetime(2026, 12, 2, 12, 15, tzinfo=UTC)


async def test_change_without_trigger_keeps_next_run_and_history(store: Store, dsn: str, tmp_path: Path) -> None:
    await apply_tasks(store, load(tmp_path, {"a": task_file()}), "default", NOW)
    add_run(dsn, "a")
    later = NOW + timedelta(minutes=30)
    tasks = load(tmp_path, {"a": task_file(extra='description = "now described"')})
    result = await apply_tasks(store, tasks, "default", later)
    assert [c.op for c in result.plan.changes] == ["update"]
    assert [f.path for f in result.plan.changes[0].fields] == ["description"]
    assert rows(dsn)["a"][2] == datetime(2026, 12, 2, 13, 0, tzinfo=UTC)  # from NOW, not recomputed
    assert run_task_ids(dsn) == ["a"]


async def test_trigger_change_recomputes_from_now(store: Store, dsn: str, tmp_path: Path) -> None:
    await apply_tasks(store, load(tmp_path, {"a": task_file("0 0 * * *")}), "default", NOW)
    assert rows(dsn)["a"][2] == datetime(2026, 12, 3, 0, 0, tzinfo=UTC)
    later = NOW + timedelta(hours=2)
    await apply_tasks(store, load(tmp_path, {"a": task_file("30 * * * *")}), "default", later)
    assert rows(dsn)["a"][2] == datetime(2026, 12, 2, 14, 30, tzinfo=UTC)


async def test_timezone_change_recomputes(store: Store, dsn: str, tmp_path: Path) -> None:
    await apply_tasks(store, load(tmp_path, {"a": task_file("0 18 * * *")}), "default", NOW)
    await apply_tasks(store, load(tmp_path, {"a": task_file("0 18 * * *", zone="Europe/Berlin")}), "default", NOW)
    assert rows(dsn)["a"][2] == datetime(2026, 12, 2, 17, 0, tzinfo=UTC)


async def test_disable_then_enable_recomputes_from_now_without_catchup(store: Store, dsn: str, tmp_path: Path) -> None:
    await apply_tasks(store, load(tmp_path, {"a": task_file()}), "default", NOW)
    await apply_tasks(store, load(tmp_path, {"a": task_file(enabled=False)}), "default", NOW)
    assert rows(dsn)["a"][1:3] == (False, None)
    much_later = NOW + timedelta(days=3, minutes=10)
    await apply_tasks(store, load(tmp_path, {"a": task_file()}), "default", much_later)
    assert rows(dsn)["a"][1:3] == (True, datetime(2026, 12, 5, 13, 0, tzinfo=UTC))


async def test_moved_from_keeps_next_run_and_history(store: Store, dsn: str, tmp_path: Path) -> None:
    await apply_tasks(store, load(tmp_path, {"old": task_file()}), "default", NOW)
    add_run(dsn, "old")
    before = rows(dsn)["old"][2]
    tasks = load(tmp_path, {"team/new": task_file(extra='moved_from = "old"')})
    result = await apply_tasks(store, tasks, "default", NOW + timedelta(minutes=45))
    assert [(c.op, c.id, c.moved_from) for c in result.plan.changes] == [("move", "team/new", "old")]
    assert set(rows(dsn)) == {"team/new"}
    assert rows(dsn)["team/new"][2] == before
    assert run_task_ids(dsn) == ["team/new"]
    # The next plan with the same files is a no-op: moved_from pointing at a gone row is harmless.
    plan = await read_plan(store, tasks, "default", NOW)
    assert not plan.has_changes


async def test_prune_deletes_missing_keeps_history(store: Store, dsn: str, tmp_path: Path) -> None:
    files = {f"t{i}": task_file() for i in range(8)}
    await apply_tasks(store, load(tmp_path, files), "default", NOW)
    add_run(dsn, "t7")
    del files["t7"]
    result = await apply_tasks(store, load(tmp_path, files), "default", NOW)
    assert [c.id for c in result.plan.changes if c.op == "delete"] == ["t7"]
    assert "t7" not in rows(dsn)
    assert run_task_ids(dsn) == ["t7"]


async def test_no_prune_keeps_missing(store: Store, dsn: str, tmp_path: Path) -> None:
    await apply_tasks(store, load(tmp_path, {"a": task_file(), "b": task_file()}), "default", NOW)
    await apply_tasks(store, load(tmp_path, {"a": task_file()}), "default", NOW, ApplyOptions(prune=False))
    assert set(rows(dsn)) == {"a", "b"}


async def test_delete_everything_refuses_without_allow_empty(store: Store, dsn: str, tmp_path: Path) -> None:
    await apply_tasks(store, load(tmp_path, {"a": task_file(), "b": task_file()}), "default", NOW)
    with pytest.raises(PlanRefused, match="--allow-empty"):
        await apply_tasks(store, [], "default", NOW)
    assert set(rows(dsn)) == {"a", "b"}
    await apply_tasks(store, [], "default", NOW, ApplyOptions(allow_empty=True))
    assert rows(dsn) == {}


async def test_max_deletes_refuses_with_the_list(store: Store, dsn: str, tmp_path: Path) -> None:
    files = {f"t{i}": task_file() for i in range(8)}
    await apply_tasks(store, load(tmp_path, files), "default", NOW)
    keep = {k: v for k, v in files.items() if k not in ("t5", "t6", "t7")}
    with pytest.raises(PlanRefused) as info:  # default: 25 % of 8 = 2
        await apply_tasks(store, load(tmp_path, keep), "default", NOW)
    assert "t5, t6, t7" in str(info.value) and "--max-deletes 2" in str(info.value)
    assert len(rows(dsn)) == 8
    await apply_tasks(store, load(tmp_path, keep), "default", NOW, ApplyOptions(max_deletes=3))
    assert len(rows(dsn)) == 5


async def test_other_source_is_a_conflict_and_untouched(store: Store, dsn: str, tmp_path: Path) -> None:
    await apply_tasks(store, load(tmp_path, {"shared": task_file(), "mine": task_file()}), "team-a", NOW)
    before = rows(dsn)
    tasks = load(tmp_path, {"shared": task_file("5 * * * *")})
    with pytest.raises(PlanRefused, match="owned by source 'team-a'"):
        await apply_tasks(store, tasks, "team-b", NOW)
    assert rows(dsn) == before
    # A source's prune never deletes another source's rows.
    await apply_tasks(store, load(tmp_path, {"other": task_file()}), "team-b", NOW)
    assert {k: v[0] for k, v in rows(dsn).items()} == {"shared": "team-a", "mine": "team-a", "other": "team-b"}


async def test_stale_saved_plan_is_refused(store: Store, dsn: str, tmp_path: Path) -> None:
    tasks = load(tmp_path, {"a": task_file()})
    plan = await read_plan(store, tasks, "default", NOW)
    await apply_tasks(store, load(tmp_path, {"b": task_file()}), "default", NOW)  # someone else applied
    with pytest.raises(PlanRefused, match="database changed"):
        await apply_tasks(store, tasks, "default", NOW, ApplyOptions(expect_state=plan.state_fingerprint))
    plan = await read_plan(store, tasks, "default", NOW)
    changed = load(tmp_path, {"a": task_file("1 * * * *")})
    with pytest.raises(PlanRefused, match="task files changed"):
        await apply_tasks(store, changed, "default", NOW, ApplyOptions(expect_files=plan.files_fingerprint))
    fresh = await read_plan(store, tasks, "default", NOW)
    options = ApplyOptions(expect_state=fresh.state_fingerprint, expect_files=fresh.files_fingerprint)
    result = await apply_tasks(store, tasks, "default", NOW, options)
    assert result.written == 2  # create a, delete b


async def test_drift_is_detected_and_restored(store: Store, dsn: str, tmp_path: Path) -> None:
    tasks = load(tmp_path, {"a": task_file()})
    await apply_tasks(store, tasks, "default", NOW)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{target,url}', '\"http://evil.example/\"')")
    plan = await read_plan(store, tasks, "default", NOW)
    [change] = plan.changes
    assert change.op == "update" and change.drift
    assert [(f.path, f.old) for f in change.fields] == [("target.url", "http://evil.example/")]
    assert plan.summary["drift"] == 1
    await apply_tasks(store, tasks, "default", NOW)
    after = await read_plan(store, tasks, "default", NOW)
    assert not after.has_changes and after.summary["drift"] == 0


async def test_drift_of_enabled_column(store: Store, dsn: str, tmp_path: Path) -> None:
    tasks = load(tmp_path, {"a": task_file()})
    await apply_tasks(store, tasks, "default", NOW)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE scheduler.tasks SET enabled = false")
    plan = await read_plan(store, tasks, "default", NOW)
    assert plan.changes[0].drift and plan.changes[0].op == "update"


async def _listen(dsn: str) -> psycopg.AsyncConnection[object]:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await conn.execute("LISTEN scheduler_tasks")
    return conn


async def _drain(conn: psycopg.AsyncConnection[object]) -> list[str]:
    """Every notification delivered before a sentinel sent now (delivery follows commit order)."""
    sentinel = f"sentinel-{id(conn)}"
    async with await psycopg.AsyncConnection.connect(conn.info.dsn, autocommit=True) as other:
        await other.execute("SELECT pg_notify('scheduler_tasks', %s)", (sentinel,))
    got: list[str] = []
    async for note in conn.notifies(timeout=60):
        if note.payload == sentinel:
            return got
        got.append(note.payload)
    raise AssertionError(f"the sentinel notification never arrived; got {got}")


async def test_one_notify_per_apply_and_none_for_noop(store: Store, dsn: str, tmp_path: Path) -> None:
    listener = await _listen(dsn)
    try:
        tasks = load(tmp_path, {"a": task_file(), "b": task_file()})
        await apply_tasks(store, tasks, "default", NOW)
        first = await _drain(listener)
        assert len(first) == 1
        assert json.loads(first[0]) == {"source": "default", "count": 2, "ids": ["a", "b"]}
        result = await apply_tasks(store, tasks, "default", NOW)
        assert result.written == 0
        assert await _drain(listener) == []
    finally:
        await listener.close()


def applies(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM scheduler.applies").fetchone()
    return int(row[0]) if row else 0


async def test_noop_apply_writes_nothing(store: Store, dsn: str, tmp_path: Path) -> None:
    tasks = load(tmp_path, {"a": task_file()})
    await apply_tasks(store, tasks, "default", NOW)
    with psycopg.connect(dsn) as conn:
        before = conn.execute("SELECT xmin::text, updated_at FROM scheduler.tasks").fetchall()
    assert applies(dsn) == 1
    await apply_tasks(store, tasks, "default", NOW + timedelta(hours=1))
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT xmin::text, updated_at FROM scheduler.tasks").fetchall() == before
    assert applies(dsn) == 1  # not even the audit row


def _lock_waiters(dsn: str, kinds: tuple[str, ...] = ("advisory",)) -> int:
    """Backends waiting for a lock of these kinds (a row lock: "transactionid" or "tuple")."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = ANY(%s) AND NOT l.granted AND a.datname = current_database()",
            (list(kinds),),
        ).fetchone()
    return int(row[0]) if row else 0


async def _hold_claim(dsn: str, due: datetime, advanced: datetime) -> psycopg.AsyncConnection[object]:
    """An engine's claim of every due task, its transaction left open: the rows stay locked, advanced."""
    claim = await psycopg.AsyncConnection.connect(dsn)
    claimed = await (await claim.execute(QUERIES["claim_due"], {"now": due, "sources": [], "batch": 10})).fetchall()
    ids = [str(row[0]) for row in claimed]
    await claim.execute(
        QUERIES["tasks_advance"], {"ids": ids, "nexts": [advanced] * len(ids), "waits": [None] * len(ids)}
    )
    return claim


async def test_an_apply_keeps_the_next_run_an_engine_advanced_meanwhile(store: Store, dsn: str, tmp_path: Path) -> None:
    """The plan reads the row, the claim commits its advance, then the apply writes: the advance stays."""
    await apply_tasks(store, load(tmp_path, {"a": task_file()}), "default", NOW)
    due = NOW + timedelta(hours=1)
    advanced = due + timedelta(hours=1)
    claim = await _hold_claim(dsn, due, advanced)
    described = load(tmp_path, {"a": task_file(extra='description = "described"')})
    applying = asyncio.create_task(apply_tasks(store, described, "default", due))
    try:
        assert await async_wait_until(lambda: _lock_waiters(dsn, ("transactionid", "tuple")) == 1, 30)
    finally:
        await claim.commit()
        await claim.close()
    result = await applying
    assert [(c.op, [f.path for f in c.fields]) for c in result.plan.changes] == [("update", ["description"])]
    assert result.plan.changes[0].row is not None and result.plan.changes[0].row.next_run_at == due  # what it read
    assert rows(dsn)["a"][2] == advanced


async def test_a_retime_is_from_the_database_clock_once_the_claim_holding_the_row_committed(
    store: Store, dsn: str, tmp_path: Path
) -> None:
    """A retime waits for the row's lock, then reads the database's clock: a `once` that passed while
    a claim held the row is in the past for the apply (never fires), not due at its commit."""
    await apply_tasks(store, load(tmp_path, {"a": task_file("* * * * *")}), "default")
    far = datetime(2100, 1, 1, tzinfo=UTC)
    claim = await _hold_claim(dsn, far, far)

    async def database_now() -> datetime:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            row = await (await conn.execute("SELECT clock_timestamp()")).fetchone()
        assert row is not None
        moment: datetime = row[0]
        return moment

    at = await database_now() + timedelta(seconds=1)
    once = f'[trigger]\nkind = "once"\nat = "{at.isoformat()}"\n[target]\nurl = "http://127.0.0.1:9/hook"\n'
    applying = asyncio.create_task(apply_tasks(store, load(tmp_path, {"a": once}), "default"))
    try:
        assert await async_wait_until(lambda: _lock_waiters(dsn, ("transactionid", "tuple")) == 1, 30)
        assert await async_wait_until(lambda: _passed(database_now, at), 30)
    finally:
        await claim.commit()
        await claim.close()
    result = await applying
    assert [c.op for c in result.plan.changes] == ["update"] and result.plan.changes[0].retime
    assert rows(dsn)["a"][1:3] == (True, None)  # computed from before the lock, it would be `at`, due at once


async def _passed(clock: Callable[[], Awaitable[datetime]], at: datetime) -> bool:
    return await clock() > at


async def test_concurrent_applies_serialize(store: Store, dsn: str, tmp_path: Path) -> None:
    """Two applies wait for one lock; the second plans against the first's committed result.

    Which one wins the lock is not guaranteed, so the test accepts either order and checks the
    final state is exactly the later apply's files, as if it had run alone after the other.
    """
    sets = {"two": ["a", "b"], "three": ["a", "b", "c"]}
    tasks = {name: load(tmp_path / name, {i: task_file() for i in ids}) for name, ids in sets.items()}
    holder = await psycopg.AsyncConnection.connect(dsn)
    await holder.execute("SELECT pg_advisory_xact_lock(%s)", (0x7265636F6E63,))  # hold the apply lock
    applies = {
        "two": asyncio.create_task(apply_tasks(store, tasks["two"], "default", NOW)),
        "three": asyncio.create_task(apply_tasks(store, tasks["three"], "default", NOW)),
    }
    assert await async_wait_until(lambda: _lock_waiters(dsn) == 2, 30), "the applies never queued on the lock"
    assert not any(a.done() for a in applies.values())  # both blocked on the lock, nothing half-applied
    assert rows(dsn) == {}
    await holder.rollback()
    await holder.close()
    results = {name: await task for name, task in applies.items()}
    # The later apply is the one that saw the earlier one's rows as unchanged.
    later = max(results, key=lambda name: results[name].plan.summary["noop"])
    earlier = "three" if later == "two" else "two"
    assert results[earlier].plan.summary["create"] == len(sets[earlier])
    assert results[later].plan.summary["noop"] == 2  # a and b, created by the earlier apply
    assert set(rows(dsn)) == set(sets[later])


async def test_failed_apply_changes_nothing(store: Store, dsn: str, tmp_path: Path) -> None:
    await apply_tasks(store, load(tmp_path, {"a": task_file()}), "default", NOW)
    before = rows(dsn)
    tasks = load(tmp_path, {"a": task_file("5 * * * *"), "b": task_file()})
    with psycopg.connect(dsn, autocommit=True) as conn:  # make the insert of b fail mid-transaction
        conn.execute("ALTER TABLE scheduler.tasks ADD CONSTRAINT no_b CHECK (id <> 'b')")
    with pytest.raises(DatabaseRefused) as refused:  # translated at the database's door (db/errors.py)
        await apply_tasks(store, tasks, "default", NOW)
    assert refused.value.sqlstate == "23514"  # check_violation
    assert rows(dsn) == before
