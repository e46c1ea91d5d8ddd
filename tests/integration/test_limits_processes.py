"""Limits across real engine processes: three replicas share one limit through the database alone."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from reconciler.db.store import Store
from reconciler.files.tasks import load_dir
from reconciler.reconcile.apply import apply_tasks
from tests.builders import soon, start_engines, stop, wait_registered
from tests.helpers import finished_runs, leases, wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import runs
from tests.integration.limits_support import add_limit, waiting


def write_group(root: Path, url: str, count: int, due: str, limit: str) -> Path:
    """`count` once-tasks due at `due`, all calling `url` and counted against `limit`."""
    tasks = root / "tasks"
    tasks.mkdir()
    for i in range(count):
        (tasks / f"t{i:02d}.toml").write_text(
            f'[trigger]\nkind = "once"\nat = {due}\n[target]\nurl = "{url}"\ntimeout_seconds = 10\n'
            f'[policy]\nmisfire_grace_seconds = 300\nlimits = ["{limit}"]\n'
        )
    return tasks


def busiest_second(times: list[float]) -> int:
    """The most requests in any window of one second (each window starting at a request)."""
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t < start + 1.0) for i, start in enumerate(times))


async def fire_group(store: Store, dsn: str, tmp_path: Path, url: str, count: int, limit: str) -> None:
    """Three engine processes fire `count` once-tasks, all due at one second and counted against `limit`."""
    procs = start_engines(dsn, [f"{limit}-0", f"{limit}-1", f"{limit}-2"], tmp_path)
    try:
        tasks = write_group(tmp_path, url, count, soon(wait_registered(dsn, procs), 1), limit)
        await apply_tasks(store, load_dir(tasks, "tasks.d").tasks, "default", datetime.now(UTC))
        assert wait_until(lambda: finished_runs(dsn) >= count, 120), f"only {finished_runs(dsn)} runs finished"
    finally:
        results = stop(procs)
    assert [code for code, _ in results] == [0, 0, 0], [err[-2000:] for _, err in results]
    assert {r["status"] for r in runs(dsn)} == {"succeeded"} and len(runs(dsn)) == count
    assert leases(dsn) == 0


async def test_three_engines_never_exceed_max_in_flight_and_fire_each_once(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/group", delay=0.5)
    await add_limit(store, "billing-api", max_in_flight=4)
    await fire_group(store, dsn, tmp_path, f"{url}/group", 50, "billing-api")
    sent = Counter(r.headers["Idempotency-Key"] for r in rec.paths("/group"))
    assert len(sent) == 50 and set(sent.values()) == {1}  # each exactly once
    assert rec.max_in_flight["/group"] <= 4, rec.max_in_flight  # never more than 4 at once, across 3 engines
    assert rec.max_in_flight["/group"] == 4  # and the limit was the bound, not something else
    print(f"\n50 runs, 3 engines, max_in_flight = 4: at most {rec.max_in_flight['/group']} in flight at the target")


async def test_three_engines_keep_to_the_rate_in_every_second(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await add_limit(store, "rated", rate_per_second=5.0)  # burst: 5
    await fire_group(store, dsn, tmp_path, f"{url}/rated", 20, "rated")
    times = [r.at for r in rec.paths("/rated")]
    assert len(times) == 20
    worst = busiest_second(times)
    assert worst <= 5 + 5, worst  # rate × 1 s + burst
    spread = max(times) - min(times)
    assert spread >= (20 - 5) / 5 - 0.5, spread  # the 15 after the burst came at 5 a second (3 s), not at once
    print(f"\n20 runs, 3 engines, rate 5/s burst 5: busiest second {worst} requests, spread over {spread:.2f} s")


async def test_a_killed_engines_slot_comes_back_when_its_lease_expires(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/hang", delay=20)  # never answers within the run's timeout
    await add_limit(store, "one", max_in_flight=1)
    margin = ("--lease-margin", "2")  # a lease is the 3 s timeout and 2 s
    [first] = start_engines(dsn, ["killed"], tmp_path, *margin)
    later = None
    try:
        registered_at = wait_registered(dsn, [first])
        tasks = tmp_path / "tasks"
        tasks.mkdir()
        for name, offset in (("hang", 1), ("next", 2)):  # `hang` is due first and takes the one slot
            (tasks / f"{name}.toml").write_text(
                f'[trigger]\nkind = "once"\nat = {soon(registered_at, offset)}\n[target]\nurl = "{url}/{name}"\n'
                'timeout_seconds = 3\n[policy]\nmisfire_grace_seconds = 300\nlimits = ["one"]\n'
            )
        await apply_tasks(store, load_dir(tasks, "tasks.d").tasks, "default", datetime.now(UTC))
        assert wait_until(lambda: rec.in_flight.get("/hang", 0) == 1, 60), "the first request never started"
        assert wait_until(lambda: "next" in waiting(dsn), 30), "the second task never waited for the limit"
        first.proc.kill()  # SIGKILL while it holds the limit's one slot
        first.proc.wait(timeout=30)
        [later] = start_engines(dsn, ["later"], tmp_path, *margin)
        assert wait_until(lambda: len(rec.paths("/next")) == 1, 60), "the slot never came back"
    finally:
        stop([later] if later is not None else [])
    [hung] = runs(dsn, "hang")
    [fired] = runs(dsn, "next")
    assert hung["status"] == "lost" and fired["status"] == "succeeded"
    with psycopg.connect(dsn) as conn:
        [(waited,)] = conn.execute(  # by the database's clock: when `next` was claimed, after `hang` was
            "SELECT extract(epoch FROM n.claimed_at - h.claimed_at)::float8 FROM scheduler.runs n, scheduler.runs h"
            " WHERE n.task_id = 'next' AND h.task_id = 'hang'"
        ).fetchall()
    assert waited >= 3 + 2, waited  # not before the lease (timeout + margin) had expired
    print(f"\nthe killed engine's slot came back after {waited:.1f} s (lease: 3 s timeout + 2 s margin)")
