"""A target that echoes the request it received (request line, every header, the body), plainly, HTML-escaped,
upper-cased, JSON-encoded or into a redirect's path: no form of a `{ env = NAME }` value (in the query, a header,
bearer, basic or OAuth2 auth) or of an issued token is stored in any table, shown on any dashboard page, printed
by `runs`/`status` or logged (issue 49: yarl's query form `rt4AbC/dE%2BfG%3D%3DZz9q` was stored and shown).

A task's body cannot hold `{ env = NAME }` (spec/target.py), so the body echoed is a literal.
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import markupsafe
import psycopg
import pytest
import yarl

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.files.notifiers import load_notifiers
from reconciler.files.tasks import load_dir
from reconciler.reconcile.apply import apply_tasks
from reconciler.targets.http import Firer
from reconciler.targets.secrets import REDACTED
from reconciler.web.app import make_app, serve
from reconciler.web.dashboard import Dashboard
from tests.builders import cli, cron, write_tasks
from tests.integration.engine_support import NOW

SECRETS = {
    "Q_ISSUE": "rt4AbC/dE+fG==Zz9q",  # the issue's: sent as rt4AbC/dE%2BfG%3D%3DZz9q
    "Q_WILD": "qK7vX2/+=&<>'\" ünï€😀ß Zw",  # a query value may be any text
    "H_VALUE": "hD3wY8/+=&<>'\" Rt",  # a header value: visible ASCII and spaces
    "BEARER": "bR5tN1/+=&<>'\"Lk",
    "BASIC_PW": "pW9sQ4/+=&<>'\"Jx",
    "IDP": "iD2pZ6/+=&<>'\"Vc",
}
TOKEN = "tK8mW3/+=&<>'\"Ok"  # what the echo's token endpoint issues
CLIENT = "scheduler"
# A leading run of letters and digits of each value: any part of an echo that got through would show one.
CORES = ("rt4abc", "qk7vx2", "hd3wy8", "br5tn1", "pw9sq4", "id2pz6", "tk8mw3")

KINDS = {
    "query": 'query = { q = { env = "Q_ISSUE" }, w = { env = "Q_WILD" } }\nbody = "literal body"\n',
    "header": 'headers = { X-Echo = { env = "H_VALUE" } }\n',
    "bearer": '[target.auth]\nkind = "bearer"\ntoken = { env = "BEARER" }\n',
    "basic": '[target.auth]\nkind = "basic"\nusername = "svc"\npassword = { env = "BASIC_PW" }\n',
    "oauth": '[target.auth]\nkind = "oauth2_client_credentials"\ntoken_url = "{url}/oauth/token"\n'
    f'client_id = "{CLIENT}"\nclient_secret = {{ env = "IDP" }}\n',
}
ANSWERS = ("plain", "html", "jinja", "upper", "json", "redirect")


def answer(kind: str, echo: str) -> str:
    """The echo as the target answers it."""
    if kind == "html":
        return html.escape(echo)  # &#x27; and &quot;
    if kind == "jinja":
        return str(markupsafe.escape(echo))  # &#39; and &#34;
    if kind == "upper":
        return echo.upper()
    if kind == "json":
        return json.dumps({"echo": echo})  # \" and \uXXXX
    return echo


class Echo(BaseHTTPRequestHandler):
    """Answers /ANSWER/KIND with the request it received; /oauth/token issues TOKEN to CLIENT:IDP."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        echo = f"{self.requestline}\n{self.headers}\n{body}"
        headers: dict[str, str] = {}
        status = 200
        if self.path == "/oauth/token":
            expected = base64.b64encode(f"{CLIENT}:{SECRETS['IDP']}".encode()).decode()
            if self.headers.get("Authorization") != f"Basic {expected}":
                status = 401
            echo = json.dumps({"access_token": TOKEN, "expires_in": 3600, "echo": echo})
        elif self.path.startswith("/redirect/"):
            # Where the request's query and credentials go into the path, each in a form of the target's own.
            sent = self.path.replace("?", "/") + "/" + (self.headers.get("Authorization") or "")
            sent += "/" + (self.headers.get("X-Echo") or "")
            status, headers["Location"] = 302, "/back" + quote(sent, safe="/+=&%")
        else:
            echo = answer(self.path.split("/")[1], echo)
        payload = echo.encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer


@pytest.fixture
def echo_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def echo_engine(store: Store) -> AsyncIterator[Engine]:
    firer = Firer(concurrency=10, env=SECRETS)
    made = Engine(store, EngineConfig("echo-engine"), firer)
    yield made
    await firer.close()
    await made.deliverer.close()


def forms(value: str) -> set[str]:
    """Every form of `value` that must not be stored or shown: raw, percent-encoded (yarl's query form too),
    JSON-escaped, HTML-escaped two ways, each upper- and lower-cased."""
    encoded = {
        value,
        quote(value, safe=""),
        quote(value),
        quote_plus(value, safe=""),
        yarl.URL.build(query={"v": value}).raw_query_string[2:],
    }
    escaped = {
        text
        for form in encoded
        for text in (form, json.dumps(form)[1:-1], html.escape(form), html.escape(form, quote=False))
    }
    escaped |= {str(markupsafe.escape(form)) for form in encoded}
    return {cased for text in escaped for cased in (text, text.upper(), text.lower())}


