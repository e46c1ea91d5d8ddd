"""A real PostgreSQL stopped under a running engine: the log says so once when the outage starts and once
when it ends (psycopg_pool's warning per connection attempt no longer shows), naming the database the
engine found on its own (the project's embedded one, no DSN given); the engine's id is POD_NAME's. An engine
whose database is gone for good exits on SIGTERM within its drain, without waiting out the pool's timeout."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from tests.builders import EngineProcess, clean_env, reconciler_argv, registered, stop
from tests.helpers import wait_until
from tests.pgcontrol import PrivateServer, needs_pgserver

POD_NAME = "reconciler-engine-7d9f8-x2k4p"
# How long the database stays away: the fault injected, not a wait. The engine tries again and again
# meanwhile (backing off from 0.5 s), and psycopg_pool's own reconnections try too.
OUTAGE_SECONDS = 6.0
# An engine's wait for a pooled connection while the database is away (Store's default timeout): the stop below
# must not wait it out, and its drain is shorter than it, so a stop that does shows.
POOL_TIMEOUT_SECONDS = 10.0
DRAIN_SECONDS = 5.0


def engine_of_a_project(tmp_path: Path, *options: str) -> tuple[PrivateServer, EngineProcess]:
    """The project's embedded server, which the engine finds without --dsn, RECONCILER_DSN or DATABASE_URL, and
    an engine process of the project logging to engine.log."""
    project = tmp_path / "project"
    (project / "tasks.d").mkdir(parents=True)
    server = PrivateServer(project / ".reconciler")
    log = tmp_path / "engine.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            reconciler_argv("engine", "--max-sleep", "0.5", *options),
            cwd=project,
            env=clean_env(POD_NAME=POD_NAME),
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    return server, EngineProcess(POD_NAME, proc, log)


@needs_pgserver
def test_an_outage_logs_one_line_when_it_starts_and_one_when_it_ends(tmp_path: Path) -> None:
    server, engine = engine_of_a_project(tmp_path)
    project = tmp_path / "project"
    try:
        assert wait_until(lambda: POD_NAME in registered(server.dsn), 120), engine.output()
        server.stop()
        assert wait_until(lambda: "database unavailable" in engine.output(), 60), engine.output()
        time.sleep(OUTAGE_SECONDS)
        server.start()
        assert wait_until(lambda: "database reachable after" in engine.output(), 60), engine.output()
        assert POD_NAME in registered(server.dsn)
    finally:
        [(code, output)] = stop([engine])
        if server.running():
            server.stop()
    assert code == 0, output[-3000:]
    lines = output.splitlines()
    assert f"engine {POD_NAME} started (every source)" in output
    [down] = [line for line in lines if "database unavailable" in line]
    pgdata = (project / ".reconciler" / "pgdata").resolve()
    assert f"the embedded PostgreSQL in {pgdata} (no --dsn, RECONCILER_DSN or DATABASE_URL is set)" in down, down
    assert down.endswith(
        "any reconciler command run in the project starts it again; retrying (a line every 60 s until it answers)"
    )
    assert "check --dsn" not in output
    assert len([line for line in lines if "database reachable after" in line]) == 1, output
    assert not [line for line in lines if "psycopg" in line or "still unavailable" in line], output
    assert len([line for line in lines if " WARNING " in line]) == 1, output


@needs_pgserver
def test_an_engine_whose_database_is_gone_exits_within_its_drain_without_waiting_for_the_pool(tmp_path: Path) -> None:
    server, engine = engine_of_a_project(tmp_path, "--drain-seconds", f"{DRAIN_SECONDS:g}")
    proc = engine.proc
    try:
        assert wait_until(lambda: POD_NAME in registered(server.dsn), 120), engine.output()
        server.stop()  # for good: never started again
        # Its claims, the outbox and its goodbye now each wait for a pooled connection, up to the pool's timeout.
        assert wait_until(lambda: "database unavailable" in engine.output(), 60), engine.output()
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # The code's bound is the drain plus a second; the cap leaves a loaded machine four more.
        exited = wait_until(lambda: proc.poll() is not None, DRAIN_SECONDS + 5)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    output = engine.output()
    assert exited, f"still running {took:.1f} s after SIGTERM: {output[-3000:]}"
    assert proc.returncode == 0, output[-3000:]
    assert took < POOL_TIMEOUT_SECONDS, output[-3000:]
    lines = output.splitlines()
    stopping = [n for n, line in enumerate(lines) if "stopping: no run in flight" in line]
    assert stopping, output[-3000:]
    # What it did instead of waiting: no goodbye to a database that is not there (its heartbeat expires).
    [gone] = [n for n, line in enumerate(lines) if "stopping without the database (unavailable)" in line]
    [stopped] = [n for n, line in enumerate(lines) if f"engine {POD_NAME} stopped" in line]
    assert stopping[0] < gone < stopped, output[-3000:]
