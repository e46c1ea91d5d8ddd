"""The embedded PostgreSQL used when no DSN is given: one per project, in <project root>/.reconciler/pgdata.

Which folder that is, the caller says (files/project.py finds the project from wherever a command runs, so
`status` in `tasks.d/billing/` reads the same database as at the root). The server outlives the command that
started it; `reconciler down` stops it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reconciler.errors import DatabaseUnavailable, UserError

DOWN_SECONDS = 60.0  # a fast shutdown ends the sessions and writes a checkpoint


def _prepare(home: Path) -> None:
    """Create `home`, with a .gitignore of `*` so the project's git never shows it."""
    home.mkdir(parents=True, exist_ok=True)
    ignore = home / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# the embedded PostgreSQL of reconciler: never committed\n*\n")


def embedded_dsn(home: Path) -> str:
    """Start (or join) the embedded server under `home` and return its DSN (a Unix socket)."""
    _prepare(home)
    if not (home / "pgdata" / "PG_VERSION").exists():
        print(f"creating the embedded PostgreSQL in {home / 'pgdata'} (`reconciler down` stops it)", file=sys.stderr)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(home.resolve()))
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from pgserver.postgres_server import get_server
        except ImportError:
            raise DatabaseUnavailable(
                "the embedded PostgreSQL needs the pgserver package, which is not installed "
                f"(it has no build for Python {sys.version_info.major}.{sys.version_info.minor} yet); "
                "pass --dsn or set RECONCILER_DSN"
            ) from None
        try:
            # cleanup_mode=None: the server outlives this process, so later commands and
            # other local processes (apply, engine, status) share it.
            server = get_server(home.resolve() / "pgdata", cleanup_mode=None)
        except Exception as exc:  # pgserver raises bare subprocess/OS errors
            raise DatabaseUnavailable(
                f"cannot start the embedded PostgreSQL in {home}/pgdata ({type(exc).__name__}: {exc}); "
                "pass --dsn or set RECONCILER_DSN"
            ) from None
    return str(server.get_uri())


@dataclass(frozen=True)
class DsnOrigin:
    """Where a DSN came from, for the messages of a database that does not answer: the option or
    variable that gave it, or the embedded server's data directory (neither: a DSN given in code)."""

    given_by: str | None = None  # "--dsn", "RECONCILER_DSN" or "DATABASE_URL"
    embedded: Path | None = None  # <project>/.reconciler/pgdata

    def unreachable(self, shown: str, reason: str) -> str:
        """One line: which database did not answer (`shown`: its DSN without the password), why, what to check."""
        if self.embedded is not None:
            return (
                f"cannot connect to the embedded PostgreSQL in {self.embedded} (no --dsn, RECONCILER_DSN or "
                f"DATABASE_URL is set): {reason}; if it was stopped, any reconciler command run in the project "
                "starts it again"
            )
        if self.given_by is None:
            return f"cannot connect to PostgreSQL ({shown}): {reason}; check the DSN"
        unset = {"DATABASE_URL": " (used because neither --dsn nor RECONCILER_DSN is set)"}.get(self.given_by, "")
        return f"cannot connect to PostgreSQL ({shown}, from {self.given_by}): {reason}; check {self.given_by}{unset}"


def configured(explicit: str | None) -> tuple[str, DsnOrigin] | None:
    """--dsn, else RECONCILER_DSN, else DATABASE_URL, and which one it was; None means the embedded server."""
    given = (("--dsn", explicit), ("RECONCILER_DSN", os.environ.get("RECONCILER_DSN")))
    for name, value in (*given, ("DATABASE_URL", os.environ.get("DATABASE_URL"))):
        if value:
            return value, DsnOrigin(given_by=name)
    return None


def configured_dsn(explicit: str | None) -> str | None:
    """The DSN of `configured`; None means the embedded server."""
    found = configured(explicit)
    return None if found is None else found[0]


def resolve_dsn(explicit: str | None, home: Callable[[], Path]) -> tuple[str, DsnOrigin]:
    """The configured DSN, else the embedded server's in `home()` (the project's `.reconciler`, asked only then;
    started if need be), and where it came from."""
    found = configured(explicit)
    if found is not None:
        return found
    folder = home()
    return embedded_dsn(folder), DsnOrigin(embedded=folder / "pgdata")


def database_label(explicit: str | None, home: Callable[[], Path]) -> str:
    """Which database a command reads, for people: the embedded data directory or the DSN without its password."""
    dsn = configured_dsn(explicit)
    if dsn is None:
        return f"embedded PostgreSQL in {home() / 'pgdata'}"
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparsable DSN names nothing safe to show
        return "the database named by the DSN (unparsable, not shown)"
    shown = {k: v for k, v in parts.items() if k in ("host", "hostaddr", "port", "dbname", "user") and v is not None}
    return f"PostgreSQL {make_conninfo('', **shown) or '(libpq defaults)'}"


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a container's init may never reap the postmaster)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: the signal test is all there is
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _is_postgres(pid: int) -> bool:
    """Where /proc tells: the pid is a postgres process (a stale pid file may name a reused pid)."""
    try:
        return b"postgres" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return not Path("/proc/self").exists()


def stop_embedded(home: Path) -> str:
    """Fast-stop the embedded server under `home` (any user may stop it, root too); a line to print."""
    pgdata = home / "pgdata"
    pidfile = pgdata / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
    except FileNotFoundError:
        return f"no embedded PostgreSQL is running in {pgdata}"
    except (OSError, ValueError, IndexError) as exc:
        raise UserError(f"{pidfile}: unreadable ({type(exc).__name__}); is the server still starting?") from None
    if not _alive(pid) or not _is_postgres(pid):
        return f"no embedded PostgreSQL is running in {pgdata} (its pid file is left from a crash)"
    try:
        os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown: what `pg_ctl stop` sends
    except PermissionError:
        raise UserError(f"the embedded PostgreSQL in {pgdata} (pid {pid}) belongs to another user") from None
    deadline = time.monotonic() + DOWN_SECONDS
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        raise UserError(f"the embedded PostgreSQL in {pgdata} (pid {pid}) did not stop within {DOWN_SECONDS:g} s")
    return f"stopped the embedded PostgreSQL in {pgdata} (pid {pid})"
