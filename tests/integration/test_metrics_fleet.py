"""`engine --metrics-addr` at fleet scale: bounded per-task series, a scrape off the event loop, a
/healthz of its own, process metrics, and one engine (the lease's holder) serving the fleet-wide gauges."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric

from reconciler import __version__
from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.targets.http import Firer
from reconciler.web.gauges import OUTBOX_GAUGES
from reconciler.web.metrics import OTHER_TASKS, Endpoint
from tests.builders import cron
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, metrics_endpoint, scrape, setup

FAST = 0.2  # refresh seconds in these tests: deletions and takeovers show within a second or two
PER_TASK = (
    "reconciler_task_failing",
    "reconciler_task_overdue_seconds",
    "reconciler_task_last_success_timestamp_seconds",
    "reconciler_task_next_run_timestamp_seconds",
)
FLEET_WIDE = (*PER_TASK, "reconciler_engine_last_seen_timestamp_seconds", "reconciler_task_health_age_seconds")


@contextlib.asynccontextmanager
async def endpoint(engine: Engine, store: Store, **options: object) -> AsyncIterator[tuple[Endpoint, str]]:
    served, url = await metrics_endpoint(engine, store, refresh_seconds=FAST, **options)
    try:
        yield served, url
    finally:
        await served.close()


def tasks_of(found: dict[str, list[tuple[dict[str, str], float]]], name: str) -> set[str]:
    return {labels["task"] for labels, _ in found.get(name, [])}


async def test_a_deleted_tasks_series_are_dropped(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await setup(store, tmp_path, {"kept": cron(f"{url}/k"), "gone": cron(f"{url}/g")})
    async with endpoint(engine, store) as (_, metrics_url):
        await engine.run_once(NOW + timedelta(minutes=5))

        async def series_are(expected: set[str]) -> bool:
            found = await scrape(metrics_url)
            each = [tasks_of(found, name) for name in ("reconciler_runs_total", *PER_TASK)]
            return all(tasks == expected for tasks in each)

        assert await async_wait_until(lambda: series_are({"kept", "gone"}), 60, step=0.1)
        with psycopg.connect(dsn) as conn:
            conn.execute("DELETE FROM scheduler.tasks WHERE id = 'gone'")
        assert await async_wait_until(lambda: series_are({"kept"}), 60, step=0.1)


async def test_per_task_series_are_bounded_by_the_task_limit(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    names = [f"t{n}" for n in range(5)]
    await setup(store, tmp_path, {name: cron(f"{url}/{name}") for name in names})
    async with endpoint(engine, store, task_limit=2) as (_, metrics_url):
        await engine.run_once(NOW + timedelta(minutes=5))

        async def bounded() -> bool:
            found = await scrape(metrics_url)
            runs = tasks_of(found, "reconciler_runs_total")
            gauges = [tasks_of(found, name) for name in PER_TASK]
            return len(runs - {OTHER_TASKS}) == 2 and OTHER_TASKS in runs and all(len(g) == 2 for g in gauges)

        assert await async_wait_until(bounded, 60, step=0.1)
        found = await scrape(metrics_url)
        with psycopg.connect(dsn) as conn:
            [(recorded,)] = conn.execute("SELECT count(*) FROM scheduler.runs").fetchall()
        assert sum(value for _, value in found["reconciler_runs_total"]) == recorded == 5  # none lost to the cap


class Blocking:
    """A collector that holds the scrape for half a second (as rendering a huge registry would)."""

    def __init__(self) -> None:
        self.inside = threading.Event()

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        self.inside.set()
        time.sleep(0.5)
        self.inside.clear()
        yield GaugeMetricFamily("test_blocking", "Held the scrape", value=1)


async def test_the_scrape_is_rendered_off_the_event_loop(store: Store, engine: Engine) -> None:
    async with endpoint(engine, store) as (served, metrics_url):
        blocking = Blocking()
        served.registry.register(blocking)
        turns_while_collecting = 0
        scraping = asyncio.create_task(scrape(metrics_url))
        while not scraping.done():  # bounded by the scrape, which ends
            turns_while_collecting += blocking.inside.is_set()
            await asyncio.sleep(0.01)
        assert (await scraping)["test_blocking"] == [({}, 1.0)]
    assert turns_while_collecting > 0  # on the loop, the collector would have let no turn pass


async def test_healthz_answers_503_within_a_second_when_the_database_hangs(store: Store, engine: Engine) -> None:
    with socket.socket() as silent:  # accepts connections (in its backlog) and never answers one
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        probe_dsn = f"host=127.0.0.1 port={port} dbname=x user=x"
        async with endpoint(engine, store, probe_dsn=probe_dsn) as (_, metrics_url), httpx.AsyncClient() as client:
            for path in ("/healthz", "/readyz"):
                started = time.monotonic()
                answer = await client.get(f"{metrics_url}{path}", timeout=10)
                assert (answer.status_code, answer.text) == (503, "database unreachable\n")
                assert time.monotonic() - started < 1.5


async def test_healthz_never_takes_a_connection_from_the_claims_pool(store: Store, engine: Engine) -> None:
    async with endpoint(engine, store) as (_, metrics_url), contextlib.AsyncExitStack() as held:
        for _ in range(store.pool.max_size):  # every pooled connection taken, as by busy claims
            await held.enter_async_context(store.pool.connection())
        async with httpx.AsyncClient() as client:
            for _ in range(3):  # opened once, then kept
                answer = await client.get(f"{metrics_url}/healthz", timeout=10)
                assert (answer.status_code, answer.text) == (200, "ok\n")


async def test_process_metrics_and_build_info_are_served(store: Store, engine: Engine) -> None:
    async with endpoint(engine, store) as (_, metrics_url):
        found = await scrape(metrics_url)
    assert found["reconciler_build_info"] == [({"version": __version__}, 1.0)]
    assert found["process_cpu_seconds_total"][0][1] > 0
    assert found["process_resident_memory_bytes"][0][1] > 0
    assert found["python_info"][0][0]["implementation"]


async def test_one_of_two_engines_serves_the_fleet_wide_gauges_and_the_other_takes_over(
    store: Store, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a"), "b": cron(f"{url}/b")})
    firers = [Firer(concurrency=2), Firer(concurrency=2)]
    engines = [Engine(store, EngineConfig(f"engine-{n}"), firer) for n, firer in enumerate(firers)]
    try:
        async with contextlib.AsyncExitStack() as stack:
            endpoints = [await stack.enter_async_context(endpoint(e, store)) for e in engines]
            urls = [metrics_url for _, metrics_url in endpoints]

            async def leaders(among: list[str]) -> list[str]:
                """The endpoints that say they lead and serve the fleet-wide gauges; the others must serve none."""
                leading = []
                for metrics_url in among:
                    found = await scrape(metrics_url)
                    [(_, leader)] = found["reconciler_health_leader"]
                    serves = {name for name in (*FLEET_WIDE, *(n for n, _, _ in OUTBOX_GAUGES)) if name in found}
                    if leader == 1.0 and tasks_of(found, "reconciler_task_failing") == {"a", "b"}:
                        leading.append(metrics_url)
                    elif leader == 1.0 or serves:
                        return ["(a leader not serving all, or a follower serving some)"] * 2
                return leading

            async def one_leads() -> bool:
                return len(await leaders(urls)) == 1

            assert await async_wait_until(one_leads, 60, step=0.1)
            [first] = await leaders(urls)
            await endpoints[urls.index(first)][0].close()  # as if it died: its lease is not given back
            [other] = [u for u in urls if u != first]

            async def taken_over() -> bool:
                return await leaders([other]) == [other]

            assert await async_wait_until(taken_over, 60, step=0.1)
    finally:
        for firer in firers:
            await firer.close()
        for engine in engines:
            await engine.deliverer.close()


async def test_the_per_task_families_are_rendered_once_per_read(
    store: Store, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await setup(store, tmp_path, {"a": cron(f"{url}/a"), "b": cron(f"{url}/b")})
    async with endpoint(engine, store) as (served, metrics_url):
        health = served.metrics.health

        async def read_and_served() -> bool:
            return tasks_of(await scrape(metrics_url), PER_TASK[0]) == {"a", "b"}

        assert await async_wait_until(read_and_served, 60, step=0.1)
        first = health.task_text()  # no await in between: no read in between
        assert health.task_text() is first and b'task="a"' in first  # the same text, not rendered again
        read_at = health.read_at
        assert await async_wait_until(lambda: health.read_at != read_at, 60, step=0.05)
        assert health.task_text() is not first  # a new read: rendered again
