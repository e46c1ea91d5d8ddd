"""The embedded PostgreSQL used when no DSN is given: kept in ./.reconciler/pgdata, shared by local processes."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from reconciler.errors import DatabaseUnavailable

DEFAULT_HOME = Path(".reconciler")


def embedded_dsn(home: Path = DEFAULT_HOME) -> str:
    """Start (or join) the embedded server under `home` and return its DSN (a Unix socket)."""
    home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(home.resolve()))
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from pgserver.postgres_server import get_server

            # cleanup_mode=None: the server outlives this process, so later commands and
            # other local processes (apply, engine, status) share it.
            server = get_server(home.resolve() / "pgdata", cleanup_mode=None)
        except Exception as exc:  # pgserver raises bare subprocess/OS errors
            raise DatabaseUnavailable(
                f"cannot start the embedded PostgreSQL in {home}/pgdata ({type(exc).__name__}: {exc}); "
                "pass --dsn or set RECONCILER_DSN"
            ) from None
    return str(server.get_uri())


def resolve_dsn(explicit: str | None) -> str:
    """--dsn, else RECONCILER_DSN, else DATABASE_URL, else the embedded server."""
    for value in (explicit, os.environ.get("RECONCILER_DSN"), os.environ.get("DATABASE_URL")):
        if value:
            return value
    return embedded_dsn()
