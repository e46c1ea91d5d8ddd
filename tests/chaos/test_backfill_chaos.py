"""Chaos: a 500-occurrence backfill under three engine processes, one of them killed (SIGKILL) twice while
it holds backfill runs in flight, and `reconciler backfill --wait` following it from a subprocess (not a
terminal: a plain line per 10 %).

Afterwards every occurrence has exactly one succeeded backfill run, the target saw exactly the 500 keys (a key
twice only for an occurrence whose first run a kill lost: the same Idempotency-Key, so a deduplicating target
sees one request per occurrence), only the killed engine lost runs, `--wait` exited 0, and the same backfill
again queues nothing.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.builders import (
    EngineProcess,
    clean_env,
    reconciler_argv,
    run_reconciler,
    start_engines,
    stop,
    task_text,
    wait_registered,
)
from tests.helpers import one_row, wait_until
from tests.httpserver import Recorder

pytestmark = pytest.mark.chaos

OCCURRENCES = 500
EVERY = timedelta(minutes=5)
DELAY = 0.5  # seconds the target takes: a kill lands while runs are in flight
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def backfill_progress(dsn: str) -> tuple[int, int]:
    """(backfill runs ended in success, backfill runs running)."""
    row = one_row(
        dsn,
        "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'running')"
        " FROM scheduler.runs WHERE kind = 'backfill'",
    )
    return int(row[0]), int(row[1])


def holding(dsn: str, engine: EngineProcess) -> bool:
    """Whether the engine holds a backfill run in flight."""
    query = "SELECT count(*) FROM scheduler.runs WHERE kind = 'backfill' AND status = 'running' AND engine_id = %s"
    return bool(one_row(dsn, query, (engine.engine_id,))[0])


def test_a_backfill_under_kill_nine_fires_every_occurrence_once(
    dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/bf", delay=DELAY)
    root = tmp_path / "tasks.d"
    root.mkdir()
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    end = start + OCCURRENCES * EVERY
    # An interval that ended before the test: the schedule fires nothing meanwhile, so every request the
    # target sees is a backfill run's (the hold before a next occurrence is test_backfill.py's).
    (root / "bf.toml").write_text(
        task_text(
            trigger=f'kind = "interval"\nseconds = {EVERY.seconds}\n'
            f"start_at = {start.strftime(STAMP)}\nend_at = {end.strftime(STAMP)}",
            url=f"{url}/bf",
            target="timeout_seconds = 3",
            policy="max_running_instances = 8",
        )
    )
    run_reconciler("db", "init", dsn=dsn, ok=True)
    run_reconciler("--tasks-dir", str(root), "apply", dsn=dsn, ok=True)
    expected = {f"bf@{(start + n * EVERY).strftime(STAMP)}" for n in range(OCCURRENCES)}
    span = ["bf", "--from", start.strftime(STAMP), "--to", end.strftime(STAMP)]

    engines = start_engines(dsn, ["bf-0", "bf-1", "bf-2"], tmp_path, "--lease-margin", "2", "--concurrency", "20")
    killed: list[str] = []
    generation = 0
    waiter: subprocess.Popen[str] | None = None
    try:
        wait_registered(dsn, engines)
        with (tmp_path / "wait.out").open("w") as out, (tmp_path / "wait.err").open("w") as err:
            waiter = subprocess.Popen(
                reconciler_argv("--actor", "chaos", "backfill", *span, "--wait", "--reason", "chaos test"),
                env=clean_env(dsn),
                stdout=out,
                stderr=err,
                text=True,
            )
        for done_at_least in (100, 250):  # kill engine slot 0 twice, each time while it holds runs in flight
            assert wait_until(lambda n=done_at_least: backfill_progress(dsn)[0] >= n, 240), backfill_progress(dsn)
            assert wait_until(lambda: holding(dsn, engines[0]), 60), "slot 0 never held a backfill run"
            engines[0].proc.kill()
            engines[0].proc.wait(timeout=30)
            killed.append(engines[0].engine_id)
            generation += 1
            [engines[0]] = start_engines(dsn, [f"bf-0-{generation}"], tmp_path, "--lease-margin", "2")
        code = waiter.wait(timeout=600)
    finally:
        if waiter is not None and waiter.poll() is None:
            waiter.kill()
        codes = [code for code, _ in stop(engines, timeout=60)]
    wait_out, wait_err = (tmp_path / "wait.out").read_text(), (tmp_path / "wait.err").read_text()
    print(f"\nbackfill --wait (not a terminal), exit {code}:\n{wait_out.split('queued backfill', 1)[-1]}")

    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        runs = conn.execute(
            "SELECT scheduled_for, status, engine_id FROM scheduler.runs WHERE kind = 'backfill' ORDER BY id"
        ).fetchall()
        leases = conn.execute("SELECT count(*) AS n FROM scheduler.run_leases").fetchone()
    keys = Counter(r.headers["Idempotency-Key"] for r in rec.paths("/bf"))
    succeeded = Counter(f"bf@{r['scheduled_for'].strftime(STAMP)}" for r in runs if r["status"] == "succeeded")
    lost = Counter(f"bf@{r['scheduled_for'].strftime(STAMP)}" for r in runs if r["status"] == "lost")
    repeated = {key: n for key, n in keys.items() if n > 1}
    print(
        f"{OCCURRENCES} occurrences, kills {killed}: requests {sum(keys.values())}, distinct keys {len(keys)}, "
        f"runs {len(runs)} ({Counter(r['status'] for r in runs)}), keys sent again after a loss {len(repeated)}"
    )

    assert code == 0, wait_out + wait_err
    assert codes == [0, 0, 0]
    assert set(keys) == expected  # every occurrence reached the target, with its own key; nothing else did
    assert set(succeeded) == expected and set(succeeded.values()) == {1}  # each exactly one succeeded run
    assert {r["status"] for r in runs} <= {"succeeded", "lost"}
    assert lost and {r["engine_id"] for r in runs if r["status"] == "lost"} <= set(killed)
    assert all(n <= 1 + lost[key] for key, n in repeated.items()), (repeated, lost)  # again only after a loss
    assert leases is not None and leases["n"] == 0
    assert f"all {OCCURRENCES} run(s) succeeded" in wait_out and "(100%)" in wait_out
    progress = [line for line in wait_out.splitlines() if " done (" in line]
    assert "\r" not in wait_out and 2 <= len(progress) <= 11, wait_out  # a line per 10 % (0 % … 100 %), no bar

    again = run_reconciler("backfill", *span, "--format", "json", dsn=dsn, ok=True)
    found = json.loads(again.stdout)
    assert found["occurrences"] == [] and found["backfill_id"] is None and len(found["already_run"]) == OCCURRENCES
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM scheduler.backfills").fetchone() == (1,)
