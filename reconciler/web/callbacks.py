"""A job's callbacks on the engine's HTTP server (docs/jobs.md): `POST /runs/<run id>/<token>/heartbeat` and
`POST /runs/<run id>/<token>/complete`. The only routes that take POST; their token is their authorization
(the dashboard's bearer token does not apply to them). Every answer is JSON of one line; a body is read up to
its bound and no further; the database away is a 503 with Retry-After (the job sends again, nothing is lost).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from reconciler.db.store import DB_FAULTS
from reconciler.engine.jobs import NOT_FOUND, TOKEN, Answer, Jobs
from reconciler.errors import one_line
from reconciler.web.app import COMPLETE_ROUTE, HEARTBEAT_ROUTE

log = logging.getLogger("reconciler.web")

HEARTBEAT_BYTES = 4 * 1024
COMPLETE_BYTES = 16 * 1024
MAX_DEPTH = 32  # nesting of a reported JSON value
MAX_RUN_ID = 2**63 - 1
RETRY_AFTER_SECONDS = 5
COMPLETE_KEYS = ("status", "output", "error")


class BadRequest(Exception):
    """A callback's body that cannot be taken: its one-line reason (a 4xx)."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


def reply(answer: Answer, headers: dict[str, str] | None = None) -> web.Response:
    body = json.dumps(answer.body, separators=(",", ":"), ensure_ascii=True, default=str) + "\n"
    return web.Response(status=answer.status, text=body, content_type="application/json", headers=headers)


async def read_json(request: web.Request, limit: int, required: bool) -> Any:
    """The body as JSON: at most `limit` bytes (413 past it, unread beyond), UTF-8, nested at most MAX_DEPTH deep;
    None for an empty body when not `required`."""
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest(f"the body is larger than {limit // 1024} KiB", 413)
    raw = await request.content.read(limit + 1)
    if len(raw) > limit:
        raise BadRequest(f"the body is larger than {limit // 1024} KiB", 413)
    if not raw.strip():
        if required:
            raise BadRequest('the body is empty; send {"status": "succeeded"} or {"status": "failed", "error": "…"}')
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the body is not UTF-8") from None
    if _depth(text) > MAX_DEPTH:
        raise BadRequest(f"the body is nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON ({one_line(exc)[:120]})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(text: str) -> int:
    """How deep brackets nest, outside strings (before parsing: json.loads recurses per level)."""
    deepest = depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def completion(body: Any) -> tuple[str, Any, str | None]:
    """`{"status": "succeeded"|"failed", "output": {…}, "error": "…"}` → its parts, or BadRequest."""
    if not isinstance(body, dict):
        raise BadRequest('the body must be a JSON object: {"status": "succeeded", "output": {…}}')
    unknown = sorted(set(body) - set(COMPLETE_KEYS))
    if unknown:
        raise BadRequest(f"unknown key {unknown[0][:40]!r}; a completion has status, output and error")
    status = body.get("status")
    if status not in ("succeeded", "failed"):
        raise BadRequest('status must be "succeeded" or "failed"')
    output, error = body.get("output"), body.get("error")
    if output is not None and not isinstance(output, dict):
        raise BadRequest("output must be a JSON object")
    if error is not None and not isinstance(error, str):
        raise BadRequest("error must be a string")
    return status, output, error


def run_of(request: web.Request) -> tuple[int, str] | None:
    """The run id and token of the URL; None when either cannot be one (a 404 without asking the database)."""
    run, token = request.match_info["run_id"], request.match_info["token"]
    if not run.isascii() or not run.isdigit() or len(run) > 19 or not TOKEN.fullmatch(token):
        return None
    number = int(run)
    return (number, token) if 0 < number <= MAX_RUN_ID else None


class Callbacks:
    """The callback routes of one engine's server."""

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs

    def add_routes(self, app: web.Application) -> None:
        # named: the guard (web/app.py) lets POST through to these routes only
        app.router.add_post("/runs/{run_id}/{token}/heartbeat", self.heartbeat, name=HEARTBEAT_ROUTE)
        app.router.add_post("/runs/{run_id}/{token}/complete", self.complete, name=COMPLETE_ROUTE)

    async def heartbeat(self, request: web.Request) -> web.Response:
        return await self._answer(request, HEARTBEAT_BYTES, False, self._heartbeat)

    async def complete(self, request: web.Request) -> web.Response:
        return await self._answer(request, COMPLETE_BYTES, True, self._complete)

    async def _heartbeat(self, run_id: int, token: str, body: Any) -> Answer:
        return await self.jobs.heartbeat(run_id, token, body)

    async def _complete(self, run_id: int, token: str, body: Any) -> Answer:
        status, output, error = completion(body)
        return await self.jobs.complete(run_id, token, status, output, error)

    async def _answer(
        self, request: web.Request, limit: int, required: bool, act: Callable[[int, str, Any], Awaitable[Answer]]
    ) -> web.Response:
        found = run_of(request)
        if found is None:
            return reply(NOT_FOUND)
        try:
            body = await read_json(request, limit, required)
            answer: Answer = await act(*found, body)
        except BadRequest as exc:
            return reply(Answer(exc.status, {"error": str(exc)}))
        except DB_FAULTS:
            return reply(
                Answer(503, {"error": "the database is unavailable; send it again"}),
                {"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        except Exception as exc:  # a bug: the job sends again; the engine goes on
            log.error("callback for run %d failed: %s", found[0], one_line(exc), exc_info=True)
            return reply(Answer(500, {"error": "the engine could not take the callback; send it again"}))
        return reply(answer)
