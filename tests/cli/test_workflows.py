"""The GitHub workflows are valid YAML, and their reconciler steps work as written.

Each step's `run:` script is executed as GitHub runs it (`bash --noprofile --norc -eo
pipefail`), against the test database, in a copy of the example repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def workflow(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def step(flow: dict[str, Any], step_id: str) -> dict[str, Any]:
    [job] = flow["jobs"].values()
    [found] = [s for s in job["steps"] if s.get("id") == step_id]
    return found


def run_step(flow: dict[str, Any], step_id: str, cwd: Path, dsn: str, **env: str) -> tuple[int, dict[str, str]]:
    """Run one step's script; returns its exit code and what it wrote to $GITHUB_OUTPUT."""
    output = cwd / "github_output.txt"
    output.write_text("")
    environ = {**os.environ, "RECONCILER_DSN": dsn, "GITHUB_OUTPUT": str(output), **env}
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step(flow, step_id)["run"]],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    pairs = (line.partition("=") for line in output.read_text().splitlines() if line)
    return proc.returncode, {key: value for key, _, value in pairs}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "tasks.d", tmp_path / "tasks.d")
    return tmp_path


def test_workflows_are_valid_and_wired() -> None:
    plan, apply = workflow("plan.yml"), workflow("apply.yml")
    assert plan["on"]["pull_request"]["paths"] == ["tasks.d/**"]
    assert plan["permissions"]["pull-requests"] == "write"
    assert apply["on"]["push"] == {"branches": ["main"], "paths": ["tasks.d/**"]}
    assert apply["concurrency"] == {"group": "reconciler-apply", "cancel-in-progress": False}
    for flow in (plan, apply):
        [job] = flow["jobs"].values()
        assert job["env"]["RECONCILER_DSN"] == "${{ secrets.RECONCILER_DSN }}"
        for item in job["steps"]:
            assert "${{" not in item.get("run", ""), "expressions belong in env:, not in scripts"
    assert "reconciler plan --format markdown --detailed-exitcode" in step(plan, "plan")["run"]
    assert "<!-- reconciler-plan -->" in step(plan, "comment")["run"]
    post = [s for s in plan["jobs"]["plan"]["steps"] if s.get("uses", "").startswith("actions/github-script")]
    assert len(post) == 1 and "updateComment" in post[0]["with"]["script"]


def test_plan_comment_then_apply_then_no_changes(repo: Path, dsn: str) -> None:
    plan, apply = workflow("plan.yml"), workflow("apply.yml")
    assert run_step(plan, "validate", repo, dsn)[0] == 0
    code, outputs = run_step(plan, "plan", repo, dsn)
    assert (code, outputs) == (0, {"exitcode": "2"})
    assert run_step(plan, "comment", repo, dsn, VALIDATE_OUTCOME="success")[0] == 0
    comment = (repo / "comment.md").read_text()
    assert comment.startswith("<!-- reconciler-plan -->\n### reconciler plan")
    assert "Plan: 5 to create" in comment and "+ create billing/invoices" in comment

    assert run_step(apply, "apply", repo, dsn)[0] == 0

    code, outputs = run_step(plan, "plan", repo, dsn)
    assert (code, outputs) == (0, {"exitcode": "0"})
    run_step(plan, "comment", repo, dsn, VALIDATE_OUTCOME="success")
    assert "No changes" in (repo / "comment.md").read_text()


def test_invalid_files_fail_the_check_and_the_comment_shows_why(repo: Path, dsn: str) -> None:
    plan, apply = workflow("plan.yml"), workflow("apply.yml")
    (repo / "tasks.d" / "broken.toml").write_text('[trigger]\nkind = "cron"\nexpr = "61 * * * *"\n')
    assert run_step(plan, "validate", repo, dsn)[0] == 1
    run_step(plan, "comment", repo, dsn, VALIDATE_OUTCOME="failure")
    comment = (repo / "comment.md").read_text()
    assert "task files are invalid" in comment and "tasks.d/broken.toml:3: trigger.expr" in comment
    assert run_step(apply, "apply", repo, dsn)[0] == 1  # apply refuses too, writing nothing


def test_plan_against_an_unreachable_database_fails_the_check(repo: Path) -> None:
    plan = workflow("plan.yml")
    code, outputs = run_step(plan, "plan", repo, "host=127.0.0.1 port=1 connect_timeout=2")
    assert (code, outputs) == (1, {"exitcode": "1"})
    run_step(plan, "comment", repo, "unused", VALIDATE_OUTCOME="success")
    assert "cannot connect to PostgreSQL" in (repo / "comment.md").read_text()