def every_form() -> set[str]:
    found = {form for value in (*SECRETS.values(), TOKEN) for form in forms(value)}
    for user, password in (("svc", SECRETS["BASIC_PW"]), (CLIENT, SECRETS["IDP"])):
        encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
        found |= {encoded, encoded.upper(), encoded.lower()}
    return found


def exposed(text: str) -> list[str]:
    """What of any secret `text` shows: a form of one, or a part (its letters and digits)."""
    lowered = text.lower()
    return sorted({form for form in every_form() if form in text} | {core for core in CORES if core in lowered})


def every_table(dsn: str) -> str:
    """Every row of every table and view outside the system catalogs, each column as text."""
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT format('%I.%I', table_schema, table_name) FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1"
        ).fetchall()
        assert len(tables) > 10, tables
        dumped = []
        for (table,) in tables:
            rows = conn.execute(f"SELECT t::text, to_jsonb(t) FROM {table} t").fetchall()
            for row_text, columns in rows:
                dumped += [row_text, *(str(value) for value in columns.values())]
    return "\n".join(dumped)


async def apply_echo_tasks(store: Store, root: Path, url: str) -> list[str]:
    """A task per way of answering and place of a secret, each notifying `hook` when it fails; their ids."""
    files = {"notifiers.d/hook": f'kind = "webhook"\nurl = "{url}/plain/hook"\n'}
    for how in ANSWERS:
        for kind, target in KINDS.items():
            text = cron(f"{url}/{how}/{kind}", policy="retries = 0", target=target.replace("{url}", url))
            files[f"tasks.d/echo/{how}-{kind}"] = text + '[notify]\nfailure = ["hook"]\n'
    write_tasks(root, files)
    loaded = load_dir(root / "tasks.d", "tasks.d")
    notifiers = load_notifiers(root / "notifiers.d", "notifiers.d")
    assert loaded.errors == [] and notifiers.errors == [], (loaded.errors, notifiers.errors)
    await apply_tasks(store, loaded.tasks, "default", NOW, declared=[notifiers])
    return sorted(task.id for task in loaded.tasks)


async def pages(dsn: str, task_ids: list[str]) -> dict[str, str]:
    """Every dashboard page about these tasks and their runs, as HTML and as JSON."""
    dashboard = Dashboard(Store(dsn, max_size=2))
    app = make_app(None)
    dashboard.add_routes(app)
    app.on_cleanup.append(lambda _: dashboard.close())
    served = await serve(app, "127.0.0.1:0")
    shown: dict[str, str] = {}
    try:
        paths = ["/", "/runs", "/timeline", "/applies", "/engines", *(f"/tasks/{task}" for task in task_ids)]
        async with httpx.AsyncClient() as client:
            for path in paths:
                for query in ("", "?format=json", "?status=failed"):
                    response = await client.get(served.url + path + query)
                    assert response.status_code == 200, (path, response.text[:300])
                    shown[path + query] = response.text
    finally:
        await served.close()
    return shown


async def test_an_echoing_target_leaves_no_form_of_a_secret_anywhere(
    store: Store, dsn: str, echo_engine: Engine, echo_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    task_ids = await apply_echo_tasks(store, tmp_path, echo_url)
    report = await echo_engine.run_once(NOW + timedelta(minutes=5))
    assert (report.succeeded, report.failed) == (25, 5)

    with psycopg.connect(dsn) as conn:
        stored = dict(conn.execute("SELECT task_id, concat(error, ' | ', response_excerpt) FROM scheduler.runs"))
        events = conn.execute("SELECT count(*) FROM scheduler.notifications").fetchone()
    # The echoes arrived and were stored, scrubbed: the check below is not vacuous.
    assert events == (5,)
    assert f"q={REDACTED}&w={REDACTED}" in stored["echo/plain-query"], stored["echo/plain-query"]
    assert f"Authorization: Bearer {REDACTED}" in stored["echo/plain-bearer"]
    assert f"AUTHORIZATION: BASIC {REDACTED}" in stored["echo/upper-basic"]
    assert f"X-Echo: {REDACTED}" in stored["echo/html-header"] and f"Bearer {REDACTED}" in stored["echo/jinja-oauth"]
    assert "literal body" in stored["echo/json-query"]
    for task in task_ids:
        if "/redirect-" in task:
            assert f"HTTP 302; redirects to {echo_url}/…, which is not followed" in stored[task], stored[task]
        else:
            assert REDACTED in stored[task], (task, stored[task])

    assert exposed(every_table(dsn)) == []
    for path, page in (await pages(dsn, task_ids)).items():
        assert exposed(page) == [] and exposed(html.unescape(page)) == [], path
    for args in (("runs", "-v"), ("runs", "--format", "json"), ("status",), ("status", "--format", "json")):
        code, out, err = await asyncio.to_thread(cli, dsn, None, *args)
        assert code == 0, err
        assert exposed(out + err) == [], args
    assert REDACTED in (await asyncio.to_thread(cli, dsn, None, "runs", "-v", "echo/plain-query"))[1]
    assert exposed(caplog.text) == []
