"""Poison: three engine processes, a hundred normal tasks and a dozen hostile ones for a minute.

The hostile targets answer with NUL bytes, an endless chunked body, a trickle, an echo of
the request (credentials included), a cut connection and `Retry-After: 3600`; others name a
non-ASCII or CRLF header value or a variable tasks may not read. Afterwards: every normal
occurrence succeeded exactly once, every hostile one failed with a reason, no engine exited,
`max_running_instances = 1` held for the trickle, engine RSS stayed bounded, and no secret
value is in any `scheduler.*` column or log line.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.builders import EngineProcess, run_reconciler, start_engines, stop, wait_registered
from tests.helpers import expected_occurrences, settled, wait_until
from tests.hostile import hostile_serving
from tests.httpserver import Recorder

pytestmark = pytest.mark.chaos

NORMAL = 100
EVERY = 5  # seconds: 100 tasks x 12 occurrences
HOSTILE_EVERY = 10
SCHEDULE_SECONDS = 60
RSS_LIMIT_MIB = 200
SECRETS = {
    "API_KEY": "poison-api-key-5d1c9a7e",
    "BEARER": "poison-bearer-77b2e0c4",
    "PW": "poison-password-31f8aa",
    "QUERY_TOKEN": "poison-query-token-a6d4",
    "IDP_SECRET": "client-secret-value",  # the test server's OAuth2 client secret
}
ENV = {**SECRETS, "NON_ASCII": "grüße", "CRLF": "x\r\nX-Injected: 1"}


def hostile_tasks(bad: str, good: str) -> dict[str, str]:
    """Task name → [target] (and [policy]) lines."""
    echo = f'url = "{bad}/echo?status=403"\n'
    return {
        "nul": f'url = "{bad}/nul?status=500"\n',
        "endless": f'url = "{bad}/endless?status=502"\n',
        "trickle": f'url = "{bad}/trickle"\ntimeout_seconds = 2\n',
        "cut": f'url = "{bad}/cut"\n',
        "retry-after": f'url = "{bad}/retry-after"\n[policy]\nretries = 2\n',
        "echo-headers": echo + 'headers = { X-Api-Key = { env = "API_KEY" } }\n'
        'query = { token = { env = "QUERY_TOKEN" } }\n',
        "echo-bearer": echo + '[target.auth]\nkind = "bearer"\ntoken = { env = "BEARER" }\n',
        "echo-basic": echo + '[target.auth]\nkind = "basic"\nusername = "svc"\npassword = { env = "PW" }\n',
        "echo-oauth2": echo + f'[target.auth]\nkind = "oauth2_client_credentials"\ntoken_url = "{good}/oauth/token"\n'
        'client_id = "scheduler"\nclient_secret = { env = "IDP_SECRET" }\n',
        "non-ascii": f'url = "{bad}/never-a"\nheaders = {{ X-Name = {{ env = "NON_ASCII" }} }}\n',
        "crlf": f'url = "{bad}/never-b"\nheaders = {{ X-Name = {{ env = "CRLF" }} }}\n',
        "forbidden": f'url = "{bad}/never-c"\nheaders = {{ X-Dsn = {{ env = "RECONCILER_DSN" }} }}\n',
    }


def write_tasks(root: Path, good: str, bad: str, start: datetime, end: datetime) -> set[str]:
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    window = f"start_at = {start.strftime(stamp)}\nend_at = {end.strftime(stamp)}\n"
    for index in range(NORMAL):
        (root / f"n{index:03d}.toml").write_text(
            f'[trigger]\nkind = "interval"\nseconds = {EVERY}\n{window}[target]\nurl = "{good}/n/{index}"\n'
        )
    hostile = hostile_tasks(bad, good)
    for name, target in hostile.items():
        (root / f"h-{name}.toml").write_text(
            f'[trigger]\nkind = "interval"\nseconds = {HOSTILE_EVERY}\n{window}[target]\n{target}'
        )
    return {f"h-{name}" for name in hostile}


def peak_rss_mib(engine: EngineProcess) -> float:
    """VmHWM: the most resident memory the process ever had."""
    for line in Path(f"/proc/{engine.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def database_text(dsn: str) -> str:
    """Every row of every scheduler.* table, as text."""
    with psycopg.connect(dsn) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'scheduler'")]
        return "\n".join(
            str(row[0]) for table in tables for row in conn.execute(f"SELECT t::text FROM scheduler.{table} t")
        )


def test_hostile_targets_and_tasks_cannot_hurt_the_fleet(dsn: str, http: tuple[str, Recorder], tmp_path: Path) -> None:
    good, rec = http
    root = tmp_path / "tasks.d"
    root.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    run_reconciler("db", "init", dsn=dsn, ok=True)
    with hostile_serving() as (bad, _):
        ids = ["poison-0", "poison-1", "poison-2"]
        engines = start_engines(dsn, ids, logs, env=ENV, global_args=["--log-format", "json"])
        try:
            start = wait_registered(dsn, engines).replace(microsecond=0) + timedelta(seconds=5)
            end = start + timedelta(seconds=SCHEDULE_SECONDS)
            hostile = write_tasks(root, good, bad, start, end)
            run_reconciler("--tasks-dir", str(root), "apply", dsn=dsn, ok=True)
            expected = expected_occurrences(root, start, end)
            assert wait_until(lambda: datetime.now(UTC) >= end, SCHEDULE_SECONDS + 30, step=0.5)
            assert wait_until(lambda: settled(dsn, len(expected)), 120, step=0.5), "runs never settled"
            alive = [e.engine_id for e in engines if e.proc.poll() is None]
            rss = {e.engine_id: round(peak_rss_mib(e), 1) for e in engines if e.proc.poll() is None}
        finally:
            results = stop(engines)
        with urllib.request.urlopen(f"{bad}/_stats", timeout=10) as answer:
            served = json.loads(answer.read())
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        rows = conn.execute("SELECT task_id, scheduled_for, status, error FROM scheduler.runs").fetchall()
    everything = database_text(dsn) + "\n".join(output for _, output in results)
    everything += "\n".join(e.stdout() for e in engines)

    normal = [r for r in rows if r["task_id"] not in hostile]
    bad_runs = [r for r in rows if r["task_id"] in hostile]
    keys = Counter(r.headers["Idempotency-Key"] for r in rec.paths("/n/"))
    statuses = Counter(r["status"] for r in normal)
    reasons = Counter((r["task_id"], str(r["error"]).split(":")[0].split(";")[0]) for r in bad_runs)
    print(
        f"\npoison: {len(normal)} normal runs {dict(statuses)}, {len(keys)} distinct keys sent; "
        f"{len(bad_runs)} hostile runs {dict(Counter(r['status'] for r in bad_runs))}; peak RSS MiB {rss}; "
        f"hostile requests {served['requests']}, max in flight {served['max_in_flight']}"
    )
    print("hostile reasons:", dict(sorted(reasons.items())))

    assert alive == ["poison-0", "poison-1", "poison-2"]
    assert [code for code, _ in results] == [0, 0, 0], [out[-2000:] for _, out in results]
    assert {(r["task_id"], r["scheduled_for"]) for r in rows} == expected  # every occurrence, once each
    assert statuses == Counter({"succeeded": len(normal)})
    assert len(keys) == len(normal) and set(keys.values()) == {1}
    assert {r["status"] for r in bad_runs} == {"failed"} and all(r["error"] for r in bad_runs)
    assert served["max_in_flight"]["/trickle"] == 1  # max_running_instances = 1 across the fleet
    assert not {"/never-a", "/never-b", "/never-c"} & set(served["requests"])
    assert max(rss.values()) < RSS_LIMIT_MIB, rss
    secrets = [*SECRETS.values(), *(f"token-{n}" for n in range(1, rec.tokens_issued + 1))]
    assert rec.tokens_issued >= 1
    leaked = [s for s in secrets if s in everything]
    assert leaked == []
    assert "Traceback" not in everything
