"""Limits in the claim, with injected time (run_once(now)) against a real PostgreSQL and a real local HTTP server:
fair shares between tasks, occurrences that wait and then fire, missed for the limit past their grace, retries and
queued runs counted, and the state explain and the wake check read."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import psycopg

from reconciler.clock import FixedClock
from reconciler.db import command_queries, queries
from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from reconciler.output import views
from tests.builders import cron
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, next_run, runs, scrape, setup
from tests.integration.limits_support import add_limit, limit_row, refill_at, waiting


def keys(rec: Recorder, prefix: str = "/") -> list[str]:
    return [r.headers["Idempotency-Key"] for r in rec.paths(prefix)]


async def hourly_group(store: Store, tmp_path: Path, url: str, names: list[str], policy: str) -> datetime:
    """Tasks `names`, each calling `url`/NAME at the top of every hour with `policy`; the first hour after NOW."""
    await setup(store, tmp_path, {name: cron(f"{url}/{name}", "0 * * * *", policy) for name in names})
    return NOW + timedelta(hours=1)


async def test_a_task_with_two_due_runs_is_not_behind_all_forty_of_another(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await add_limit(store, "api", max_in_flight=2)
    limited = 'limits = ["api"]\ncoalesce = false\nmisfire_grace_seconds = 3600\n'
    files = {
        "many": cron(f"{url}/many", "* * * * *", policy=limited + "max_running_instances = 40"),
        "few": cron(f"{url}/few", "*/20 * * * *", policy=limited + "max_running_instances = 2"),
    }
    await setup(store, tmp_path, files)
    at = NOW + timedelta(minutes=40)  # `many` has 40 occurrences due (12:01 … 12:40), `few` two (12:20, 12:40)
    first = await engine.run_once(at)
    assert first.fired == 2
    assert sorted(keys(rec)) == ["few@2026-12-02T12:20:00Z", "many@2026-12-02T12:01:00Z"]
    assert waiting(dsn) == {"few": "api", "many": "api"}
    assert next_run(dsn, "many") == NOW + timedelta(minutes=2)  # the occurrence waiting stays due
    second = await engine.run_once(at + timedelta(seconds=1))
    assert second.fired == 2
    assert sorted(keys(rec)[2:]) == ["few@2026-12-02T12:40:00Z", "many@2026-12-02T12:02:00Z"]
    assert waiting(dsn) == {"many": "api"}  # `few` is done after two claims; a strict queue would take 20
    for n in range(19):
        assert (await engine.run_once(at + timedelta(seconds=2 + n))).fired == 2
    assert len(rec.paths("/many")) == 40 and len(rec.paths("/few")) == 2
    assert waiting(dsn) == {}
    assert {r["status"] for r in runs(dsn)} == {"succeeded"}
    assert len(runs(dsn)) == 42
    assert limit_row(dsn, "api")["delayed_total"] == 2  # each task waited once, however many claims it took


async def test_past_its_grace_an_occurrence_waiting_for_the_limit_is_missed_for_it(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await add_limit(store, "slow-api", rate_per_second=0.001, burst=1)  # one token per 1,000 s
    refill_at(dsn, "slow-api", NOW)
    policy = 'limits = ["slow-api"]'
    hour = await hourly_group(store, tmp_path, url, ["x", "y"], policy)
    report = await engine.run_once(hour)
    assert report.fired == 1 and report.missed == 0
    [(waiter, limit)] = waiting(dsn).items()
    assert limit == "slow-api"
    async with store.connection() as conn:
        [row] = await queries.nearest_due(conn, now=hour + timedelta(seconds=1), sources=[])
    # not due again at once (the engine would spin): when the grace ends, before the next token (1,000 s)
    assert row["next_run_at"] is not None and row["next_run_at"] > hour + timedelta(seconds=59)
    assert row["next_run_at"] < hour + timedelta(seconds=61)
    assert (await engine.run_once(hour + timedelta(seconds=30))).fired == 0  # still within its grace: still waiting
    assert waiting(dsn) == {waiter: "slow-api"}
    late = await engine.run_once(hour + timedelta(seconds=61))
    assert (late.fired, late.missed) == (0, 1)
    [missed] = [r for r in runs(dsn, waiter)]
    assert missed["status"] == "missed"
    assert "limit slow-api" in str(missed["error"]) and "misfire_grace_seconds = 60" in str(missed["error"])
    assert waiting(dsn) == {}
    assert next_run(dsn, waiter) == hour + timedelta(hours=1)
    assert len(rec.paths("/")) == 1
    row2 = limit_row(dsn, "slow-api")
    assert (row2["missed_total"], row2["delayed_total"]) == (1, 1)


async def test_a_rate_lets_burst_through_then_one_per_token(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await add_limit(store, "r", rate_per_second=2.0, burst=3)
    refill_at(dsn, "r", NOW)
    policy = 'limits = ["r"]\nmisfire_grace_seconds = 600'
    hour = await hourly_group(store, tmp_path, url, [f"t{i}" for i in range(10)], policy)
    assert (await engine.run_once(hour)).fired == 3  # the bucket was full (3), and no time passed since
    assert (await engine.run_once(hour + timedelta(seconds=0.4))).fired == 0  # 0.8 of a token
    assert (await engine.run_once(hour + timedelta(seconds=1))).fired == 2  # 2 tokens a second
    assert (await engine.run_once(hour + timedelta(seconds=3))).fired == 3  # 4 tokens, but the bucket holds 3
    assert (await engine.run_once(hour + timedelta(seconds=4))).fired == 2
    assert limit_row(dsn, "r")["tokens"] == 0.0
    assert len(rec.paths("/t")) == 10 and waiting(dsn) == {}


async def test_a_task_without_limits_is_not_held_up_by_tasks_waiting_for_one(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await add_limit(store, "one", max_in_flight=1)
    policy = 'limits = ["one"]\nmisfire_grace_seconds = 600'
    files = {f"g{i:02d}": cron(f"{url}/g", "0 * * * *", policy) for i in range(30)}
    files["free"] = cron(f"{url}/free", "1 * * * *")
    await setup(store, tmp_path, files)
    hour = NOW + timedelta(hours=1)
    await engine.run_once(hour)  # one fires, 29 wait
    assert len(waiting(dsn)) == 29
    engine.claimer.batch = 10  # the waiting tasks would fill every batch if the claim took them again
    # The limit has room again (the first run is over): a claim of 10 waiting tasks starts one; the next claim
    # (the engine claims again after a full batch) no longer takes the 28 still waiting, and finds `free`.
    first = await engine.claim(hour + timedelta(minutes=1))  # claimed, not fired: its run holds the limit
    assert (first.claimed_tasks, first.fired) == (10, 1)
    second = await engine.claim(hour + timedelta(minutes=1))
    assert (second.claimed_tasks, [run.task_id for run in second.runs]) == (1, ["free"])
    assert len(waiting(dsn)) == 28


async def test_explain_and_status_say_what_a_task_waits_for(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await add_limit(store, "billing-api", max_in_flight=1)
    policy = 'limits = ["billing-api"]\nmisfire_grace_seconds = 600'
    hour = await hourly_group(store, tmp_path, url, ["a", "b"], policy)
    report = await engine.claim(hour)  # claimed, not fired: its run holds the limit's one slot
    [running] = [run.task_id for run in report.runs]
    [waiter] = {"a", "b"} - {running}
    async with store.connection() as conn:
        lines = await views.explain_lines(conn, waiter, hour)
        [row] = [r for r in await command_queries.status_rows(conn) if r["id"] == waiter]
    text = "\n".join(lines)
    assert "limit billing-api: max_in_flight = 1 (1 running) — full: runs wait for room" in text
    assert "waiting for limit billing-api: its due occurrence starts when the limit has room" in text
    assert "→ due, waiting for limit billing-api" in text
    item = views.status_item(row, {}, hour, machine=True)
    assert item["waiting_for"] == "billing-api" and item["overdue"] is False


async def test_a_retry_takes_a_token_of_its_own(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/flaky", statuses=[503, 200])
    rec.script("/starved", statuses=[503, 200])
    await add_limit(store, "plenty", rate_per_second=1000.0, burst=1)
    await add_limit(store, "scarce", rate_per_second=0.001, burst=1)
    refill_at(dsn, "scarce", NOW + timedelta(days=36500))  # no token refills during the test
    retry = "retries = 1\nretry_backoff_seconds = 0\n"
    files = {
        "flaky": cron(f"{url}/flaky", "0 * * * *", retry + 'limits = ["plenty"]'),
        "starved": cron(f"{url}/starved", "0 * * * *", retry + 'limits = ["scarce"]'),
    }
    await setup(store, tmp_path, files)
    report = await engine.run_once(NOW + timedelta(hours=1))
    assert (report.fired, report.succeeded, report.failed) == (2, 1, 1)
    assert len(rec.paths("/flaky")) == 2  # the retry's token came (1,000 a second)
    assert len(rec.paths("/starved")) == 1  # none would come before the run's lease ends: not retried
    [starved] = runs(dsn, "starved")
    assert starved["status"] == "failed"
    assert "not sent: its rate limit had no token for it before the run's lease ends" in str(starved["error"])


async def test_the_metrics_show_each_limit(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path, metrics_url: str
) -> None:
    url, _ = http
    engine.clock = FixedClock(NOW + timedelta(hours=1, seconds=13))  # the gauges' now (the first run's lease lives)
    await add_limit(store, "one", max_in_flight=1, rate_per_second=0.001, burst=2)
    refill_at(dsn, "one", NOW + timedelta(days=36500))  # no token refills during the test
    policy = 'limits = ["one"]\nmisfire_grace_seconds = 10'
    hour = await hourly_group(store, tmp_path, url, ["t0", "t1", "t2"], policy)
    await engine.claim(hour)  # one starts (and holds its slot), two wait
    await engine.run_once(hour + timedelta(seconds=12))  # the two are missed for the limit
    expected = {
        "reconciler_limit_in_flight": 1.0,
        "reconciler_limit_tokens": 1.0,
        "reconciler_limit_waiting": 0.0,
        "reconciler_limit_delayed_total": 2.0,
        "reconciler_limit_missed_total": 2.0,
    }

    async def gauges() -> dict[str, float]:
        found = await scrape(metrics_url)  # none before the engine has taken the health lease
        return {name: found[name][0][1] for name in expected if name in found}

    async def read() -> bool:
        return await gauges() == expected

    assert await async_wait_until(read, 60, step=0.2), await gauges()
    found = await scrape(metrics_url)
    assert found["reconciler_limit_in_flight"][0][0] == {"source": "default", "limit": "one"}


async def test_manual_runs_count_and_wait_queued_until_the_limit_has_room(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await add_limit(store, "r", rate_per_second=0.5, burst=1)  # a token every 2 s
    refill_at(dsn, "r", NOW)
    await setup(store, tmp_path, {"m": cron(f"{url}/m", "0 0 1 1 *", 'limits = ["r"]\nmax_running_instances = 5')})
    with psycopg.connect(dsn) as conn:
        for _ in range(3):
            conn.execute(
                "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, claimed_at)"
                " VALUES ('m', %s, 'manual', 'queued', 0, %s)",
                (NOW, NOW),
            )
    assert (await engine.run_once(NOW + timedelta(seconds=10))).fired == 1  # the bucket holds one token
    async with store.connection() as conn:
        [row] = await queries.nearest_due(conn, now=NOW + timedelta(seconds=10), sources=[])
    assert row["queued"] is False  # the runs still queued do not wake the engine at once…
    assert row["next_run_at"] == NOW + timedelta(seconds=12)  # …but when the next token comes
    assert (await engine.run_once(NOW + timedelta(seconds=11))).fired == 0
    assert (await engine.run_once(NOW + timedelta(seconds=12))).fired == 1
    assert (await engine.run_once(NOW + timedelta(seconds=14))).fired == 1
    assert len(rec.paths("/m")) == 3
    assert [r["status"] for r in runs(dsn, "m")] == ["succeeded"] * 3


async def test_a_claim_with_a_limited_task_that_starts_nothing_goes_on(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await add_limit(store, "api", max_in_flight=5)
    files = {
        "stale": cron(f"{url}/stale", "0 * * * *", 'limits = ["api"]'),  # 120 s late, grace 60: missed
        "fresh": cron(f"{url}/fresh", "0 * * * *", 'limits = ["api"]\nmisfire_grace_seconds = 600'),
    }
    await setup(store, tmp_path, files)
    report = await engine.run_once(NOW + timedelta(hours=1, seconds=120))
    assert (report.fired, report.missed) == (1, 1)
    assert len(rec.paths("/fresh")) == 1 and waiting(dsn) == {}


async def test_a_task_in_two_limits_sleeps_until_both_have_room(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await add_limit(store, "wide", max_in_flight=10)
    await add_limit(store, "narrow", rate_per_second=0.1, burst=1)  # a token every 10 s
    refill_at(dsn, "narrow", NOW)
    hour = await hourly_group(
        store, tmp_path, url, ["a", "b"], 'limits = ["wide", "narrow"]\nmisfire_grace_seconds = 600'
    )
    assert (await engine.run_once(hour)).fired == 1  # the one token
    async with store.connection() as conn:
        [row] = await queries.nearest_due(conn, now=hour + timedelta(seconds=1), sources=[])
    # `wide` has room, `narrow` has none: not due at once (a claim would not take it), but at narrow's next token
    assert row["next_run_at"] == hour + timedelta(seconds=10) and row["queued"] is False
    assert (await engine.run_once(hour + timedelta(seconds=10))).fired == 1
