"""`reconciler dashboard`: the read-only web UI on its own; and the dashboard `engine --metrics-addr` and `up`
serve beside /metrics (web/dashboard.py)."""

from __future__ import annotations

import asyncio
import os
import sys
from asyncio.subprocess import PIPE
from typing import TYPE_CHECKING

from reconciler.cli.console import err, log
from reconciler.cli.options import DashboardOptions, DatabaseOptions, ServeOptions
from reconciler.cli.runtime import stop_on_signals
from reconciler.errors import EXIT_OK, UserError
from reconciler.spec.hosts import is_loopback

if TYPE_CHECKING:
    from reconciler.web.dashboard import Dashboard

DEFAULT_ADDR = "127.0.0.1:9464"
CHILD_TOKEN_ENV = "RECONCILER_DASHBOARD_CHILD_TOKEN"  # how an engine hands its dashboard process the token
START_SECONDS = 60.0  # a dashboard process that has not said its URL by then is given up (and tried again)
RESTART_SECONDS = 2.0  # a process that exited is started again at most this often


def dashboard_token(serve: ServeOptions) -> str | None:
    """The bearer token named by --dashboard-token-env (never printed); None without the option."""
    name = serve.token_env
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
    """The dashboard on a pool of its own (POOL_SIZE connections, a queue of POOL_QUEUE requests waiting at most
    POOL_WAIT_SECONDS each), never the engine's claim connections."""
    from reconciler.db.embedded import database_label, resolve_dsn
    from reconciler.db.store import Store
    from reconciler.web.dashboard import POOL_QUEUE, POOL_SIZE, POOL_WAIT_SECONDS, Dashboard

    dsn, origin = resolve_dsn(database.dsn, database.home)
    store = Store(dsn, origin=origin, min_size=1, max_size=POOL_SIZE, timeout=POOL_WAIT_SECONDS, max_waiting=POOL_QUEUE)
    return Dashboard(store, database_label(database.dsn, database.home))


class DashboardProcess:
    """`reconciler dashboard` as an engine's child (web/forward.py says why): on a loopback port of the
    kernel's choice, on the engine's database and token, started when a page is first asked for and
    again when it exits. It stops with the engine: closed, or, should the engine be killed, when its
    stdin (a pipe from the engine) reaches end of file. In a session of its own, so a Ctrl-C meant for
    `up` reaches `up` alone, which then closes it."""

    def __init__(self, dsn: str, token: str | None) -> None:
        self.dsn, self.token = dsn, token
        self.proc: asyncio.subprocess.Process | None = None
        self.base = ""
        self.started = -RESTART_SECONDS
        self.lock = asyncio.Lock()

    async def url(self) -> str:
        async with self.lock:
            if self.proc is not None and self.proc.returncode is None:
                return self.base
            if self.proc is not None:
                log.warning("the dashboard's process exited (code %s); starting it again", self.proc.returncode)
            now = asyncio.get_running_loop().time()
            if now - self.started < RESTART_SECONDS:
                raise RuntimeError(f"it exited within {RESTART_SECONDS:g} s of its start")
            self.started = now
            self.base = await self._start()
            return self.base

    async def _start(self) -> str:
        argv = [sys.executable, "-m", "reconciler", "dashboard", "--addr", "127.0.0.1:0", "--with-parent"]
        env = {**os.environ, "RECONCILER_DSN": self.dsn}  # not --dsn: a command line is public (ps)
        if self.token is not None:
            argv += ["--dashboard-token-env", CHILD_TOKEN_ENV]
            env[CHILD_TOKEN_ENV] = self.token
        self.proc = await asyncio.create_subprocess_exec(
            *argv, stdin=PIPE, stdout=PIPE, env=env, start_new_session=True
        )
        assert self.proc.stdout is not None
        try:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), START_SECONDS)).decode(errors="replace")
        except TimeoutError:
            line = ""
        if not line.startswith("dashboard: http://"):
            await self.close()
            raise RuntimeError(f"it did not start (said {line.strip()!r}; its errors are on stderr)")
        return line.split()[1].rstrip("/")

    async def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def stop_with_parent(stop: asyncio.Event) -> None:
    """Set `stop` when stdin reaches end of file: the parent engine that holds its other end is gone."""
    loop = asyncio.get_running_loop()

    def readable() -> None:
        if not os.read(0, 4096):
            loop.remove_reader(0)
            stop.set()

    loop.add_reader(0, readable)


def dashboard(options: DashboardOptions) -> int:
    """Serve the dashboard until SIGINT or SIGTERM."""
    from reconciler.web.app import make_app, serve

    token = dashboard_token(options.serve)
    addr = options.serve.addr or DEFAULT_ADDR
    pages = make_dashboard(options.database)

    async def run() -> int:
        stop = stop_on_signals()
        if options.serve.with_parent:
            stop_with_parent(stop)
        app = make_app(token)
        pages.add_routes(app)
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
            await pages.close()
        return EXIT_OK

    return asyncio.run(run())
