"""`--log-format json`: every stderr line of an engine is a JSON object; secrets never appear."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from reconciler.db.store import Store
from reconciler.files.tasks import load_dir
from reconciler.reconcile.apply import apply_tasks
from tests.builders import run_reconciler, soon, start_engines, stop, wait_registered
from tests.helpers import finished_runs, wait_until
from tests.httpserver import serving

SECRET = "json-log-secret-4b1d9e"
CLIENT_SECRET = "json-log-client-secret-77aa"


async def test_json_logs_parse_line_by_line_and_hold_no_secret(store: Store, dsn: str, tmp_path: Path) -> None:
    with serving() as (url, rec):
        rec.client = ("scheduler", CLIENT_SECRET)
        rec.script("/fail", statuses=[503])
        env = {"LOG_API_KEY": SECRET, "LOG_CLIENT_SECRET": CLIENT_SECRET}
        [engine] = start_engines(dsn, ["json-engine"], tmp_path, env=env, global_args=["--log-format", "json"])
        try:
            due = soon(wait_registered(dsn, [engine]), 1)
            files = {
                "header": f'headers = {{ X-Api-Key = {{ env = "LOG_API_KEY" }} }}\nurl = "{url}/ok"\n',
                "oauth": (
                    f'url = "{url}/protected"\n[target.auth]\nkind = "oauth2_client_credentials"\n'
                    f'token_url = "{url}/oauth/token"\nclient_id = "scheduler"\n'
                    'client_secret = { env = "LOG_CLIENT_SECRET" }\n'
                ),
                "missing": f'url = "{url}/never"\n[target.auth]\nkind = "bearer"\ntoken = {{ env = "LOG_UNSET" }}\n',
                "failing": f'url = "{url}/fail"\n',
            }
            (tmp_path / "tasks").mkdir()
            for name, target in files.items():
                trigger = f'[trigger]\nkind = "once"\nat = {due}\n'
                (tmp_path / "tasks" / f"{name}.toml").write_text(f"{trigger}[target]\n{target}")
            await apply_tasks(store, load_dir(tmp_path / "tasks", "tasks.d").tasks, "default", datetime.now(UTC))
            assert wait_until(lambda: finished_runs(dsn) >= len(files), 120), finished_runs(dsn)
        finally:
            [(code, err)] = stop([engine])
        assert code == 0, err[-2000:]
        out = engine.stdout()
        tokens = [r.headers.get("Authorization", "") for r in rec.paths("/protected")]
    assert finished_runs(dsn) == len(files)
    events = [json.loads(line) for line in err.splitlines()]  # raises on any non-JSON line
    assert out == ""
    runs = {e["task_id"]: e for e in events if e.get("message", "").startswith("run ")}
    assert set(runs) == set(files)
    assert {k: v["status"] for k, v in runs.items()} == {
        "header": "succeeded",
        "oauth": "succeeded",
        "missing": "failed",
        "failing": "failed",
    }
    assert all({"ts", "level", "scheduled_for", "run_id", "status"} <= set(e) for e in runs.values())
    assert "LOG_UNSET is not set" in runs["missing"]["error"]
    assert any(e["message"].startswith("engine ") and e["message"].endswith(" started (every source)") for e in events)
    assert {k: v["level"] for k, v in runs.items()} == {  # failures are warnings, to alert on
        "header": "info",
        "oauth": "info",
        "missing": "warning",
        "failing": "warning",
    }
    secrets = [SECRET, CLIENT_SECRET, *(t.removeprefix("Bearer ") for t in tokens if t)]
    assert tokens and all(secret not in err for secret in secrets)


def test_user_error_is_one_json_line_in_json_mode() -> None:
    proc = run_reconciler("--log-format", "json", "--dsn", "host=127.0.0.1 port=1", "status", timeout=60)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    event = json.loads(line)
    assert event["level"] == "error" and "cannot connect to PostgreSQL" in event["message"]
