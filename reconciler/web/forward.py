"""The dashboard's pages as an engine serves them: passed on to a dashboard process of its own.

Rendering a page is CPU work, and an engine's event loop must keep firing on time: in the same
process, ten page views a second took a whole core from it (the GIL is one, threads or not), and
its fire lag p99 more than doubled (docs/performance.md, "Dashboard"). So `engine --metrics-addr`
and `up` run `reconciler dashboard` as a child process on a loopback port, started on the first page
asked for, and pass each dashboard request on to it; /metrics and the probes stay in the engine.
Passing one on costs a copy of its bytes.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Protocol

import aiohttp
from aiohttp import web

log = logging.getLogger("reconciler.web")

PASSED_REQUEST_HEADERS = ("Authorization", "Accept", "Accept-Language", "If-None-Match")
PASSED_RESPONSE_HEADERS = (
    "Content-Type",
    "Allow",
    "WWW-Authenticate",
    "Retry-After",
    "ETag",
    "Last-Modified",
    "Cache-Control",
)
TIMEOUT_SECONDS = 30.0


class Launcher(Protocol):
    """The dashboard's process: started on the first page asked for (an engine nobody looks at runs none)."""

    async def url(self) -> str:
        """The running process's base URL, starting it (again) if need be; raises when it cannot."""
        ...

    async def close(self) -> None: ...


class Forward:
    """Routes every path but the engine's own to the dashboard process `launcher` runs."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.session: aiohttp.ClientSession | None = None

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/{tail:.*}", self.handle)  # after /metrics and the probes: they match first

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            base = await self.launcher.url()
        except Exception as exc:  # it could not start: the page says so, the engine goes on
            log.warning("the dashboard's process is not running: %s", exc)
            return web.Response(status=503, text="503: the dashboard's process is not running (see the logs); retry\n")
        if self.session is None:
            self.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECONDS), auto_decompress=False
            )
        headers = {name: request.headers[name] for name in PASSED_REQUEST_HEADERS if name in request.headers}
        try:
            async with self.session.request(
                request.method, base + request.rel_url.raw_path_qs, headers=headers, allow_redirects=False
            ) as answer:
                body = await answer.read()
                passed = {name: answer.headers[name] for name in PASSED_RESPONSE_HEADERS if name in answer.headers}
                return web.Response(status=answer.status, body=body, headers=passed)
        except (aiohttp.ClientError, TimeoutError):
            return web.Response(status=503, text="503: the dashboard's process did not answer; retry\n")

    async def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            with contextlib.suppress(Exception):
                await session.close()
        await self.launcher.close()
