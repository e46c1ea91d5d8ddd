"""The dashboard's data and rules on a real database (the pages in a real browser: tests/browser/).

What the pages show is what the CLI prints, by construction; here that is checked from the outside:
`status --format json`'s task items are the task list's (which adds to them), the task page's next
fire times are `next --format json`'s and its "why at T?" is `explain --at T`'s lines. A role with
SELECT only serves every page; anything but GET and HEAD is a 405; a token guards the pages but not
/metrics; and the `dashboard` command prints its URL and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest

from reconciler.db import dashboard_queries
from reconciler.db.store import QUERIES, Store
from reconciler.engine.loop import Engine
from reconciler.runs import STATUSES
from reconciler.web.app import Served, make_app, serve
from reconciler.web.dashboard import Dashboard
from tests.builders import (
    clean_env,
    cli,
    cron,
    listening_addr,
    reconciler_argv,
    start_engines,
    task_text,
    wait_registered,
    write_tasks,
)
from tests.helpers import async_wait_until, wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, metrics_endpoint, setup
from tests.integration.limits_support import add_limit
from tests.integration.test_roles import Roles
from tests.partitioning import scanned_whole

PAGES = ("/", "/tasks/ops/ping", "/timeline", "/runs", "/applies", "/engines")
HOSTILE = "<script>window.__pwned=1</script> <img src=x onerror=\"alert('x')\"> \"quoted\" 'single'"


@pytest.fixture
async def site(dsn: str) -> AsyncIterator[str]:
    """The dashboard on its own pool, served on a port the kernel picks; its base URL."""
    served = await dashboard_at(dsn)
    try:
        yield served.url
    finally:
        await served.close()


async def dashboard_at(dsn: str, token: str | None = None) -> Served:
    dashboard = Dashboard(Store(dsn, max_size=2))
    app = make_app(token)
    dashboard.add_routes(app)
    app.on_cleanup.append(lambda _: dashboard.close())
    return await serve(app, "127.0.0.1:0")


async def fired(store: Store, engine: Engine, tmp_path: Path, http: tuple[str, Recorder]) -> None:
    """Three tasks applied and one claim: ops/ping succeeded at NOW, ops/broken failed (HTTP 500)."""
    url, recorder = http
    recorder.script("/broken", statuses=[500])
    await setup(
        store,
        tmp_path,
        {
            "ops/ping": task_text(
                'description = "Ping it"\n[labels]\nteam = "platform"',
                trigger='kind = "interval"\nevery = "1m"',
                url=f"{url}/ok",
            ),
            "ops/broken": task_text(
                trigger='kind = "interval"\nevery = "1m"', url=f"{url}/broken", policy="retries = 0"
            ),
            "billing/invoices": cron(url, "30 2 * * *", top='timezone = "Europe/Berlin"'),
        },
        NOW - timedelta(minutes=1),
    )
    await engine.run_once(NOW)


async def acli(dsn: str | None, tasks: Path | None, *args: str) -> tuple[int, str, str]:
    """The CLI in a thread: it runs its own event loop."""
    return await asyncio.to_thread(cli, dsn, tasks, *args)


async def get_json(base: str, path: str, **params: str) -> dict[str, object]:
    async with httpx.AsyncClient() as client:
        response = await client.get(base + path, params={**params, "format": "json"})
    assert response.status_code == 200, response.text
    data: dict[str, object] = response.json()
    return data


async def test_the_task_list_is_statuss_items_and_more(
    store: Store, engine: Engine, dsn: str, site: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await fired(store, engine, tmp_path, http)
    code, out, err = await acli(dsn, None, "status", "--format", "json")
    assert code == 0, err
    status = {task["id"]: task for task in json.loads(out)["tasks"]}
    listed = {task["id"]: task for task in (await get_json(site, "/"))["tasks"]}  # type: ignore[union-attr]
    assert list(listed) == sorted(status) == ["billing/invoices", "ops/broken", "ops/ping"]
    for task_id, item in status.items():
        assert {key: listed[task_id][key] for key in item} == item, task_id
    ping, broken = listed["ops/ping"], listed["ops/broken"]
    assert ping["description"] == "Ping it" and ping["labels"] == {"team": "platform"}
    assert ping["last_status"] == "succeeded" and ping["last_http_status"] == 200 and ping["failing_streak"] == 0
    assert broken["last_status"] == "failed" and broken["last_http_status"] == 500 and broken["failing_streak"] == 1
    assert listed["billing/invoices"]["schedule"] == "At 02:30 (Europe/Berlin)"
    failing = await get_json(site, "/", status="failed")
    assert [task["id"] for task in failing["tasks"]] == ["ops/broken"]  # type: ignore[union-attr]
    labelled = await get_json(site, "/", label="team=platform")
    assert [task["id"] for task in labelled["tasks"]] == ["ops/ping"]  # type: ignore[union-attr]


async def test_the_task_page_says_what_next_and_explain_say(
    store: Store, engine: Engine, dsn: str, site: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await fired(store, engine, tmp_path, http)
    at = "2026-10-25T00:45:00+00:00"  # Berlin's fall-back night
    page = await get_json(site, "/tasks/billing/invoices", at=at)
    now = str(page["database_now"])
    files = write_tasks(
        tmp_path / "files" / "tasks.d",
        {"billing/invoices": cron(http[0], "30 2 * * *", top='timezone = "Europe/Berlin"')},
    )
    code, out, err = await acli(
        None, files, "next", "billing/invoices", "--count", "10", "--after", now, "--format", "json"
    )
    assert code == 0, err
    assert page["next"] == json.loads(out)[0]
    code, out, err = await acli(dsn, None, "explain", "billing/invoices", "--at", at)
    assert code == 0, err
    assert page["explain"] == {"at": at, "lines": out.splitlines()}
    runs = await get_json(site, "/tasks/ops/broken")
    [run] = runs["runs"]  # type: ignore[misc]
    assert run["status"] == "failed" and run["http_status"] == 500 and run["notifications"] == []


async def test_a_select_only_role_serves_every_page(
    store: Store, engine: Engine, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await fired(store, engine, tmp_path, http)
    roles = Roles(dsn)
    try:
        reader = roles.create("dash")
        roles.grant(dashboard=reader)
        served = await dashboard_at(reader)
        try:
            async with httpx.AsyncClient() as client:
                for path in PAGES:
                    for params in ({}, {"format": "json"}):
                        response = await client.get(served.url + path, params=params)
                        assert response.status_code == 200, (path, response.text)
        finally:
            await served.close()
        with psycopg.connect(reader) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE scheduler.tasks SET enabled = false")
    finally:
        roles.drop()


async def test_only_get_and_head_and_the_headers_on_every_response(site: str, store: Store) -> None:
    await store.init_schema()
    async with httpx.AsyncClient() as client:
        for path in (*PAGES, "/static/style.css", "/nowhere"):
            for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"):
                response = await client.request(method, site + path)
                assert response.status_code == 405, (method, path)
                assert response.headers["Allow"] == "GET, HEAD"
            head = await client.head(site + path)
            assert head.status_code in (200, 404), path
            csp = head.headers["Content-Security-Policy"]
            assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert head.headers["X-Content-Type-Options"] == "nosniff"
            assert head.headers["Referrer-Policy"] == "no-referrer"


async def test_a_token_guards_the_pages_but_not_metrics_and_probes(store: Store, engine: Engine, dsn: str) -> None:
    await store.init_schema()
    endpoint, url = await metrics_endpoint(engine, store, dashboard=Dashboard(Store(dsn, max_size=2)), token="t0k3n")
    try:
        async with httpx.AsyncClient() as client:
            for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "t0k3n"}):
                response = await client.get(url + "/", headers=header)
                assert response.status_code == 401 and "t0k3n" not in response.text
            assert (await client.get(url + "/", headers={"Authorization": "Bearer t0k3n"})).status_code == 200
            assert (await client.get(url + "/metrics")).status_code == 200
            assert (await client.get(url + "/healthz")).status_code == 200
    finally:
        await endpoint.close()


async def test_hostile_strings_are_text(store: Store, engine: Engine, site: str, tmp_path: Path) -> None:
    label = '"><script>alert(1)</script>'
    await setup(
        store,
        tmp_path,
        {"ops/hostile": task_text(f"description = {json.dumps(HOSTILE)}\n[labels]\nx = {json.dumps(label)}")},
    )
    async with httpx.AsyncClient() as client:
        for path in ("/", "/tasks/ops/hostile"):
            body = (await client.get(site + path)).text
            assert "<script>" not in body and 'onerror="' not in body, path
            assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in body
    listed = await get_json(site, "/")
    assert listed["tasks"][0]["description"] == HOSTILE  # type: ignore[index]


async def test_mistakes_are_one_line_and_their_status(site: str, store: Store, dsn: str) -> None:
    await store.init_schema()
    async with httpx.AsyncClient() as client:
        for path, params, status, says in (
            ("/tasks/nope", {}, 404, "'nope' is not in the database"),
            ("/runs", {"status": "bogus"}, 400, "status: 'bogus' is not one of"),
            ("/runs", {"since": "yesterday"}, 400, "since: 'yesterday' is not an ISO date-time"),
            ("/runs", {"before": "-1"}, 400, "before: '-1' is not a whole number"),
            ("/timeline", {"tz": "Mars/Olympus"}, 400, "is not an IANA time zone"),
            ("/timeline", {"from": "9999-12-31T23:00:00Z"}, 400, "from:"),
            ("/", {"label": "nokey"}, 400, "label: 'nokey' names no label and value"),
            ("/", {"after": "x" * 600}, 400, "after: longer than 500 characters"),
        ):
            response = await client.get(site + path, params={**params, "format": "json"})
            assert response.status_code == status, (path, params, response.text)
            assert says in response.json()["error"], response.text
            page = await client.get(site + path, params=params)
            assert page.status_code == status and "Traceback" not in page.text
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA scheduler CASCADE")
        response = await client.get(site + "/", params={"format": "json"})
        assert response.status_code == 503 and "`reconciler db init`" in response.json()["error"]


HOSTILE_VALUES = (
    "\x00",
    "a\x00b",
    "\r\nX-Injected: 1",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    str(2**31),
    str(2**63),
    "-1",
    "NaN",
    "inf",
    "1e309",
    "../../etc/passwd",
    "%00",
    "é漢字🙂",
    "x" * 499,
    "'; DROP TABLE scheduler.tasks; --",
    "a=b=c",
    " ",
)
PARAMS = (
    "source",
    "label",
    "status",
    "after",
    "at",
    "from",
    "tz",
    "task",
    "kind",
    "since",
    "until",
    "before",
    "format",
)


async def test_hostile_parameters_never_break_a_page(
    store: Store, engine: Engine, site: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await fired(store, engine, tmp_path, http)
    async with httpx.AsyncClient() as client:
        for path in (*PAGES, "/tasks/%00", "/tasks/%E2%80%AE", "/tasks/" + "x" * 600):
            for name in PARAMS:
                for value in HOSTILE_VALUES:
                    response = await client.get(site + path, params={name: value})
                    assert response.status_code in (200, 400, 404), (path, name, value, response.text[:300])
                    assert "Traceback" not in response.text and "X-Injected" not in response.headers
    async with httpx.AsyncClient() as client:  # and the database is still whole
        assert (await client.get(site + "/", params={"format": "json"})).json()["counts"]["tasks"] == 3


def test_the_dashboard_command_prints_its_url_and_stops_on_sigterm(dsn: str) -> None:
    proc = subprocess.Popen(
        reconciler_argv("dashboard", "--addr", "127.0.0.1:0", "--dsn", dsn),
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("dashboard: http://127.0.0.1:") and "read-only" in line, line
        url = line.split()[1]
        assert httpx.get(url, params={"format": "json"}, timeout=30).status_code in (200, 503)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_engine_passes_its_pages_to_its_own_dashboard_process_which_dies_with_it(dsn: str, tmp_path: Path) -> None:
    """`engine --metrics-addr`: the pages come from a child `reconciler dashboard` (started on the first page,
    given the token), /metrics from the engine; SIGKILL the engine and the child goes too (its stdin closes)."""
    [engine] = start_engines(
        dsn,
        ["e1"],
        tmp_path,
        "--metrics-addr",
        "127.0.0.1:0",
        "--dashboard-token-env",
        "DASH_TOKEN",
        env={"DASH_TOKEN": "s3cr3t-t0ken"},
    )
    try:
        wait_registered(dsn, [engine])
        base = f"http://{listening_addr(engine)}"
        assert httpx.get(base + "/", timeout=30).status_code == 401
        page = httpx.get(base + "/engines?format=json", headers={"Authorization": "Bearer s3cr3t-t0ken"}, timeout=60)
        assert page.status_code == 200 and [e["engine_id"] for e in page.json()["engines"]] == ["e1"]
        assert httpx.get(base + "/metrics", timeout=30).status_code == 200
        [child] = psutil.Process(engine.proc.pid).children()
        assert "dashboard" in child.cmdline() and "s3cr3t-t0ken" not in " ".join(child.cmdline())
        engine.proc.kill()
        engine.proc.wait(timeout=30)
        assert wait_until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, 30)
    finally:
        if engine.proc.poll() is None:
            engine.proc.kill()
            engine.proc.wait()
    assert "Traceback" not in engine.output()


def test_a_token_variable_that_is_not_set_is_one_line(dsn: str) -> None:
    code, _, err = cli(dsn, None, "dashboard", "--dashboard-token-env", "NOT_SET_ANYWHERE_42")
    assert code == 1
    assert err.strip() == (
        "error: --dashboard-token-env NOT_SET_ANYWHERE_42: NOT_SET_ANYWHERE_42 is not set or empty; "
        "export the token, or drop the option"
    )


async def test_a_task_waiting_for_a_limit_says_so(
    store: Store, engine: Engine, dsn: str, site: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await add_limit(store, "billing-api", max_in_flight=1)
    policy = 'limits = ["billing-api"]\nmisfire_grace_seconds = 600'
    await setup(store, tmp_path, {name: cron(f"{url}/{name}", "0 * * * *", policy) for name in ("a/one", "a/two")})
    report = await engine.claim(NOW + timedelta(hours=1))  # claimed, not fired: its run holds the one slot
    [waiter] = {"a/one", "a/two"} - {run.task_id for run in report.runs}
    listed = {task["id"]: task for task in (await get_json(site, "/"))["tasks"]}  # type: ignore[union-attr]
    assert listed[waiter]["waiting_for"] == "billing-api"
    async with httpx.AsyncClient() as client:
        page = (await client.get(f"{site}/tasks/{waiter}")).text
        index = (await client.get(f"{site}/")).text
    assert "waiting for limit billing-api" in page and "waiting for limit billing-api" in index
    code, out, err = await acli(dsn, None, "status")  # and `status` says so too: a flag and a line
    assert code == 0, err
    [row] = [line for line in out.splitlines() if line.startswith(f"{waiter} ")]
    assert row.endswith("WAITING"), out
    assert f"⧗ {waiter} waiting for limit billing-api (due since " in out, out


# ---------------------------------------------------------------- issue 49


def locked_reads(dsn: str) -> int:
    """Sessions of this database waiting for a lock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return int(row[0]) if row else 0


