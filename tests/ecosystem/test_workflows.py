"""The GitHub workflows are wired as the README says, use the action, and are actionlint-clean.

plan.yml and apply.yml are a checkout and the repository's own action (`uses: ./`); what the
action's steps do is tests/ecosystem/test_action.py's business, which runs them as GitHub does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.ecosystem.github_runner import RUNNER_ARGS

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = ("plan.yml", "apply.yml", "ci.yml")


def workflow(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def effective_shell(flow: dict[str, Any], job: dict[str, Any], item: dict[str, Any]) -> str | None:
    """The step's `shell:`, else the job's `defaults.run.shell`, else the workflow's; None if unset."""
    for scope in (item, job.get("defaults", {}).get("run", {}), flow.get("defaults", {}).get("run", {})):
        if scope.get("shell"):
            return str(scope["shell"])
    return None


def pipes_without_pipefail(flow: dict[str, Any]) -> list[str]:
    """The `run:` steps whose script has a `|` but whose effective shell is not bash (so no pipefail)."""
    return [
        f"{name}/{item.get('id', item.get('name', '?'))}"
        for name, job in flow["jobs"].items()
        for item in job["steps"]
        if "|" in item.get("run", "") and effective_shell(flow, job, item) != "bash"
    ]


def actionlint(cwd: Path) -> subprocess.CompletedProcess[str]:
    """The dev extra's actionlint (next to this Python, or on PATH) on the project at `cwd`."""
    beside = Path(sys.executable).parent / "actionlint"
    found = str(beside) if beside.exists() else shutil.which("actionlint")
    assert found, "actionlint is missing: pip install -e '.[dev]'"
    return subprocess.run(
        [found, "-no-color", "-oneline", *(str(Path(".github/workflows") / name) for name in FILES)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_plan_and_apply_run_the_action_on_a_full_checkout() -> None:
    plan, apply = workflow("plan.yml"), workflow("apply.yml")
    # Every declared directory, from the registry (tests/ecosystem/test_declared_dirs.py checks it kind by kind).
    assert plan["on"]["pull_request"]["paths"] == ["calendars.d/**", "limits.d/**", "notifiers.d/**", "tasks.d/**"]
    assert plan["permissions"]["pull-requests"] == "write"  # the sticky comment
    paths = ["calendars.d/**", "limits.d/**", "notifiers.d/**", "tasks.d/**"]
    assert apply["on"]["push"] == {"branches": ["main"], "paths": paths}
    assert apply["concurrency"] == {"group": "reconciler-apply", "cancel-in-progress": False}
    for flow, command in ((plan, "plan"), (apply, "apply")):
        [job] = flow["jobs"].values()
        checkout, action = job["steps"]
        # A shallow clone cannot tell whether it contains the live revision: the check would only warn.
        assert checkout == {"uses": "actions/checkout@v5", "with": {"fetch-depth": 0}}
        # The secret goes to the action's input only, not to the job's environment.
        assert action == {"uses": "./", "with": {"command": command, "dsn": "${{ secrets.RECONCILER_DSN }}"}}
        assert "RECONCILER_DSN" not in job.get("env", {})
    [ci] = workflow("ci.yml")["jobs"].values()
    assert ci["steps"][-1] == {"run": "bash .ci/run"}


def test_every_step_that_pipes_runs_with_pipefail() -> None:
    for name in FILES:
        flow = workflow(name)
        assert pipes_without_pipefail(flow) == [], name
        for job in flow["jobs"].values():
            for item in job["steps"]:
                if "run" in item:
                    assert effective_shell(flow, job, item) in RUNNER_ARGS, (name, item)
    # The check catches plan.yml's validate step of before issue 11 (no shell anywhere).
    old = {"jobs": {"plan": {"steps": [{"id": "validate", "run": "reconciler validate 2>&1 | tee validate.txt\n"}]}}}
    assert pipes_without_pipefail(old) == ["plan/validate"]


def test_actionlint_is_clean() -> None:
    proc = actionlint(ROOT)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_actionlint_checks_the_workflows_inputs_against_action_yml(tmp_path: Path) -> None:
    shutil.copytree(ROOT / ".github", tmp_path / ".github")
    shutil.copy2(ROOT / "action.yml", tmp_path / "action.yml")
    # actionlint finds the project, and so `./action.yml`, by its .git.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=30)
    plan = tmp_path / ".github" / "workflows" / "plan.yml"
    plan.write_text(plan.read_text().replace("command: plan", "comand: plan"))
    proc = actionlint(tmp_path)
    assert proc.returncode == 1
    assert 'missing input "command" which is required by action "reconciler" defined at "./"' in proc.stdout
    assert 'input "comand" is not defined in action "reconciler"' in proc.stdout
