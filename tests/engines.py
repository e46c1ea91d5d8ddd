"""Engine subprocesses for tests: start them, wait until each has registered, stop them with SIGTERM.

A schedule that subprocess engines must meet is set relative to the moment they are all
registered, never to when they were started: a loaded machine may take seconds to start one.
Their stderr goes to a file, so an unread pipe never blocks an engine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from tests.helpers import wait_until


@dataclass
class EngineProcess:
    engine_id: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        """What it wrote to stderr (logs)."""
        return self.log.read_text(errors="replace")

    def stdout(self) -> str:
        return self.log.with_suffix(".out").read_text(errors="replace")


def start_engines(dsn: str, ids: Sequence[str], logs: Path, *extra: str, env: dict[str, str] | None = None,
                  global_args: Sequence[str] = ()) -> list[EngineProcess]:  # fmt: skip
    """`reconciler engine` processes, one per id, polling at least every 0.5 s."""
    started = []
    for engine_id in ids:
        log = logs / f"{engine_id}.log"
        with log.open("wb") as sink, log.with_suffix(".out").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "reconciler", *global_args, "engine", "--engine-id", engine_id,
                 "--max-sleep", "0.5", *extra],
                env={**os.environ, "RECONCILER_DSN": dsn, **(env or {})},
                stdout=out,
                stderr=sink,
            )  # fmt: skip
        started.append(EngineProcess(engine_id, proc, log))
    return started


def run_cli(dsn: str, *args: str) -> str:
    """`reconciler ARGS` in a subprocess against `dsn`; asserts exit 0, returns stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        env={**os.environ, "RECONCILER_DSN": dsn},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def registered(dsn: str) -> set[str]:
    """Engine ids with a row in scheduler.engines (none while the schema is not there yet)."""
    with psycopg.connect(dsn) as conn:
        try:
            return {row[0] for row in conn.execute("SELECT engine_id FROM scheduler.engines")}
        except psycopg.errors.UndefinedTable:
            return set()


def wait_registered(dsn: str, engines: Sequence[EngineProcess]) -> datetime:
    """Wait until every engine has registered (failing at once if one exits); returns that moment."""

    def ready() -> bool:
        dead = [e.output()[-2000:] for e in engines if e.proc.poll() is not None]
        assert not dead, f"an engine exited before registering: {dead}"
        return {e.engine_id for e in engines} <= registered(dsn)

    assert wait_until(ready, 120), "engines never registered"
    return datetime.now(UTC)


def soon(moment: datetime, seconds: int) -> str:
    """`moment + seconds`, rounded up to a whole second, as a TOML date-time (UTC)."""
    return (moment.replace(microsecond=0) + timedelta(seconds=seconds + 1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def stop(engines: Sequence[EngineProcess], timeout: float = 120) -> list[tuple[int, str]]:
    """SIGTERM each engine and wait: [(exit code, stderr)]."""
    for engine in engines:
        if engine.proc.poll() is None:
            engine.proc.send_signal(signal.SIGTERM)
    return [(engine.proc.wait(timeout=timeout), engine.output()) for engine in engines]
