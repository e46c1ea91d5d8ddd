"""Everything downstream of a job (completion = "callback") follows its outcome, not its 202: failure and recovery
notifications, the failing streak, `runs`, `explain`, the dashboard, the metrics, `trigger --wait`; an engine
without a public URL fails such a run saying why."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.web.dashboard import Dashboard
from reconciler.web.metrics import Endpoint
from tests.builders import cli, write_tasks
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import metrics_endpoint, scrape
from tests.integration.test_notifications import apply_dirs, outbox, webhook

PUBLIC = "http://jobs.example.test"
TOKEN = "dashboard-t0k3n"
PAGES = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Fleet:
    engine: Engine
    endpoint: Endpoint
    base: str
    rec: Recorder
    dsn: str

    async def fire(self) -> list[str]:
        """A claim (by the database's clock) and its runs fired: each run's callback URL on this engine."""
        report = await self.engine.claim(None)
        await asyncio.gather(*(self.engine.execute(run) for run in report.runs))
        await self.engine.results.flush()
        return [
            self.rec.paths(f"/{run.task_id}")[-1].headers["X-Reconciler-Callback"].replace(PUBLIC, self.base)
            for run in report.runs
        ]

    def runs(self, task_id: str) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, row_factory=dict_row) as conn:
            return conn.execute(
                "SELECT id, status, attempt, error, output, progress, accepted_at FROM scheduler.runs "
                "WHERE task_id = %s ORDER BY id",
                (task_id,),
            ).fetchall()


@pytest.fixture
async def fleet(store: Store, dsn: str, http: tuple[str, Recorder]) -> AsyncIterator[Fleet]:
    rec = http[1]
    engine = Engine(store, EngineConfig("jobs", public_url=PUBLIC))
    # the dashboard's token guards its pages, not the jobs' callbacks: their own token does
    dashboard = Dashboard(Store(dsn, max_size=2))
    endpoint, base = await metrics_endpoint(engine, store, refresh_seconds=0.2, dashboard=dashboard, token=TOKEN)
    try:
        yield Fleet(engine, endpoint, base, rec, dsn)
    finally:
        await endpoint.close()
        await engine.firer.close()


def job_file(url: str, name: str, notify: str = "", target: str = "") -> str:
    return (
        f'[trigger]\nkind = "interval"\nevery = "1s"\n[target]\nurl = "{url}/{name}"\ncompletion = "callback"\n'
        f'deadline = "1h"\n{target}\n[policy]\nmisfire_grace_seconds = 3600\n{notify}'
    )


async def test_a_failed_job_notifies_failure_and_the_next_success_recovery(
    fleet: Fleet, store: Store, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/etl", statuses=[202])
    notify = '[notify]\nfailure = ["oncall"]\nrecovery = ["oncall"]\n'
    write_tasks(tmp_path, {"notifiers.d/oncall": webhook(f"{url}/hook"), "tasks.d/etl": job_file(url, "etl", notify)})
    await apply_dirs(store, tmp_path, datetime.now(UTC))
    await asyncio.sleep(1.1)  # its first occurrence is due a second after the apply
    [first] = await fleet.fire()
    assert outbox(fleet.dsn) == []  # the 202 is not the outcome
    async with httpx.AsyncClient() as client:
        done = await client.post(f"{first}/complete", json={"status": "failed", "error": "source table missing"})
        assert done.status_code == 200 and done.json() == {"status": "failed"}
    [event] = outbox(fleet.dsn)
    assert event["event"] == "failure" and event["notifier"] == "oncall"
    assert event["payload"]["status"] == "failed" and event["payload"]["error"] == "source table missing"
    await asyncio.sleep(1.1)
    [second] = await fleet.fire()
    async with httpx.AsyncClient() as client:
        assert (await client.post(f"{second}/complete", json={"status": "succeeded"})).status_code == 200
    assert [e["event"] for e in outbox(fleet.dsn)] == ["failure", "recovery"]
    ended = [r["status"] for r in fleet.runs("etl") if r["status"] in ("failed", "succeeded")]
    assert ended == ["failed", "succeeded"], ended


async def test_runs_explain_metrics_and_the_dashboard_show_a_running_job(
    fleet: Fleet, store: Store, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/export", statuses=[202])
    write_tasks(tmp_path, {"tasks.d/export": job_file(url, "export", target='heartbeat_timeout = "10m"')})
    await apply_dirs(store, tmp_path, datetime.now(UTC))
    await asyncio.sleep(1.1)
    [callback] = await fleet.fire()
    async with httpx.AsyncClient() as client:
        beat = await client.post(f"{callback}/heartbeat", json={"done": 3, "total": 8, "api_token": "hunter2-x9"})
        assert beat.status_code == 200, (beat.text, callback, fleet.runs("export"))
        code, out, err = await asyncio.to_thread(cli, fleet.dsn, None, "runs", "export")
        assert code == 0, err
        assert "running" in out and "job accepted" in out and "last heartbeat" in out
        assert '"done":3' in out and "hunter2-x9" not in out, out  # a credential-named key is masked
        code, out, err = await asyncio.to_thread(cli, fleet.dsn, None, "explain", "export")
        assert code == 0 and "job accepted" in out and "hunter2-x9" not in out, (out, err)
        page = await client.get(f"{fleet.base}/tasks/export", headers=PAGES)
        assert page.status_code == 200 and "job accepted" in page.text and "last heartbeat" in page.text
        assert "hunter2-x9" not in page.text
        runs_json = (await client.get(f"{fleet.base}/runs?format=json", headers=PAGES)).json()
        assert runs_json["runs"][0]["progress"]["done"] == 3

        async def gauges_read() -> dict[str, Any]:
            for _ in range(100):
                found = await scrape(fleet.base)
                if [value for _, value in found.get("reconciler_jobs_running", [])] == [1.0]:
                    return found
                await asyncio.sleep(0.1)
            raise AssertionError("reconciler_jobs_running never said 1")

        found = await gauges_read()
        assert found["reconciler_job_heartbeat_age_seconds"][0][1] < 60
        done = await client.post(f"{callback}/complete", json={"status": "succeeded", "output": {"files": 8}})
        assert done.status_code == 200
        found = await scrape(fleet.base)
        codes = {(s[0]["route"], s[0]["code"]): s[1] for s in found["reconciler_job_callbacks_total"]}
        assert codes == {("heartbeat", "200"): 1.0, ("complete", "200"): 1.0}
        assert [s for s in found["reconciler_job_duration_seconds_count"] if s[0]["status"] == "succeeded"]
    code, out, err = await asyncio.to_thread(cli, fleet.dsn, None, "runs", "export", "--format", "json")
    assert code == 0, err
    [run] = [r for r in json.loads(out) if r["status"] == "succeeded"]
    assert run["output"] == {"files": 8}


async def test_an_engine_without_a_public_url_fails_a_callback_run_saying_what_to_set(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    write_tasks(tmp_path, {"tasks.d/nightly": job_file(url, "nightly")})
    await apply_dirs(store, tmp_path, datetime.now(UTC))
    await asyncio.sleep(1.1)
    engine = Engine(store, EngineConfig("no-url"))
    try:
        report = await engine.claim(None)
        [outcome] = await asyncio.gather(*(engine.execute(run) for run in report.runs))
        await engine.results.flush()
    finally:
        await engine.firer.close()
    assert outcome.status == "failed" and rec.paths("/nightly") == []
    with psycopg.connect(dsn) as conn:
        # the occurrences a slow machine let pass meanwhile are coalesced: recorded missed
        [(status, error)] = conn.execute("SELECT status, error FROM scheduler.runs WHERE status <> 'missed'").fetchall()
    assert status == "failed" and "--public-url" in error and "RECONCILER_PUBLIC_URL" in error


async def test_the_docs_python_target_reports_its_job_to_the_engine(store: Store, dsn: str, tmp_path: Path) -> None:
    """docs/jobs.md's 20-line target, run as written (but for its port): 202 at once, heartbeats, then completes."""
    text = (Path(__file__).parents[2] / "docs" / "jobs.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    serve = 'ThreadingHTTPServer(("127.0.0.1", 8000), Target).serve_forever()'
    assert serve in code and len(code.strip().splitlines()) <= 20
    code = code.replace(serve, 's = ThreadingHTTPServer(("127.0.0.1", 0), Target)\nprint(s.server_port, flush=True)\n'
                        's.serve_forever()')  # fmt: skip
    target = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    engine = Engine(store, EngineConfig("docs"))
    endpoint, base = await metrics_endpoint(engine, store)
    engine.config = replace(engine.config, public_url=base)
    try:
        assert target.stdout is not None
        port = int(await asyncio.to_thread(target.stdout.readline))
        write_tasks(tmp_path, {"tasks.d/nightly": job_file(f"http://127.0.0.1:{port}", "nightly")})
        await apply_dirs(store, tmp_path, datetime.now(UTC))
        await asyncio.sleep(1.1)
        report = await engine.claim(None)
        [outcome] = await asyncio.gather(*(engine.execute(run) for run in report.runs))
        assert outcome.status == "accepted"

        def finished() -> dict[str, Any] | None:
            with psycopg.connect(dsn, row_factory=dict_row) as conn:
                return conn.execute(
                    "SELECT status, output, progress FROM scheduler.runs WHERE status NOT IN ('running', 'queued', "
                    "'skipped', 'missed')"
                ).fetchone()

        assert await async_wait_until(finished, 60)
        assert finished() == {"status": "succeeded", "output": {"rows": 100}, "progress": {"done": 75, "total": 100}}
    finally:
        target.kill()
        await endpoint.close()
        await engine.firer.close()


async def test_trigger_wait_follows_the_job_to_its_outcome(
    fleet: Fleet, store: Store, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/backup", statuses=[202])
    write_tasks(tmp_path, {"tasks.d/backup": job_file(url, "backup").replace('every = "1s"', 'every = "1d"')})
    await apply_dirs(store, tmp_path, datetime.now(UTC))
    waiting = asyncio.create_task(asyncio.to_thread(cli, fleet.dsn, None, "trigger", "backup", "--wait"))
    callbacks: list[str] = []

    async def fired() -> bool:
        callbacks.extend(await fleet.fire())
        return bool(callbacks)

    for _ in range(200):
        if await fired():
            break
        await asyncio.sleep(0.05)
    [callback] = callbacks
    await asyncio.sleep(0.5)  # --wait sees it running, not done
    assert not waiting.done()
    async with httpx.AsyncClient() as client:
        done = await client.post(f"{callback}/complete", json={"status": "succeeded", "output": {"bytes": 42}})
        assert done.status_code == 200
    code, out, err = await asyncio.wait_for(waiting, 60)
    assert code == 0, err
    assert "succeeded" in out and '"bytes":42' in out, out
