"""The GitHub workflows are valid, actionlint-clean, and their reconciler steps work as written.

Each step's `run:` script is executed the way GitHub's runner executes it: written to a file,
then `bash -e FILE` when the step has no shell (the runner's default: no pipefail, so a pipe
exits with its last command's status) or `bash --noprofile --norc -e -o pipefail FILE` with
`shell: bash`. It runs against the test database, in a copy of the example repository.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = ("plan.yml", "apply.yml", "ci.yml")

# The runner's arguments per shell (actions/runner, ScriptHandler.cs and ScriptHandlerHelpers.cs):
# with no shell it starts bash with sh's arguments, `-e {0}`; `shell: bash` is
# `bash --noprofile --norc -e -o pipefail {0}`. The workflows use no other shell.
RUNNER_ARGS: dict[str | None, tuple[str, ...]] = {
    None: ("-e",),
    "bash": ("--noprofile", "--norc", "-e", "-o", "pipefail"),
}

# plan.yml's validate step before issue 11: no shell, so no pipefail, and tee's 0 wins.
OLD_VALIDATE_RUN = "reconciler validate 2>&1 | tee validate.txt\n"

INVALID_TASK = '[trigger]\nkind = "cron"\nexpr = "61 * * * *"\n'


def workflow(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def step(flow: dict[str, Any], step_id: str) -> dict[str, Any]:
    [job] = flow["jobs"].values()
    [found] = [s for s in job["steps"] if s.get("id") == step_id]
    return found


def effective_shell(flow: dict[str, Any], job: dict[str, Any], item: dict[str, Any]) -> str | None:
    """The step's `shell:`, else the job's `defaults.run.shell`, else the workflow's; None if unset."""
    for scope in (item, job.get("defaults", {}).get("run", {}), flow.get("defaults", {}).get("run", {})):
        if scope.get("shell"):
            return str(scope["shell"])
    return None


