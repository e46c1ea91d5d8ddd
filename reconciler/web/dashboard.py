"""The read-only dashboard: /, /tasks/<id>, /timeline, /runs, /applies, /engines, each also JSON (`?format=json`).

Every page reads the database through its own small pool (never the engine's claims') in a read
transaction bounded by a statement timeout and a lock wait (Store.reading), one page of rows at a time
through an index. It shows what the CLI shows, computed by the same code: the task's status item and
`explain` from output/views.py, its next fire times with `next`'s own function, masked as the CLI
masks. A page is rendered off the event loop: an engine serving it keeps firing on time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp import web

from reconciler import __version__
from reconciler.clock import utc_iso
from reconciler.db import command_queries, dashboard_queries, operator_queries
from reconciler.db.store import Store
from reconciler.errors import DatabaseUnavailable, PoolBusy, SchemaMissing, UserError, one_line
from reconciler.output import text as render
from reconciler.output import views
from reconciler.output.masking import mask_spec, mask_text
from reconciler.runs import KINDS, STATUSES
from reconciler.schedule.describe import describe_trigger
from reconciler.schedule.excluded import excluded_between
from reconciler.schedule.preview import upcoming
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.task import TaskSpec
from reconciler.spec.values import parse_instant
from reconciler.web import pages
from reconciler.web.timeline import Planned, timeline

log = logging.getLogger("reconciler.web")

TASKS_PAGE = 100  # tasks per page of / and /timeline
RUNS_PAGE = 50  # runs per page of /runs
TASK_RUNS = 100  # the task page's last runs
NEXT_FIRES = 10  # the task page's next fire times
APPLIES_PAGE = 50
ENGINES_SEEN_SECONDS = 3600.0  # /engines lists engines heard from in the last hour
REFRESH_SECONDS = 30  # the pages reload themselves this often (static/app.js)
# The dashboard's own connections. A page holds one for its read (~0.1 s for `/` with 100 busy tasks); more
# requests than that wait in line, up to POOL_QUEUE of them for POOL_WAIT_SECONDS each: 50 clients at once are
# served in turn. Past either bound a request gets a 503 saying the pool is busy, with Retry-After.
POOL_SIZE = 4
POOL_WAIT_SECONDS = 10.0
POOL_QUEUE = 100
MAX_PARAM = 500  # characters of a query parameter
SPEC_CACHE = 20_000  # parsed specs kept, by their text


@dataclass(frozen=True)
class SpecFacts:
    """What the pages show of a stored spec; a spec that no longer validates has `problem` instead."""

    spec: TaskSpec | None
    description: str | None
    labels: dict[str, str]
    schedule: str
    problem: str | None = None


class SpecCache:
    """Stored specs parsed once each (by task and text: a problem names its task), the newest SPEC_CACHE kept."""

    def __init__(self) -> None:
        self.facts: OrderedDict[tuple[str, str], SpecFacts] = OrderedDict()

    def get(self, task_id: str, spec_text: str) -> SpecFacts:
        key = (task_id, spec_text)
        found = self.facts.get(key)
        if found is None:
            found = self._parse(task_id, spec_text)
            self.facts[key] = found
            if len(self.facts) > SPEC_CACHE:
                self.facts.popitem(last=False)
        else:
            self.facts.move_to_end(key)
        return found

    @staticmethod
    def _parse(task_id: str, spec_text: str) -> SpecFacts:
        try:
            spec = views.stored_spec(task_id, spec_text)
        except UserError as exc:
            return SpecFacts(None, None, {}, "-", str(exc))
        return SpecFacts(spec, spec.description, dict(spec.labels), describe_trigger(spec))


def json_text(data: Any) -> str:
    """A page's JSON, non-ASCII text as itself."""
    return json.dumps(data, ensure_ascii=False)


def param(request: web.Request, name: str, choices: tuple[str, ...] | None = None) -> str | None:
    """A query parameter, None when absent or empty; one too long, or not among `choices`, is a 400."""
    value = request.query.get(name) or None
    if value is None:
        return None
    checked(name, value)
    if choices is not None and value not in choices:
        raise UserError(f"{name}: {render.safe(value)!r} is not one of {', '.join(choices)}")
    return value


