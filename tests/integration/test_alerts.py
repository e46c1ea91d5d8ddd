"""deploy/prometheus/alerts.yml passes its unit tests under promtool, and every metric the rules
and the Grafana dashboard name is one a real engine's /metrics serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from reconciler.clock import FixedClock
from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from reconciler.web.metrics import EngineMetrics
from tests.builders import cron
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, scrape, setup

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "reconciler.json"
METRIC = re.compile(r"\breconciler_[a-z_]+")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    assert found, "promtool is not installed: apt-get install prometheus (.ci/run does)"
    return subprocess.run([found, *args], capture_output=True, text=True, timeout=120)


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def dashboard_exprs() -> Iterator[str]:
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            yield target["expr"]


def test_the_alert_rules_are_valid_and_pass_their_unit_tests() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_has_a_unit_test_where_it_fires() -> None:
    firing = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case["exp_alerts"]
    }
    assert firing == {rule["alert"] for rule in rules()}


def test_the_dashboard_is_grafana_json_with_a_query_per_panel() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "reconciler" and board["panels"]
    for panel in board["panels"]:
        assert panel["title"] and panel["targets"], panel
        assert all(target["expr"] for target in panel["targets"])


async def test_every_metric_the_rules_and_dashboard_name_is_served(
    store: Store,
    engine: Engine,
    metrics_url: str,
    http: tuple[str, Recorder],
    tmp_path: Path,
) -> None:
    url, rec = http
    rec.script("/bad", statuses=[500])
    await setup(store, tmp_path, {"ok": cron(f"{url}/ok"), "bad": cron(f"{url}/bad")})
    await engine.run_once(NOW + timedelta(minutes=5))
    engine.clock = FixedClock(NOW + timedelta(minutes=6))
    await engine.heartbeat()
    # A labelled counter has no series (only its HELP and TYPE lines) until its first event: one
    # delivery attempt, told to the engine's metrics as the notification sender tells each.
    [metrics] = [observer for observer in engine.observers if isinstance(observer, EngineMetrics)]
    metrics.notified("ops", "failure", "failed")
    named = {name for rule in rules() for name in METRIC.findall(rule["expr"])}
    named |= {name for expr in dashboard_exprs() for name in METRIC.findall(expr)}
    assert len(named) >= 10

    async def served() -> set[str]:
        return named - set(await scrape(metrics_url))

    async def all_served() -> bool:  # the per-task and per-engine gauges come with the background read
        return not await served()

    assert await async_wait_until(all_served, 60, step=0.2), f"not on /metrics: {sorted(await served())}"
