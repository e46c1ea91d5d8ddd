"""`reconciler dashboard`: the read-only web UI on its own; and the dashboard `engine --metrics-addr` and `up`
serve beside /metrics (web/dashboard.py)."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import TYPE_CHECKING

from reconciler.cli.console import err
from reconciler.cli.options import DatabaseOptions
from reconciler.cli.runtime import stop_on_signals
from reconciler.db.embedded import database_label, resolve_dsn
from reconciler.errors import EXIT_OK, UserError
from reconciler.web.app import is_loopback

if TYPE_CHECKING:
    from reconciler.web.dashboard import Dashboard

DEFAULT_ADDR = "127.0.0.1:9464"


def dashboard_token(args: argparse.Namespace) -> str | None:
    """The bearer token named by --dashboard-token-env (never printed); None without the option."""
    name = getattr(args, "dashboard_token_env", None)
    if not name:
        return None
    token = os.environ.get(name, "")
    if not token.strip():
        raise UserError(
            f"--dashboard-token-env {name}: {name} is not set or empty; export the token, or drop the option"
        )
    return token


def warn_if_open(addr: str, token: str | None) -> None:
    """One line on stderr when the pages are reachable from other machines and nobody needs a token."""
    host = addr.rpartition(":")[0] or "127.0.0.1"
    if token is None and not is_loopback(host):
        err(
            f"warning: the dashboard on {addr} answers anyone who can reach it (read-only, secrets masked); "
            "require a token with --dashboard-token-env NAME, or put it behind an authenticating proxy"
        )


def make_dashboard(database: DatabaseOptions) -> Dashboard:
    """The dashboard on a pool of its own (POOL_SIZE connections), never the engine's claim connections."""
    from reconciler.db.store import Store
    from reconciler.web.dashboard import POOL_SIZE, Dashboard

    dsn, origin = resolve_dsn(database.dsn, database.tasks_dir)
    store = Store(dsn, origin=origin, min_size=1, max_size=POOL_SIZE, timeout=5.0)
    return Dashboard(store, database_label(database.dsn, database.tasks_dir))


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve the dashboard until SIGINT or SIGTERM."""
    from reconciler.web.app import make_app, serve

    token = dashboard_token(args)
    addr = args.addr or DEFAULT_ADDR
    dashboard = make_dashboard(DatabaseOptions.of(args))

    async def run() -> int:
        stop = stop_on_signals()
        app = make_app(token)
        dashboard.add_routes(app)
        try:
            served = await serve(app, addr)
        except OSError as exc:
            raise UserError(f"--addr {addr}: cannot listen ({exc.strerror or exc}); pick another port") from None
        warn_if_open(addr, token)
        print(f"dashboard: {served.url}/ (read-only; Ctrl-C stops)", flush=True)
        try:
            await stop.wait()
        finally:
            await served.close()
            await dashboard.close()
        return EXIT_OK

    return asyncio.run(run())
