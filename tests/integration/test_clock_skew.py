"""Replicas whose clocks disagree: real engine processes, one 120 s fast and one 40 s slow under libfaketime
(Debian's `faketime`, installed by .ci/run), beside one on time. The database's clock decides: no request
arrives before its scheduled time, max_running_instances holds, no live run is called lost, nothing is
missed early, and each engine's offset from the database shows in its metrics."""

from __future__ import annotations

import glob
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from reconciler.db.store import Store
from reconciler.files.tasks import load_dir
from reconciler.reconcile.apply import apply_tasks
from tests.builders import listening_addr, soon, start_engines, stop, wait_registered
from tests.helpers import wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import scrape

FAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
pytestmark = pytest.mark.skipif(not FAKETIME, reason="libfaketime is not installed (apt-get install faketime)")
GRACE = 10


def skewed(seconds: int) -> dict[str, str]:
    """The environment that sets an engine process's clock `seconds` off (the database's is not touched)."""
    return {"LD_PRELOAD": FAKETIME[0], "FAKETIME": f"{seconds:+d}s", "FAKETIME_NO_CACHE": "1"}


def run_rows(dsn: str) -> list[tuple[str, str, datetime, datetime | None, str | None, str | None]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT task_id, status, scheduled_for, claimed_at, engine_id, error FROM scheduler.runs ORDER BY id"
        ).fetchall()


async def test_engines_whose_clocks_disagree_by_minutes_follow_the_database_clock(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/slow", delay=3.0)
    logs = tmp_path / "logs"
    logs.mkdir()
    engines = [
        *start_engines(dsn, ["on-time"], logs),
        *start_engines(dsn, ["fast"], logs, "--metrics-addr", "127.0.0.1:0", env=skewed(120)),
        *start_engines(dsn, ["slow"], logs, env=skewed(-40)),
    ]
    tasks = tmp_path / "tasks.d"
    tasks.mkdir()
    try:
        registered = wait_registered(dsn, engines)
        metrics = listening_addr(engines[1])  # the port the fast engine's kernel chose: bound, never reused
        policy = f"[policy]\nmisfire_grace_seconds = {GRACE}\n"
        for i in range(6):  # every 2 s: a 120 s fast engine would fire each one up to two minutes early
            (tasks / f"every-{i}.toml").write_text(
                f'[trigger]\nkind = "interval"\nevery = "2s"\n[target]\nurl = "{url}/every/{i}"\n{policy}'
            )
        for i in range(20):  # due in a few seconds, all at once
            (tasks / f"once-{i}.toml").write_text(
                f'[trigger]\nkind = "once"\nat = {soon(registered, 5)}\n[target]\nurl = "{url}/once/{i}"\n{policy}'
            )
        # One at a time, 3 s each, due every second: a fast engine would expire the live run's lease.
        (tasks / "single.toml").write_text(
            f'[trigger]\nkind = "interval"\nevery = "1s"\n[target]\nurl = "{url}/slow"\ntimeout_seconds = 10\n'
            f"{policy}max_running_instances = 1\n"
        )
        await apply_tasks(store, load_dir(tmp_path, "tasks.d").tasks, "default", datetime.now(UTC))

        def enough() -> bool:
            rows = run_rows(dsn)
            done = Counter(r[1] for r in rows)
            by = {r[4] for r in rows if r[1] == "succeeded"}
            return done["succeeded"] >= 80 and len(rec.paths("/once")) >= 20 and by >= {"on-time", "fast", "slow"}

        assert wait_until(enough, 120), Counter((r[4], r[1]) for r in run_rows(dsn))
        offsets = {labels.get("engine", ""): value for labels, value in (await scrape(f"http://{metrics}")).get(
            "reconciler_clock_offset_seconds", [])}  # fmt: skip
    finally:
        results = stop(engines)
    assert [code for code, _ in results] == [0, 0, 0], [err[-2000:] for _, err in results]

    for request in rec.paths("/"):  # never early: the target's clock is the database's (one machine)
        scheduled = datetime.fromisoformat(request.headers["X-Reconciler-Scheduled-For"]).timestamp()
        assert request.at >= scheduled, (request.path, request.headers)
    assert rec.max_in_flight.get("/slow") == 1  # max_running_instances = 1 across the three
    rows = run_rows(dsn)
    assert not [r for r in rows if r[1] == "lost"]  # no live run's lease expired by a fast clock
    for _, status, scheduled_for, claimed_at, engine, error in rows:
        assert claimed_at is not None and claimed_at >= scheduled_for, (engine, status)  # claimed when due
        if status == "missed" and "coalesced" not in (error or ""):  # missed for lateness only once really late
            assert (claimed_at - scheduled_for).total_seconds() > GRACE, (engine, scheduled_for, claimed_at)
    keys = Counter(r.headers["Idempotency-Key"] for r in rec.paths("/"))
    assert set(keys.values()) == {1}  # every occurrence fired once

    [offset] = offsets.values()
    assert -125 < offset < -115, offsets  # the database's clock minus the fast engine's
    fast_log = next(err for (_, err), e in zip(results, engines, strict=True) if e.engine_id == "fast")
    warned = re.search(r"clock is ([0-9.]+) s ahead of the database's", fast_log)
    assert warned is not None and 115 < float(warned.group(1)) < 125, fast_log[-2000:]