def checked(name: str, value: str) -> str:
    """`value` as given, unless too long or holding a NUL (PostgreSQL's text cannot): a UserError naming `name`."""
    if len(value) > MAX_PARAM:
        raise UserError(f"{name}: longer than {MAX_PARAM} characters")
    if "\x00" in value:
        raise UserError(f"{name}: contains a NUL character")
    return value


def instant(request: web.Request, name: str) -> datetime | None:
    value = param(request, name)
    return parse_instant(value, name) if value else None


def whole(request: web.Request, name: str) -> int | None:
    value = param(request, name)
    if value is None:
        return None
    if not value.isdigit() or len(value) > 18:
        raise UserError(f"{name}: {render.safe(value)!r} is not a whole number")
    return int(value)


def zone_param(request: web.Request) -> ZoneInfo:
    name = param(request, "tz") or "UTC"
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):
        raise UserError(f"tz: {render.safe(name)!r} is not an IANA time zone; write e.g. Europe/Berlin") from None


def label_param(request: web.Request) -> tuple[str | None, str | None]:
    """`label=key=value`: the text, and the JSON object the task's labels must contain."""
    text = param(request, "label")
    if text is None:
        return None, None
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UserError(f"label: {render.safe(text)!r} names no label and value; write e.g. label=team=billing")
    return text, json.dumps({key: value})


