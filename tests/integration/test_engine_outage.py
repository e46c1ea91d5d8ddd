"""A real PostgreSQL stopped under a running engine: the log says so once when the outage starts and once
when it ends (psycopg_pool's warning per connection attempt no longer shows), naming the database the
engine found on its own (the project's embedded one, no DSN given); the engine's id is POD_NAME's."""

from __future__ import annotations

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


@needs_pgserver
def test_an_outage_logs_one_line_when_it_starts_and_one_when_it_ends(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "tasks.d").mkdir(parents=True)
    # The project's embedded server, which the engine finds without --dsn, RECONCILER_DSN or DATABASE_URL.
    server = PrivateServer(project / ".reconciler")
    log = tmp_path / "engine.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            reconciler_argv("engine", "--max-sleep", "0.5"),
            cwd=project,
            env=clean_env(POD_NAME=POD_NAME),
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    engine = EngineProcess(POD_NAME, proc, log)
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