async def test_a_busy_pool_is_a_503_that_says_so_with_retry_after_never_a_dsn_error(store: Store, dsn: str) -> None:
    """The pool's one connection is held by a page waiting for a lock: the next pages wait their turn for
    the pool's timeout, then answer 503 saying the pool is busy, with Retry-After; nothing about the DSN."""
    await store.init_schema()
    dashboard = Dashboard(Store(dsn, max_size=1, timeout=0.5))
    app = make_app()
    dashboard.add_routes(app)
    app.on_cleanup.append(lambda _: dashboard.close())
    served = await serve(app, "127.0.0.1:0")
    try:
        async with await psycopg.AsyncConnection.connect(dsn) as blocker, httpx.AsyncClient(timeout=60) as client:
            async with blocker.transaction():
                await blocker.execute("LOCK TABLE scheduler.tasks IN ACCESS EXCLUSIVE MODE")
                held = asyncio.create_task(client.get(served.url + "/"))
                assert await async_wait_until(lambda: asyncio.to_thread(locked_reads, dsn), 30)
                busy = await client.get(served.url + "/", params={"format": "json"})
                page = await client.get(served.url + "/tasks/x")
            await held
    finally:
        await served.close()
    for response in (busy, page):
        assert response.status_code == 503 and response.headers["Retry-After"] == "5", response.text
    error = busy.json()["error"]
    assert "database connections stayed busy for 0.5 s" in error and "retry in 5 s" in error, error
    assert "cannot connect" not in error and "DSN" not in error and "check" not in error, error
    assert "stayed busy" in page.text and page.headers["Content-Type"].startswith("text/html")


