"""One aiohttp application for everything reconciler serves over HTTP: /metrics, /healthz and /readyz
(an engine's) and the read-only dashboard, with the rules every response follows.

Rules, in one middleware: GET and HEAD only (405 otherwise, with `Allow`), but for a job's callbacks (POST, their
own token their authorization: web/callbacks.py); the security headers on
every response (a strict Content-Security-Policy: the pages load nothing but their own stylesheet
and script, and may not be framed); with a token, the dashboard's routes want it as a bearer token
(the scheme in any case, as RFC 9110 says; the token compared in constant time), while /metrics and the
probes stay open for Prometheus and the kubelet; an error the router or the static files raise (a 404) is
a line of text like every other, never an empty body a browser would download.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware

log = logging.getLogger("reconciler.web")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
OPEN_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})  # never behind the dashboard's token
ALLOWED_METHODS = ("GET", "HEAD")
HEARTBEAT_ROUTE, COMPLETE_ROUTE = "job-heartbeat", "job-complete"  # web/callbacks.py's routes, by name
POST_ROUTES = frozenset({HEARTBEAT_ROUTE, COMPLETE_ROUTE})


def guard(token: str | None) -> Middleware:
    """The middleware: methods, token, headers (see the module's docstring)."""
    expected = token.encode() if token else None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if getattr(request.match_info.route, "name", None) in POST_ROUTES and request.method == "POST":
            response: web.StreamResponse = await handler(request)
        elif request.method not in ALLOWED_METHODS:
            response = web.Response(
                status=405, text="405: read-only; only GET and HEAD\n", headers={"Allow": ", ".join(ALLOWED_METHODS)}
            )
        elif expected is not None and request.path not in OPEN_PATHS and not _bearer_ok(request, expected):
            response = web.Response(
                status=401,
                text="401: this dashboard wants `Authorization: Bearer <token>` (engine --dashboard-token-env)\n",
                headers={"WWW-Authenticate": 'Bearer realm="reconciler"'},
            )
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:  # 404s of the router and the static files, and redirects
                if exc.status < 400:  # a redirect: raised, with the headers too
                    exc.headers.update(SECURITY_HEADERS)
                    raise
                response = error_response(exc)
        response.headers.update(SECURITY_HEADERS)
        return response

    return middleware


def error_response(exc: web.HTTPException) -> web.Response:
    """A raised HTTP error as one line of text (`404: Not Found`): the static files' 404 has no body, and
    aiohttp would send it as an empty application/octet-stream, which a browser downloads."""
    kept = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
    return web.Response(status=exc.status, reason=exc.reason, text=f"{exc.status}: {exc.reason}\n", headers=kept)


def bearer_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, the scheme in any case (RFC 9110 §11.1: `bearer`,
    `BEARER`), after one or more spaces; None for another scheme or no token."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip(" ")
    return token if scheme.lower() == "bearer" and token else None


def _bearer_ok(request: web.Request, expected: bytes) -> bool:
    given = bearer_token(request.headers.get("Authorization", ""))
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), expected)


class Pages(Protocol):
    """Routes served beside the engine's own: the dashboard (web/dashboard.py), or what forwards to it
    (web/forward.py); closed with the server."""

    def add_routes(self, app: web.Application) -> None: ...

    async def close(self) -> None: ...


def make_app(token: str | None = None) -> web.Application:
    """The application, without routes: the dashboard and the engine's endpoints add theirs."""
    return web.Application(middlewares=[guard(token)], client_max_size=1024)  # GET and HEAD carry no body


@dataclass
class Served:
    """A running application: its runner, and the address it listens on (the kernel's port when 0 was asked)."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        """Stop listening (again: a no-op)."""
        if self.runner.server is not None:
            await self.runner.cleanup()


async def serve(app: web.Application, addr: str) -> Served:
    """Listen on `addr` (HOST:PORT; port 0: one the kernel picks); raises OSError when it cannot."""
    host, _, port = addr.rpartition(":")
    host = host or "127.0.0.1"
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, int(port), reuse_address=True)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound = runner.addresses[0]
    return Served(runner, host, int(bound[1]))