def run_steps(flow: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(job name, job, step) for every `run:` step of the workflow."""
    return [(name, job, item) for name, job in flow["jobs"].items() for item in job["steps"] if "run" in item]


def pipes_without_pipefail(flow: dict[str, Any]) -> list[str]:
    """The steps whose script has a `|` but whose effective shell is not bash (so no pipefail)."""
    return [
        f"{name}/{item.get('id', item.get('name', '?'))}"
        for name, job, item in run_steps(flow)
        if "|" in item["run"] and effective_shell(flow, job, item) != "bash"
    ]


def run_script(script: str, shell: str | None, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a script as the runner does: from a file, with the shell's arguments."""
    if shell not in RUNNER_ARGS:
        pytest.fail(f"shell {shell!r}: only GitHub's default and `bash` are emulated here")
    with tempfile.TemporaryDirectory(prefix="step-") as scripts:
        path = Path(scripts) / "step.sh"
        path.write_text(script)
        return subprocess.run(
            ["bash", *RUNNER_ARGS[shell], str(path)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )


def run_step(flow: dict[str, Any], step_id: str, cwd: Path, dsn: str, **env: str) -> tuple[int, dict[str, str]]:
    """Run one step's script; returns its exit code and what it wrote to $GITHUB_OUTPUT."""
    [job] = flow["jobs"].values()
    item = step(flow, step_id)
    output = cwd / "github_output.txt"
    output.write_text("")
    environ = {**os.environ, "RECONCILER_DSN": dsn, "GITHUB_OUTPUT": str(output), **env}
    proc = run_script(item["run"], effective_shell(flow, job, item), cwd, environ)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    pairs = (line.partition("=") for line in output.read_text().splitlines() if line)
    return proc.returncode, {key: value for key, _, value in pairs}


def old_plan_workflow() -> dict[str, Any]:
    """plan.yml as it was before issue 11: no shell anywhere, and the old validate step."""
    flow = copy.deepcopy(workflow("plan.yml"))
    flow.pop("defaults", None)
    for _, job, item in run_steps(flow):
        job.pop("defaults", None)
        item.pop("shell", None)
    step(flow, "validate")["run"] = OLD_VALIDATE_RUN
    return flow


def actionlint() -> str:
    """The actionlint binary of the dev extra (next to this Python, or on PATH)."""
    beside = Path(sys.executable).parent / "actionlint"
    found = str(beside) if beside.exists() else shutil.which("actionlint")
    assert found, "actionlint is missing: pip install -e '.[dev]'"
    return found


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
        # A shallow clone cannot tell whether it contains the live revision: the check would only warn.
        [checkout] = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")]
        assert checkout["with"]["fetch-depth"] == 0
        for item in job["steps"]:
            assert "${{" not in item.get("run", ""), "expressions belong in env:, not in scripts"
    assert "reconciler plan --format markdown --detailed-exitcode" in step(plan, "plan")["run"]
    assert "<!-- reconciler-plan -->" in step(plan, "comment")["run"]
    steps = plan["jobs"]["plan"]["steps"]
    post = [s for s in steps if s.get("uses", "").startswith("actions/github-script")]
    assert len(post) == 1 and "updateComment" in post[0]["with"]["script"]
    [upload] = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["name"] == "reconciler-plan" and upload["with"]["path"] == "plan.txt"
    assert "always()" in upload["if"]  # a plan that fails the check is uploaded too
    assert steps.index(step(plan, "plan")) < steps.index(upload) < steps.index(step(plan, "comment"))


def test_every_step_that_pipes_runs_with_pipefail() -> None:
    for name in FILES:
        flow = workflow(name)
        assert pipes_without_pipefail(flow) == [], name
        for _, job, item in run_steps(flow):
            assert effective_shell(flow, job, item) in RUNNER_ARGS, (name, item)
    assert any("|" in item["run"] for _, _, item in run_steps(workflow("plan.yml")))
    # The check catches the workflow of before issue 11.
    assert pipes_without_pipefail(old_plan_workflow()) == ["plan/validate"]


def test_the_old_validate_step_passed_invalid_files_and_the_new_one_fails(repo: Path, dsn: str) -> None:
    (repo / "tasks.d" / "broken.toml").write_text(INVALID_TASK)
    old, new = old_plan_workflow(), workflow("plan.yml")
    assert step(old, "validate")["run"] == OLD_VALIDATE_RUN and "shell" not in step(old, "validate")
    assert run_step(old, "validate", repo, dsn)[0] == 0  # GitHub's default shell: a green check
    assert "tasks.d/broken.toml:3: trigger.expr" in (repo / "validate.txt").read_text()
    (repo / "validate.txt").unlink()
    assert run_step(new, "validate", repo, dsn)[0] == 1
    assert "tasks.d/broken.toml:3: trigger.expr" in (repo / "validate.txt").read_text()


def test_actionlint_is_clean() -> None:
    proc = subprocess.run(
        [actionlint(), "-no-color", "-oneline", *(str(WORKFLOWS / name) for name in FILES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_plan_comment_then_apply_then_no_changes(repo: Path, dsn: str) -> None:
    plan, apply = workflow("plan.yml"), workflow("apply.yml")
    assert run_step(plan, "validate", repo, dsn)[0] == 0
    code, outputs = run_step(plan, "plan", repo, dsn)
    assert (code, outputs) == (0, {"exitcode": "2"})
    text = (repo / "plan.txt").read_text()  # the artifact: the whole plan, as text, no colour
    assert "+ create billing/invoices" in text and "Plan: 5 to create" in text and "\x1b[" not in text
    run_url = "https://github.example/o/r/actions/runs/7"
    assert run_step(plan, "comment", repo, dsn, VALIDATE_OUTCOME="success", RUN_URL=run_url)[0] == 0
    comment = (repo / "comment.md").read_text()
    assert comment.startswith("<!-- reconciler-plan -->\n### reconciler plan")
    assert "Plan: 5 to create" in comment and "+ create billing/invoices" in comment
    assert comment.endswith(f"artifact `reconciler-plan` of [this run]({run_url}).\n")

    assert run_step(apply, "apply", repo, dsn)[0] == 0

    code, outputs = run_step(plan, "plan", repo, dsn)
    assert (code, outputs) == (0, {"exitcode": "0"})
    assert "No changes" in (repo / "plan.txt").read_text()
    run_step(plan, "comment", repo, dsn, VALIDATE_OUTCOME="success")
    assert "No changes" in (repo / "comment.md").read_text()


def test_invalid_files_fail_the_check_and_the_comment_shows_why(repo: Path, dsn: str) -> None:
    plan, apply = workflow("plan.yml"), workflow("apply.yml")
    (repo / "tasks.d" / "broken.toml").write_text(INVALID_TASK)
    assert run_step(plan, "validate", repo, dsn)[0] == 1
    run_step(plan, "comment", repo, dsn, VALIDATE_OUTCOME="failure")
    comment = (repo / "comment.md").read_text()
    assert "task files are invalid" in comment and "tasks.d/broken.toml:3: trigger.expr" in comment
    assert run_step(apply, "apply", repo, dsn)[0] == 1  # apply refuses too, writing nothing


def test_plan_against_an_unreachable_database_fails_the_check(repo: Path) -> None:
    plan = workflow("plan.yml")
    code, outputs = run_step(plan, "plan", repo, "host=127.0.0.1 port=1 connect_timeout=2")
    assert (code, outputs) == (1, {"exitcode": "1"})
    assert not (repo / "plan.txt").exists()  # no plan, no artifact: the comment shows the error
    run_step(plan, "comment", repo, "unused", VALIDATE_OUTCOME="success")
    comment = (repo / "comment.md").read_text()
    assert "cannot connect to PostgreSQL" in comment and "artifact" not in comment
