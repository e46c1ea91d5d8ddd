"""PostgreSQL servers the tests start: a private one a test may stop and start, and the sweep
that stops every server the run started (under its temporary folder), passed or failed.

The shared test server must never be stopped by a test; tests that take the database away
(health endpoints, chaos) use a PrivateServer.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import warnings
from pathlib import Path

import psutil
import psycopg
import pytest

from reconciler.db.embedded import embedded_dsn

# Tests of the embedded server itself (and of PrivateServer) need pgserver, which has no build
# for Python 3.13 yet; there the suite runs against RECONCILER_TEST_DSN and these are skipped.
needs_pgserver = pytest.mark.skipif(
    importlib.util.find_spec("pgserver") is None, reason="the embedded PostgreSQL (pgserver) is not installed"
)


def _pg_ctl(pgdata: Path, *args: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR at import
        from pgserver._commands import POSTGRES_BIN_PATH

    # pgserver runs postgres as the user "pgserver" when we are root (postgres refuses root).
    user = "pgserver" if os.geteuid() == 0 else None
    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), *args],
        check=True,
        user=user,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )


class PrivateServer:
    """An embedded server under `home/pgdata`, listening on a Unix socket only."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.pgdata = home.resolve() / "pgdata"
        self.dsn = embedded_dsn(home)
        self.socket_dir = psycopg.conninfo.conninfo_to_dict(self.dsn)["host"]

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`immediate` is a crash: no checkpoint, clients cut off)."""
        _pg_ctl(self.pgdata, "-w", "-m", mode, "stop")

    def start(self) -> None:
        """Start it again on the same socket, as pgserver does."""
        log = str(self.pgdata / "log")
        _pg_ctl(self.pgdata, "-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", log, "start")

    def running(self) -> bool:
        try:
            with psycopg.connect(self.dsn, connect_timeout=3):
                return True
        except psycopg.OperationalError:
            return False


def stop_embedded(home: Path) -> None:
    """Stop an embedded server that a subprocess left running under `home` (if any)."""
    pgdata = home.resolve() / "pgdata"
    if (pgdata / "postmaster.pid").exists():
        _pg_ctl(pgdata, "-w", "-m", "fast", "stop")


def servers_under(root: Path) -> list[psutil.Process]:
    """Running postmasters whose data directory (`-D`) lies below `root`."""
    root = root.resolve()
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        args = proc.info["cmdline"] or []
        is_postmaster = proc.info["name"] == "postgres" and "-D" in args[:-1]
        if is_postmaster and Path(args[args.index("-D") + 1]).is_relative_to(root):
            found.append(proc)
    return found


def stop_all_under(root: Path) -> int:
    """Fast-stop every postmaster below `root` (SIGINT), kill what is left after 30 s; returns how many."""
    procs = servers_under(root)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGINT)
    _, alive = psutil.wait_procs(procs, timeout=30)
    for proc in alive:
        proc.kill()
    psutil.wait_procs(alive, timeout=10)
    return len(procs)
