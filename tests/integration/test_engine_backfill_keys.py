"""One Idempotency-Key is never in flight twice: a backfill run (its occurrence's key) of an occurrence whose own run
is still in flight waits until that run has ended, then runs (`backfill --reprocess all`, `max_running_instances =
2`: a slot is free beside it). Against a real PostgreSQL and a real slow target on 127.0.0.1 that records each
request's key, start and end; an engine in-process with injected time. And the statements that find such runs stay
index reads however large the run history grows."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from aiohttp import web

from reconciler.db.store import QUERIES, Store
from reconciler.engine.claim import Report
from reconciler.engine.loop import Engine
from tests.builders import cli, cron
from tests.helpers import async_wait_until
from tests.integration.engine_support import next_run, setup
from tests.partitioning import scanned_whole

# The first request is held open until the test lets it go: long enough, on any machine, for a backfill queued
# meanwhile to be claimed (and, were it started, to reach the target beside it). A cap, not a wait.
HOLD_CAP_SECONDS = 60.0


@dataclass
class SlowTarget:
    """Records (Idempotency-Key, start, end) of every request; the first is answered only once `release` is set."""

    calls: list[tuple[str, float, float | None]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        place = len(self.calls)
        self.calls.append((request.headers["Idempotency-Key"], time.monotonic(), None))
        if place == 0:
            await asyncio.wait_for(self.release.wait(), HOLD_CAP_SECONDS)
        key, start, _ = self.calls[place]
        self.calls[place] = (key, start, time.monotonic())
        return web.Response(text="ok")

    def overlaps(self) -> list[tuple[str, float, float]]:
        """Pairs of requests with one key whose intervals overlap (an open request counts as open until now)."""
        found = []
        for n, (key, start, end) in enumerate(self.calls):
            for other, since, until in self.calls[n + 1 :]:
                if other == key and since < (end or time.monotonic()) and start < (until or time.monotonic()):
                    found.append((key, start, since))
        return found


def pending(dsn: str, task_id: str) -> int:
    """The task's runs still queued or running."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM scheduler.runs WHERE task_id = %s AND status IN ('queued', 'running')", (task_id,)
        ).fetchone()
    assert row is not None
    count: int = row[0]
    return count


async def test_backfill_reprocess_all_of_an_occurrence_in_flight_waits_for_it_and_never_overlaps_its_key(
    store: Store, dsn: str, engine: Engine, tmp_path: Path
) -> None:
    target = SlowTarget()
    app = web.Application()
    app.router.add_post("/slow", target.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # the port the kernel chose
    firing: set[asyncio.Task[Any]] = set()

    async def claim(at: datetime) -> Report:
        report = await engine.claim(at)
        firing.update(asyncio.create_task(engine.execute(run)) for run in report.runs)
        return report

    try:
        url, policy = f"http://127.0.0.1:{port}/slow", "max_running_instances = 2"
        task = cron(url, expr="0 * * * *", policy=policy, target="timeout_seconds = 90")
        await setup(store, tmp_path, {"slow": task})
        moment = next_run(dsn, "slow")
        assert moment is not None
        [scheduled] = (await claim(moment)).runs  # the occurrence's own run, its request held open
        assert await async_wait_until(lambda: len(target.calls) == 1, 30)
        until = (moment + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        since = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        code, _, err = await asyncio.to_thread(
            cli, dsn, None, "--actor", "alice", "backfill", "slow", "--from", since, "--to", until, "--reprocess", "all"
        )
        assert code == 0, err
        assert pending(dsn, "slow") == 2  # the scheduled run in flight, the backfill run queued

        # The backfill run has a free slot beside the run in flight, and waits all the same: no claim starts it,
        # and the engine does not spin on it (nothing it could start is queued).
        later = moment + timedelta(seconds=1)
        held = await claim(later)
        if held.runs:  # it started: its request reaches the target beside the first
            assert await async_wait_until(lambda: len(target.calls) == 2, 30)
        sleep = await engine.sleep_seconds(later)
        target.release.set()

        # Engines until idle: claim, fire, write the results, until nothing is queued or running.
        for step in range(2, 30):
            report = await claim(moment + timedelta(seconds=step))
            if firing:
                done, _ = await asyncio.wait(firing, return_when=asyncio.FIRST_COMPLETED)
                firing.difference_update(done)
                await engine.results.flush()
            elif not report.runs and not pending(dsn, "slow"):
                break
        else:
            raise AssertionError(f"not idle: {pending(dsn, 'slow')} run(s) queued or running")
    finally:
        target.release.set()
        await asyncio.gather(*firing, return_exceptions=True)
        await runner.cleanup()

    key = scheduled.key
    assert [call[0] for call in target.calls] == [key, key]  # the occurrence's run, then its backfill run
    assert target.overlaps() == [], target.calls
    assert held.runs == [] and sleep > 0
    first_end, second_start = target.calls[0][2], target.calls[1][1]
    assert first_end is not None and second_start >= first_end
    with psycopg.connect(dsn) as conn:
        kinds = conn.execute("SELECT kind, status FROM scheduler.runs WHERE task_id = 'slow' ORDER BY id").fetchall()
    assert kinds == [("scheduled", "succeeded"), ("backfill", "succeeded")]


def fill(dsn: str) -> None:
    """A history of 100,000 finished runs of 100 tasks, 50 runs in flight, and a 5,000-run backfill queued."""
    spec = '{"trigger": {"kind": "cron", "expr": "* * * * *"}, "target": {"url": "http://127.0.0.1:9/x"}}'
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, next_run_at) "
            "SELECT 't' || g, 'scale', %(spec)s::jsonb, md5(g::text), '2026-12-02 13:00Z' "
            "  FROM generate_series(1, 100) g",
            {"spec": spec},
        )
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, claimed_at, finished_at) "
            "SELECT 't' || (n % 100 + 1), '2026-01-01Z'::timestamptz + interval '1 minute' * n, 'scheduled', "
            "       CASE WHEN n > 99950 THEN 'running' ELSE 'succeeded' END, now(), "
            "       CASE WHEN n > 99950 THEN NULL ELSE now() END "
            "  FROM generate_series(1, 100000) n"
        )
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, claimed_at, backfill_id, hold_seconds) "
            "SELECT 't1', '2025-01-01Z'::timestamptz + interval '1 minute' * n, 'backfill', 'queued', now(), 1, 60 "
            "  FROM generate_series(1, 5000) n"
        )
        conn.execute("ANALYZE scheduler.tasks, scheduler.runs")


def plan(dsn: str, query: str, params: dict[str, Any]) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return "\n".join(str(row[0]) for row in conn.execute("EXPLAIN " + QUERIES[query], params))


async def test_the_statements_that_find_an_occurrence_in_flight_read_indexes_only(store: Store, dsn: str) -> None:
    fill(dsn)
    scope = {"now": None, "batch": 100, "sources": []}
    moment = datetime(2026, 1, 1, 12, tzinfo=UTC)
    occurrences = {"task_ids": [f"t{n}" for n in range(1, 101)], "scheduled": [moment] * 100}
    for query, params in [
        ("claim_queued", scope),
        ("nearest_due", scope),
        ("occurrences_in_flight", occurrences),
    ]:
        found = plan(dsn, query, params)
        assert scanned_whole(dsn, found) == [], f"{query}:\n{found}"