async def test_a_missing_static_file_is_a_404_page_not_a_download(site: str) -> None:
    async with httpx.AsyncClient() as client:
        for path in ("/static/missing.css", "/static/", "/static/..%2Fapp.py", "/nowhere"):
            response = await client.get(site + path)
            assert response.status_code == 404, path
            assert response.headers["Content-Type"] == "text/plain; charset=utf-8", path
            assert (
                response.text == "404: Not Found\n"
                and "default-src 'self'" in response.headers["Content-Security-Policy"]
            ), path
        style = await client.get(site + "/static/style.css")
        assert style.status_code == 200 and style.headers["Content-Type"].startswith("text/css")


async def test_the_bearer_scheme_is_case_insensitive(store: Store, dsn: str) -> None:
    await store.init_schema()
    served = await dashboard_at(dsn, token="t0k3n")
    try:
        async with httpx.AsyncClient() as client:
            for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
                response = await client.get(served.url + "/engines", headers={"Authorization": f"{scheme} t0k3n"})
                assert response.status_code == 200, scheme
            for header in ("bearer wrong", "Basic t0k3n", "bearer", "t0k3n"):
                response = await client.get(served.url + "/engines", headers={"Authorization": header})
                assert response.status_code == 401, header
    finally:
        await served.close()


async def test_a_backfill_run_is_neither_the_last_run_nor_late(
    store: Store, engine: Engine, dsn: str, site: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    """ops/ping's scheduled run at NOW; then a backfill re-runs an occurrence of 43 days before, and one of an
    hour ago, both just now: its last run (on `/` and in `status`) and lateness stay the scheduled run's, and the
    last day's counts are of the schedule's runs."""
    await fired(store, engine, tmp_path, http)
    before = {task["id"]: task for task in (await get_json(site, "/"))["tasks"]}["ops/ping"]  # type: ignore[union-attr]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, started_at, finished_at, "
            "                            http_status) "
            "SELECT 'ops/ping', at, 'backfill', 'succeeded', 1, now(), now(), 200 "
            "  FROM unnest(ARRAY[%s::timestamptz - interval '43 days', now() - interval '1 hour']) at",
            (NOW,),
        )
    ping = {task["id"]: task for task in (await get_json(site, "/"))["tasks"]}["ops/ping"]  # type: ignore[union-attr]
    assert ping["last_kind"] == "scheduled" and ping["last_scheduled_for"] == NOW.isoformat(), ping
    for key in ("last_late_seconds", "last_status", "last_http_status", "last_24h"):  # the engine's run's (at NOW)
        assert ping[key] == before[key], (key, ping, before)
    code, out, err = await acli(dsn, None, "status", "--format", "json")
    assert code == 0, err
    [status] = [task for task in json.loads(out)["tasks"] if task["id"] == "ops/ping"]
    assert status["last_run_at"] == NOW.isoformat() and status["last_status"] == "succeeded", status


