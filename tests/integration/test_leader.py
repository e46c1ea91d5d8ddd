"""Leases on fleet-wide work (scheduler.leader): one holder at a time, taken over once it runs out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import psycopg

from reconciler.db.store import Store
from reconciler.engine.leader import Lease, leader_only
from tests.helpers import async_wait_until


async def test_one_engine_leads_and_another_takes_over_once_the_lease_runs_out(store: Store, dsn: str) -> None:
    first, second = Lease(store, "work", "engine-a", seconds=1.0), Lease(store, "work", "engine-b", seconds=1.0)
    assert await first.renew() and first.held
    assert not await second.renew() and not second.held
    assert await first.renew()  # renewed by its holder
    assert await async_wait_until(second.renew, 30, step=0.1)  # first stopped renewing: its lease ran out
    assert second.held and not await first.renew() and not first.held
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT name, engine_id, expires_at > now() FROM scheduler.leader").fetchall()
    assert rows == [("work", "engine-b", True)]


async def test_leases_of_different_work_are_independent(store: Store) -> None:
    assert await Lease(store, "late scan", "engine-a").renew()
    assert await Lease(store, "metrics *", "engine-b").renew()
    assert not await Lease(store, "late scan", "engine-b").renew()


async def test_leader_only_runs_the_work_on_the_holder_alone(store: Store) -> None:
    done: list[str] = []

    def job(engine: str) -> Callable[[], Awaitable[object]]:
        async def work() -> None:
            done.append(engine)

        return leader_only(store, engine, "late scan", work)

    first, second = job("engine-a"), job("engine-b")
    for _ in range(3):
        await first()
        await second()
    assert done == ["engine-a"] * 3
