"""Hostile callbacks at a job (completion = "callback"): forged and replayed tokens, another run's id, bodies of
1 MiB, nested deep, with NUL or invalid UTF-8, a thousand callbacks a second at one run, and callbacks while the
database is stopped. Each gets a one-line 4xx or 503, never a traceback, and nothing is written that should not be."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from tests.builders import EngineProcess, clean_env, listening_addr, reconciler_argv, registered, stop
from tests.helpers import wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import metrics_endpoint, setup
from tests.pgcontrol import PrivateServer, needs_pgserver

PUBLIC = "http://jobs.example.test"
SECRET = "hostile-callback-secret-4d2c9e"


@dataclass
class Job:
    engine: Engine
    base: str  # the engine's server
    run_id: int
    token: str
    dsn: str

    def url(self, action: str, run_id: int | None = None, token: str | None = None) -> str:
        return f"{self.base}/runs/{run_id or self.run_id}/{token or self.token}/{action}"

    def row(self) -> dict[str, Any]:
        with psycopg.connect(self.dsn, row_factory=dict_row) as conn:
            found = conn.execute(
                "SELECT status, progress, output, error, heartbeat_at FROM scheduler.runs WHERE id = %s",
                (self.run_id,),
            ).fetchone()
        assert found is not None
        return found


def task(url: str, name: str) -> str:
    return (
        f'[trigger]\nkind = "once"\nat = 2026-12-02T12:00:05Z\n[target]\nurl = "{url}/{name}"\n'
        f'completion = "callback"\ndeadline = "1h"\nheaders = {{ X-Api-Token = {{ env = "JOB_SECRET" }} }}\n'
        "[policy]\nmisfire_grace_seconds = 31622400\n"
    )


@pytest.fixture
async def jobs(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Job, Job]]:
    """Two accepted jobs (two runs) on an in-process engine serving its callbacks."""
    url, rec = http
    monkeypatch.setenv("JOB_SECRET", SECRET)
    for name in ("one", "two"):
        rec.script(f"/{name}", statuses=[202])
    await setup(store, tmp_path, {"one": task(url, "one"), "two": task(url, "two")})
    engine = Engine(store, EngineConfig("hostile", public_url=PUBLIC))
    endpoint, base = await metrics_endpoint(engine, store)
    try:
        report = await engine.claim(None)
        outcomes = await asyncio.gather(*(engine.execute(run) for run in report.runs))
        assert [o.status for o in outcomes] == ["accepted", "accepted"]
        found = []
        for run in sorted(report.runs, key=lambda r: r.task_id):
            [request] = rec.paths(f"/{run.task_id}")
            token = request.headers["X-Reconciler-Callback"].rsplit("/", 1)[1]
            found.append(Job(engine, base, run.run_id, token, dsn))
        yield found[0], found[1]
    finally:
        await endpoint.close()
        await engine.firer.close()


def assert_one_line(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.text.count("\n") == 1 and "Traceback" not in response.text, response.text[:300]
    assert response.headers["Content-Type"].startswith("application/json")
    json.loads(response.text)


async def test_forged_replayed_and_crossed_tokens_get_a_404_that_says_nothing(jobs: tuple[Job, Job]) -> None:
    one, two = jobs
    async with httpx.AsyncClient() as client:
        forged = secrets.token_urlsafe(32)
        cases = [
            one.url("complete", token=forged),
            one.url("complete", token=two.token),  # another run's token
            one.url("complete", run_id=two.run_id),  # this run's token with another run's id
            one.url("complete", run_id=999_999_999),  # no such run
            one.url("complete", token="short"),
            one.url("complete", token=one.token + "x"),
            f"{one.base}/runs/-1/{one.token}/complete",
            f"{one.base}/runs/{'9' * 40}/{one.token}/complete",
            f"{one.base}/runs/%F0%9F%92%A5/{one.token}/complete",
        ]
        answers = [await client.post(url, json={"status": "failed"}) for url in cases]
    for answer in answers:
        assert_one_line(answer, 404)
    assert {a.text for a in answers} == {answers[0].text}  # the same words whether the run exists or not
    assert one.row()["status"] == two.row()["status"] == "running"
    async with httpx.AsyncClient() as client:
        done = await client.post(one.url("complete"), json={"status": "succeeded", "output": {"n": 1}})
        assert_one_line(done, 200)
        replay = await client.post(one.url("complete"), json={"status": "failed", "error": "again"})
        assert_one_line(replay, 409)
        beat = await client.post(one.url("heartbeat"))
        assert_one_line(beat, 409)
    assert replay.json()["status"] == "succeeded" and replay.json()["output"] == {"n": 1}
    assert one.row()["status"] == "succeeded" and one.row()["error"] is None


async def test_bad_bodies_get_a_one_line_4xx_and_change_nothing(jobs: tuple[Job, Job]) -> None:
    one, _ = jobs
    nested = b"[" * 5_000 + b"]" * 5_000
    cases: list[tuple[str, bytes, int]] = [
        ("complete", b"x" * (1024 * 1024), 413),
        ("heartbeat", b'{"a": "' + b"x" * 5000 + b'"}', 413),
        ("complete", b'{"status": "succeeded", "output": ' + nested + b"}", 400),
        ("heartbeat", b'{"a":' * 600 + b"1" + b"}" * 600, 400),
        ("complete", b'{"status": "succeeded", "error": "\xff\xfe"}', 400),
        ("complete", b"not json", 400),
        ("complete", b"", 400),
        ("complete", b"[1, 2]", 400),
        ("complete", b'{"status": "done"}', 400),
        ("complete", b'{"status": "succeeded", "extra": 1}', 400),
        ("complete", b'{"status": "succeeded", "output": [1]}', 400),
        ("complete", b'{"status": "failed", "error": 12}', 400),
        ("complete", b'{"status": "succeeded", "output": {"x": NaN}}', 400),
    ]
    async with httpx.AsyncClient() as client:
        for action, body, status in cases:
            answer = await client.post(one.url(action), content=body)
            assert_one_line(answer, status)
        assert one.row()["status"] == "running" and one.row()["output"] is None and one.row()["progress"] is None
        # NUL, a lone surrogate and the task's own secret in what the job reports: stored replaced and scrubbed
        progress = {"note": "a\u0000b", "odd": "\ud800", SECRET: f"token {SECRET}"}
        body = json.dumps(progress).encode()
        assert_one_line(await client.post(one.url("heartbeat"), content=body), 200)
        stored = json.dumps(one.row()["progress"])
        assert SECRET not in stored and "\\u0000" not in stored, stored
        failed = {"status": "failed", "error": f"boom \u0000 {SECRET}", "output": {"log": SECRET}}
        assert_one_line(await client.post(one.url("complete"), content=json.dumps(failed).encode()), 200)
    row = one.row()
    assert row["status"] == "failed" and SECRET not in json.dumps(row, default=str), row


async def test_a_thousand_callbacks_a_second_at_one_run(jobs: tuple[Job, Job]) -> None:
    one, two = jobs
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def send(n: int) -> int:
            url = one.url("heartbeat") if n % 2 else one.url("heartbeat", token=secrets.token_urlsafe(32))
            answer = await client.post(url, json={"n": n})
            return answer.status_code

        codes = Counter(await asyncio.gather(*(send(n) for n in range(1000))))
        assert codes == Counter({200: 500, 404: 500}), codes
        assert_one_line(await client.post(one.url("complete"), json={"status": "succeeded"}), 200)
    assert one.row()["status"] == "succeeded" and two.row()["status"] == "running"


async def test_only_the_callback_routes_take_post(jobs: tuple[Job, Job]) -> None:
    one, _ = jobs
    async with httpx.AsyncClient() as client:
        for path in ("/metrics", "/healthz", f"/runs/{one.run_id}", "/"):
            answer = await client.post(f"{one.base}{path}", content=b"{}")
            assert answer.status_code == 405, (path, answer.status_code)
        assert (await client.get(one.url("complete"))).status_code in (404, 405)
        assert (await client.put(one.url("complete"), json={"status": "succeeded"})).status_code == 405
    assert one.row()["status"] == "running"


@needs_pgserver
def test_callbacks_while_the_database_is_stopped_get_a_503_and_land_once_it_is_back(
    tmp_path: Path, http: tuple[str, Recorder]
) -> None:
    url, rec = http
    rec.script("/one", statuses=[202])
    project = tmp_path / "project"
    (project / "tasks.d").mkdir(parents=True)
    (project / "tasks.d" / "one.toml").write_text(task(url, "one").replace("2026-12-02", "2099-12-02"))
    for command in (["apply"], ["trigger", "one", "--reason", "outage test"]):  # a manual run: it fires at once
        subprocess.run(reconciler_argv(*command), cwd=project, env=clean_env(JOB_SECRET=SECRET), check=True,
                       capture_output=True, timeout=120)  # fmt: skip
    server = PrivateServer(project / ".reconciler")
    log = tmp_path / "engine.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            reconciler_argv("engine", "--max-sleep", "0.5", "--metrics-addr", "127.0.0.1:0", "--public-url", PUBLIC),
            cwd=project,
            env=clean_env(POD_NAME="outage", JOB_SECRET=SECRET),
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    engine = EngineProcess("outage", proc, log)
    try:
        assert wait_until(lambda: "outage" in registered(server.dsn), 120), engine.output()
        addr = listening_addr(engine)
        assert wait_until(lambda: rec.paths("/one"), 60), engine.output()
        path = rec.paths("/one")[0].headers["X-Reconciler-Callback"].removeprefix(PUBLIC)

        def status() -> str:
            with psycopg.connect(server.dsn) as conn:
                found = conn.execute("SELECT status, accepted_at FROM scheduler.runs").fetchone()
            return "" if found is None or found[1] is None else str(found[0])

        assert wait_until(lambda: status() == "running", 60)
        server.stop()
        body = {"status": "succeeded", "output": {"rows": 3}}
        for action in ("heartbeat", "complete"):
            answer = httpx.post(
                f"http://{addr}{path}/{action}", json=body if action == "complete" else None, timeout=60
            )
            assert_one_line(answer, 503)
            assert answer.headers["Retry-After"].isdigit()
        server.start()
        landed = [0]

        def lands() -> bool:  # the job sends again, as Retry-After says
            answer = httpx.post(f"http://{addr}{path}/complete", json=body, timeout=60)
            landed[0] = answer.status_code
            return answer.status_code == 200

        def runs() -> list[Any]:
            with psycopg.connect(server.dsn) as conn:
                return conn.execute(
                    "SELECT id, status, callback_hash, deadline_at, error FROM scheduler.runs"
                ).fetchall()

        assert wait_until(lands, 60, step=1.0), (landed, path, runs())
        assert status() == "succeeded"
    finally:
        [(code, output)] = stop([engine])
        if server.running():
            server.stop()
    assert code == 0, output[-3000:]
    assert "Traceback" not in output and SECRET not in output, output[-3000:]