async def test_the_last_day_counts_are_an_index_only_count_not_a_heap_read(store: Store, dsn: str) -> None:
    """20 tasks firing every 10 s for a day (172,800 runs): the page's counts read runs_day_idx alone."""
    await store.init_schema()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash) "
            "SELECT 't' || lpad(g::text, 2, '0'), 'day', %s::jsonb, 'h' FROM generate_series(1, 20) g",
            ('{"trigger": {"kind": "interval", "every": "10s"}, "target": {"url": "http://127.0.0.1:9/"}}',),
        )
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, started_at, finished_at) "
            "SELECT 't' || lpad(g::text, 2, '0'), at, 'scheduled', "
            "       CASE WHEN mod(n, 6) = 0 THEN 'failed' ELSE 'succeeded' END, at, at "
            "  FROM generate_series(0, 8639) n, LATERAL (SELECT now() - interval '10 seconds' * n AS at) x, "
            "       generate_series(1, 20) g"
        )
        conn.execute("VACUUM ANALYZE scheduler.runs")
        params = {"after": None, "source": None, "labels": None, "status": None, "now": None, "id": None}
        params |= {"limit": 101, "statuses": list(STATUSES)}
        found = "\n".join(str(row[0]) for row in conn.execute("EXPLAIN " + QUERIES["dashboard_tasks"], params))
    counts = [line for line in found.splitlines() if "scheduled_for >" in line or "_day_idx" in line]
    assert any(re.search(r"Index Only Scan using runs_\w+_day_idx", line) for line in counts), found
    assert scanned_whole(dsn, found, "Seq Scan|Bitmap Heap Scan") == [], found
    listed = await get_json_of(store)
    assert {n for task in listed for n in task["last_day"]} == {"succeeded", "failed"}
    assert all(8500 < sum(task["last_day"].values()) <= 8640 for task in listed), listed


async def get_json_of(store: Store) -> list[dict[str, Any]]:
    """The task list's rows, as the dashboard reads them."""
    async with store.reading() as conn:
        rows = await dashboard_queries.tasks_page(
            conn, after=None, source=None, labels=None, status=None, now=None, limit=101
        )
    return [dict(row) for row in rows]