class Dashboard:
    """The dashboard's routes over `store` (its own pool, opened on first use)."""

    def __init__(self, store: Store, label: str = "") -> None:
        self.store = store
        self.label = label  # the database, as `status` names it
        self.specs = SpecCache()
        self._opened: asyncio.Task[None] | None = None

    def add_routes(self, app: web.Application) -> None:
        for path, handler in (
            ("/", self.index),
            ("/tasks/{id:.+}", self.task),
            ("/timeline", self.timeline),
            ("/runs", self.runs),
            ("/applies", self.applies),
            ("/engines", self.engines),
        ):
            app.router.add_get(path, self._page(handler))
        app.router.add_get("/static/{name}", self.static)

    async def static(self, request: web.Request) -> web.StreamResponse:
        """One of the dashboard's own files (by name: no path reaches outside them); any other name a 404
        like every other (aiohttp's static route answers a missing file with an empty octet-stream)."""
        name = request.match_info["name"]
        if name not in pages.STATIC_FILES:
            raise web.HTTPNotFound()
        return web.FileResponse(pages.STATIC / name)

    async def close(self) -> None:
        await self.store.close()

    async def _open(self) -> None:
        """Open the pool once; a failed open is tried again by the next request."""
        if self._opened is None or (self._opened.done() and self._opened.exception() is not None):
            self._opened = asyncio.ensure_future(self.store.open())
        await asyncio.shield(self._opened)

    def _page(
        self, handler: Callable[[web.Request], Awaitable[tuple[str, dict[str, Any]]]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """A route: the handler's (template, data) as HTML, or the data as JSON with ?format=json;
        a user's mistake is a 400 (404 for an unknown task), an unreachable database a 503, one line each; a busy
        pool a 503 too, saying so, with Retry-After (the database is fine: nothing to check in the DSN)."""

        async def respond(request: web.Request) -> web.StreamResponse:
            as_json = request.query.get("format") == "json"
            headers: dict[str, str] = {}
            try:
                await self._open()
                template, data = await handler(request)
                status = 200
            except web.HTTPException:
                raise
            except PoolBusy as exc:
                template, data, status = "error.html", {"error": one_line(exc)}, 503
                headers["Retry-After"] = str(exc.retry_after)
            except DatabaseUnavailable as exc:
                template, data, status = "error.html", {"error": mask_text(one_line(exc))}, 503
            except SchemaMissing as exc:
                template, data, status = "error.html", {"error": one_line(exc)}, 503
            except UserError as exc:
                unknown = "is not in the database" in str(exc)
                template, data, status = "error.html", {"error": mask_text(one_line(exc))}, 404 if unknown else 400
            except Exception as exc:  # a bug: logged with its stack, the page says only that
                log.error("dashboard %s failed: %s", request.path, one_line(exc), exc_info=True)
                template, data, status = "error.html", {"error": "internal error (logged by the server)"}, 500
            if as_json:
                return web.json_response(data, status=status, headers=headers, dumps=json_text)
            context = {**data, "nav": request.path, "version": __version__, "database": self.label}
            context["refresh"] = REFRESH_SECONDS
            body = await asyncio.to_thread(pages.render, template, context)
            return web.Response(text=body, status=status, headers=headers, content_type="text/html", charset="utf-8")

        return respond

    # ------------------------------------------------------------ routes

    async def index(self, request: web.Request) -> tuple[str, dict[str, Any]]:
        source, status = param(request, "source"), param(request, "status", (*STATUSES, "none"))
        label, labels = label_param(request)
        after = param(request, "after")
        async with self.store.reading() as conn:
            [clock] = await command_queries.clock_now(conn, now=None)
            rows = await dashboard_queries.tasks_page(
                conn, after=after, source=source, labels=labels, status=status, now=None, limit=TASKS_PAGE + 1
            )
            [counts] = await dashboard_queries.counts(conn)
            pauses = await operator_queries.pauses_readable(conn, ids=[row["id"] for row in rows])
        tasks = [self._task_item(row, pauses, clock["now"]) for row in rows[:TASKS_PAGE]]
        return "index.html", {
            "database_now": utc_iso(clock["now"]),
            "filters": {"source": source, "label": label, "status": status},
            "counts": {"tasks": counts["tasks"], "enabled": counts["enabled"]},
            "sources": sorted(counts["sources"]),
            "statuses": [*STATUSES, "none"],
            "tasks": tasks,
            "next_after": tasks[-1]["id"] if len(rows) > TASKS_PAGE else None,
        }

    def _task_item(self, row: Mapping[str, Any], pauses: Mapping[str, Any], now: datetime) -> dict[str, Any]:
        """A task as / lists it: `status`'s item (json) and what the dashboard adds."""
        facts = self.specs.get(row["id"], row["run_spec_text"])
        item = views.json_task(views.status_item(row, pauses, now, machine=True))
        late = row["last_late_seconds"]
        return {
            **item,
            "description": facts.description,
            "labels": facts.labels,
            "schedule": facts.schedule,
            "spec_problem": facts.problem,
            "last_http_status": row["last_http_status"],
            "last_kind": row["last_kind"],
            "last_late_seconds": round(late, 3) if late is not None else None,
            "failing_streak": row["failing_streak"],
            "last_24h": dict(sorted(row["last_day"].items())),
        }

    async def task(self, request: web.Request) -> tuple[str, dict[str, Any]]:
        task_id = checked("task id", request.match_info["id"])
        at = instant(request, "at")
        async with self.store.reading() as conn:
            [clock] = await command_queries.clock_now(conn, now=None)
            now: datetime = clock["now"]
            found = await command_queries.task_get(conn, id=task_id)
            if not found:
                raise UserError(f"task {task_id!r} is not in the database; apply its file first")
            [row] = await dashboard_queries.tasks_page(
                conn, after=None, source=None, labels=None, status=None, now=None, limit=1, id=task_id
            )
            pauses = await operator_queries.pauses_readable(conn, ids=[task_id])
            runs, _ = await views.listing(conn, "runs", task_id, None, TASK_RUNS)
            runs_with = await views.with_notifications(conn, runs)
            readable = (await command_queries.notifications_readable(conn))[0]["readable"]
            notes = (await views.listing(conn, "notifications", task_id, None, 20))[0] if readable else []
            explained = await views.explain_lines(conn, task_id, at) if at is not None else None
        facts = self.specs.get(task_id, row["run_spec_text"])
        schedule = compile_schedule(facts.spec) if facts.spec is not None else None
        fires = upcoming(schedule, now, NEXT_FIRES) if schedule is not None else []
        excluded = excluded_between(schedule, now, fires[-1].at) if schedule is not None and fires else []
        stored = json.loads(row["spec_text"])
        return "task.html", {
            "database_now": utc_iso(now),
            "task": {
                **self._task_item(row, pauses, now),
                "created_at": utc_iso(found[0]["created_at"]),
                "updated_at": utc_iso(found[0]["updated_at"]),
                "revision": found[0]["revision"],
            },
            "settings": mask_spec(stored) if isinstance(stored, dict) else {"spec": stored},
            "next": render.next_item(task_id, facts.spec, fires, excluded) if facts.spec is not None else None,
            "fire_notes": [fire.note or fire.rule for fire in fires],
            "runs": views.json_runs(views.masked_runs(runs_with)),
            "notifications": render.json_rows([views.masked(note, "error") for note in notes]),
            "explain": (
                {"at": utc_iso(at), "lines": [mask_text(line) for line in explained]}
                if at is not None and explained is not None
                else None
            ),
        }

    async def timeline(self, request: web.Request) -> tuple[str, dict[str, Any]]:
        start, zone = instant(request, "from"), zone_param(request)
        source, after = param(request, "source"), param(request, "after")
        async with self.store.reading() as conn:
            [clock] = await command_queries.clock_now(conn, now=None)
            rows = await dashboard_queries.timeline_tasks(conn, after=after, source=source, limit=TASKS_PAGE + 1)
        planned, problems = [], []
        for row in rows[:TASKS_PAGE]:
            facts = self.specs.get(row["id"], row["spec_text"])
            if facts.spec is None:
                problems.append({"id": row["id"], "problem": facts.problem})
                continue
            planned.append(Planned(row["id"], facts.spec.timezone, compile_schedule(facts.spec)))
        # Expanding 100 schedules over a day is CPU work: off the event loop, as rendering is.
        data = await asyncio.to_thread(timeline, planned, start or clock["now"], zone)
        return "timeline.html", {
            "database_now": utc_iso(clock["now"]),
            "filters": {"from": utc_iso(start) if start else None, "tz": zone.key, "source": source},
            **data,
            "problems": problems,
            "tasks_shown": len(planned),
            "next_after": rows[TASKS_PAGE - 1]["id"] if len(rows) > TASKS_PAGE else None,
        }

    async def runs(self, request: web.Request) -> tuple[str, dict[str, Any]]:
        filters = {
            "task_id": param(request, "task"),
            "status": param(request, "status", STATUSES),
            "kind": param(request, "kind", KINDS),
            "since": instant(request, "since"),
            "until": instant(request, "until"),
            "before": whole(request, "before"),
        }
        async with self.store.reading() as conn:
            [clock] = await command_queries.clock_now(conn, now=None)
            rows = await dashboard_queries.runs_page(conn, **filters, limit=RUNS_PAGE + 1)
        shown = rows[:RUNS_PAGE]
        return "runs.html", {
            "database_now": utc_iso(clock["now"]),
            "filters": {
                "task": filters["task_id"],
                "status": filters["status"],
                "kind": filters["kind"],
                "since": request.query.get("since") or None,
                "until": request.query.get("until") or None,
            },
            "statuses": list(STATUSES),
            "kinds": list(KINDS),
            "runs": views.json_runs(views.masked_runs(shown)),
            "next_before": shown[-1]["id"] if len(rows) > RUNS_PAGE else None,
        }

    async def applies(self, request: web.Request) -> tuple[str, dict[str, Any]]:
        async with self.store.reading() as conn:
            [clock] = await command_queries.clock_now(conn, now=None)
            source = param(request, "source")
            rows = await command_queries.applies_list(conn, source=source, task_id=None, limit=APPLIES_PAGE)
            live = await command_queries.applies_live_sources(conn)
        return "applies.html", {
            "database_now": utc_iso(clock["now"]),
            "live_revisions": render.json_rows(live),
            "applies": render.json_rows(rows),
        }

    async def engines(self, request: web.Request) -> tuple[str, dict[str, Any]]:
        async with self.store.reading() as conn:
            [clock] = await command_queries.clock_now(conn, now=None)
            rows = await command_queries.engines_live(conn, seconds=ENGINES_SEEN_SECONDS)
        items = [views.engine_item(row) for row in rows]
        for item in items:
            item["live"] = item["heartbeat_age_seconds"] <= views.ENGINE_LIVE_SECONDS
        return "engines.html", {"database_now": utc_iso(clock["now"]), "engines": render.json_rows(items)}
