"""What every request carries (docs/requests.md): who sent it, which run and kind it is, its trace, and a Standard
Webhooks signature that a real aiohttp target verifies with the reference library (`standardwebhooks`), across a
retry and a rotated pair of keys; the docs' table of headers is what a target receives, header by header."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

from reconciler import __version__
from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.operate.audit import Operator
from reconciler.operate.runs import trigger
from reconciler.targets.http import Firer
from tests.builders import cli, cron
from tests.integration.engine_support import NOW, SECRET, RecordingSleep, runs, setup
from tests.integration.test_dashboard import dashboard_at

NEW = "whsec_" + base64.b64encode(b"n" * 32).decode()
OLD = "whsec_" + base64.b64encode(b"o" * 32).decode()
ENV = {"WH_NEW": NEW, "WH_OLD": OLD, "API_KEY": SECRET}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "requests.md"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Target:
    """An aiohttp target: records each request, answers 401 to one whose signature does not verify with the keys
    its path is given, else the next scripted status (then 200)."""

    url: str = ""
    got: list[Received] = field(default_factory=list)
    keys: dict[str, list[str]] = field(default_factory=dict)
    statuses: dict[str, list[int]] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.got.append(Received(request.path, dict(request.headers), body))
        for key in self.keys.get(request.path, []):
            try:
                Webhook(key).verify(body, dict(request.headers), json_parse=False)
            except WebhookVerificationError as exc:
                return web.Response(status=401, text=str(exc))
        script = self.statuses.get(request.path, [])
        return web.Response(status=script.pop(0) if script else 200, text="ok")

    def at(self, path: str) -> list[Received]:
        return [r for r in self.got if r.path == path]


@pytest.fixture
async def target() -> AsyncIterator[Target]:
    found = Target()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    found.url = f"http://127.0.0.1:{port}"
    try:
        yield found
    finally:
        await runner.cleanup()


@pytest.fixture
async def signer(store: Store) -> AsyncIterator[Engine]:
    firer = Firer(concurrency=10, env=ENV)
    firer.sleep = RecordingSleep()
    made = Engine(store, EngineConfig("signer", public_url="http://jobs.example.test"), firer)
    yield made
    await firer.close()
    await made.deliverer.close()


SIGNED = '[target.signing]\nkind = "standard-webhooks"\nsecret = { env = "WH_NEW" }\n'
ROTATED = '[target.signing]\nkind = "standard-webhooks"\nsecrets = [{ env = "WH_NEW" }, { env = "WH_OLD" }]\n'


def tampered(received: Received) -> bytes:
    """The body with its first byte changed (a body of none: one byte added)."""
    body = received.body or b" "
    return bytes([body[0] ^ 1]) + body[1:]


async def test_signed_requests_verify_with_the_reference_library_across_a_retry_and_a_rotation(
    store: Store, dsn: str, signer: Engine, target: Target, tmp_path: Path
) -> None:
    url = target.url
    target.keys = {"/one": [NEW], "/rotated": [NEW, OLD]}
    target.statuses = {"/one": [503]}
    files = {
        "one": cron(f"{url}/one", policy="retries = 1", target='json = { n = 1, text = "é" }\n' + SIGNED),
        "rotated": cron(f"{url}/rotated", target='body = "raw text"\n' + ROTATED),
    }
    await setup(store, tmp_path, files)
    report = await signer.run_once(NOW + timedelta(minutes=5))
    assert report.succeeded == 2, runs(dsn)
    first, retry = target.at("/one")
    assert (first.headers["X-Reconciler-Attempt"], retry.headers["X-Reconciler-Attempt"]) == ("1", "2")
    for received in (first, retry):
        Webhook(NEW).verify(received.body, received.headers, json_parse=False)
        assert received.headers["webhook-id"] == received.headers["Idempotency-Key"] == first.headers["webhook-id"]
        assert received.body == b'{"n":1,"text":"\\u00e9"}'  # compact, as sent and signed
    [rotated] = target.at("/rotated")
    assert len(rotated.headers["webhook-signature"].split(" ")) == 2
    for key in (NEW, OLD):  # a target holding either key verifies it
        Webhook(key).verify(rotated.body, rotated.headers, json_parse=False)
    for received in (first, retry, rotated):
        with pytest.raises(WebhookVerificationError):
            Webhook(NEW).verify(tampered(received), received.headers, json_parse=False)
        with pytest.raises(WebhookVerificationError):
            Webhook("whsec_" + base64.b64encode(b"x" * 32).decode()).verify(received.body, received.headers)
    with psycopg.connect(dsn) as conn:  # no key, in any form, is stored
        stored = str(conn.execute("SELECT array_agg(t) FROM scheduler.runs t").fetchone())
        stored += str(conn.execute("SELECT array_agg(t) FROM scheduler.tasks t").fetchone())
    for key in (NEW, OLD):
        assert key not in stored and key.removeprefix("whsec_") not in stored


async def test_a_key_not_set_or_not_a_key_fails_that_run_naming_the_variable(
    store: Store, dsn: str, signer: Engine, target: Target, tmp_path: Path
) -> None:
    signer.firer.env = {"WH_NEW": "not a key", "API_KEY": SECRET}
    missing = '[target.signing]\nkind = "standard-webhooks"\nsecret = { env = "WH_GONE" }\n'
    files = {"bad": cron(f"{target.url}/bad", target=SIGNED), "gone": cron(f"{target.url}/gone", target=missing)}
    await setup(store, tmp_path, files)
    await signer.run_once(NOW + timedelta(minutes=5))
    found = {row["task_id"]: row for row in runs(dsn)}
    assert found["bad"]["status"] == "failed" and "WH_NEW is not a Standard Webhooks secret" in str(
        found["bad"]["error"]
    )
    assert "not a key" not in str(found["bad"]["error"])
    assert found["gone"]["status"] == "failed" and "WH_GONE" in str(found["gone"]["error"])
    assert target.got == []  # neither request left


async def test_every_request_says_who_sent_it_its_run_its_kind_and_its_trace(
    store: Store, dsn: str, signer: Engine, target: Target, tmp_path: Path
) -> None:
    await setup(store, tmp_path, {"t": cron(f"{target.url}/t")})
    await signer.run_once(NOW + timedelta(minutes=5))
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    manual = await trigger(store, "t", Operator("tester"), caller)
    await signer.run_once(NOW + timedelta(minutes=6))
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, kind, replace(trace_id::text, '-', '') FROM scheduler.runs ORDER BY id"
        ).fetchall()
    scheduled, by_hand = target.at("/t")
    assert [(r[1]) for r in rows] == ["scheduled", "manual"] and rows[1][0] == manual.run_id
    for received, (run_id, kind, trace_id) in zip((scheduled, by_hand), rows, strict=True):
        assert received.headers["User-Agent"] == f"reconciler/{__version__}"
        assert received.headers["X-Reconciler-Kind"] == kind
        assert received.headers["X-Reconciler-Run-Id"] == str(run_id)
        match = re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-01", received.headers["traceparent"])
        assert match is not None and match.group(1) == trace_id
    assert by_hand.headers["traceparent"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert by_hand.headers["traceparent"] != caller  # the run's own attempt span, a child of the caller's
    assert by_hand.headers["Idempotency-Key"] == f"t@manual-{manual.run_id}"


def documented_headers() -> set[str]:
    """Every header named in the first column of docs/requests.md's table (lower-cased)."""
    text = DOCS.read_text()
    table = text[text.index("| Header |") : text.index("\n\n", text.index("| Header |"))]
    names: set[str] = set()
    for line in table.splitlines()[2:]:
        names.update(name.lower() for name in re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


async def test_the_docs_table_of_headers_is_what_a_target_receives(
    store: Store, dsn: str, signer: Engine, target: Target, tmp_path: Path
) -> None:
    everything = (
        'headers = { X-Tenant = "eu" }\njson = { n = 1 }\n[target.auth]\nkind = "bearer"\n'
        'token = { env = "API_KEY" }\n' + SIGNED
    )
    job = 'completion = "callback"\ndeadline = "1h"\n'
    files = {"all": cron(f"{target.url}/all", target=everything), "job": cron(f"{target.url}/job", target=job)}
    await setup(store, tmp_path, files)
    await signer.run_once(NOW + timedelta(minutes=5))
    received = {name.lower() for r in target.got for name in r.headers} - {"x-tenant"}
    assert len(target.got) == 2
    assert received == documented_headers()


async def test_runs_json_and_the_task_page_show_the_runs_trace_id(
    store: Store, dsn: str, signer: Engine, target: Target, tmp_path: Path
) -> None:
    await setup(store, tmp_path, {"t": cron(f"{target.url}/t")})
    await signer.run_once(NOW + timedelta(minutes=5))
    [received] = target.at("/t")
    trace_id = received.headers["traceparent"].split("-")[1]
    code, out, err = await asyncio.to_thread(cli, dsn, None, "runs", "t", "--format", "json")
    assert code == 0, err
    [run] = json.loads(out)
    assert (str(run["id"]), run["trace_id"]) == (received.headers["X-Reconciler-Run-Id"], trace_id)
    served = await dashboard_at(dsn)
    try:
        async with httpx.AsyncClient() as client:
            page = (await client.get(f"{served.url}/tasks/t")).text
            listed = (await client.get(f"{served.url}/runs", params={"format": "json"})).json()
    finally:
        await served.close()
    assert f"trace <code>{trace_id}</code>" in page
    assert trace_id in json.dumps(listed)
