"""The reusable GitHub Action (action.yml): its steps, run as GitHub runs them, plan, comment and apply.

The steps run through tests/ecosystem/github_runner.py against the test database, in a copy of the
example repository. Not run: the `uses:` steps (setup-python, upload-artifact, github-script),
whose evaluated `with:` and conditions are checked instead, and the install step (this venv
already has reconciler; installing would take a minute).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.ecosystem.github_runner import RUNNER_ARGS, ActionRun, run_action, step_key

ROOT = Path(__file__).resolve().parents[2]
ACTION: dict[str, Any] = yaml.safe_load((ROOT / "action.yml").read_text())

SHA = "0123456789abcdef0123456789abcdef01234567"
GITHUB = {
    "action_path": str(ROOT),
    "sha": SHA,
    "server_url": "https://github.example",
    "repository": "o/r",
    "run_id": "7",
    "token": "ghs_not-a-real-token",
    "event": {"pull_request": {"number": 15}},
}
RUN_URL = "https://github.example/o/r/actions/runs/7"
INVALID_TASK = '[trigger]\nkind = "cron"\nexpr = "61 * * * *"\n'
EXAMPLE_IDS = ["billing/invoices", "ops/cache-warm", "ops/monthly-report", "ops/ping", "ops/xmas-banner"]
# Pinned to a major version: `actions/NAME@vN`, neither a branch nor unpinned.
PINNED = re.compile(r"^actions/[a-z-]+@v\d+$")


@dataclass
class Runner:
    """A workspace holding a copy of tasks.d, and the runner's temp folder."""

    workspace: Path
    temp: Path

    def run(self, command: str, dsn: str, action: dict[str, Any] = ACTION, **inputs: str) -> ActionRun:
        given = {"command": command, "dsn": dsn, **{name.replace("_", "-"): value for name, value in inputs.items()}}
        return run_action(action, given, self.workspace, self.temp, GITHUB, skip={"install"})

    def written(self) -> str:
        """Every file in the workspace and the runner's temp folder, as text."""
        paths = [*self.workspace.rglob("*"), *self.temp.rglob("*")]
        return "".join(path.read_text(errors="replace") for path in paths if path.is_file())


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    shutil.copytree(ROOT / "tasks.d", tmp_path / "workspace" / "tasks.d")
    (tmp_path / "temp").mkdir()
    return Runner(tmp_path / "workspace", tmp_path / "temp")


def steps() -> list[dict[str, Any]]:
    return list(ACTION["runs"]["steps"])


def by_key(key: str) -> dict[str, Any]:
    [found] = [item for item in steps() if step_key(item) == key]
    return found


def live_tasks(dsn: str) -> list[tuple[str, str]]:
    """(id, source) of every task in the database; none before the first apply made the schema."""
    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT to_regclass('scheduler.tasks')").fetchone() == (None,):
            return []
        return [(row[0], row[1]) for row in conn.execute("SELECT id, source FROM scheduler.tasks ORDER BY id")]


def test_action_is_a_composite_action_with_documented_inputs_and_pinned_actions() -> None:
    assert ACTION["name"] and ACTION["description"] and ACTION["runs"]["using"] == "composite"
    inputs, outputs = ACTION["inputs"], ACTION["outputs"]
    assert {name for name, spec in inputs.items() if spec.get("required")} == {"command", "dsn"}
    assert all(spec.get("description") for spec in [*inputs.values(), *outputs.values()])
    assert all("value" in spec for spec in outputs.values())
    assert set(outputs) == {"exit-code", "plan-file", "comment-file"}
    for item in steps():
        assert ("run" in item) != ("uses" in item), item
        if "run" in item:
            # Composite actions have no default shell; bash gives pipefail.
            assert item.get("shell") == "bash" and item["shell"] in RUNNER_ARGS, step_key(item)
            assert "${{" not in item["run"], f"{step_key(item)}: expressions belong in env:, not in scripts"
        else:
            assert PINNED.match(item["uses"]), item["uses"]
    uses = [item["uses"].partition("@")[0] for item in steps() if "uses" in item]
    assert uses == ["actions/setup-python", "actions/upload-artifact", "actions/github-script"]
    # The step the tests skip installs the action's own checkout.
    install = by_key("install")
    assert install["env"] == {"ACTION_PATH": "${{ github.action_path }}"}
    assert 'pip install --quiet --disable-pip-version-check "$ACTION_PATH"' in install["run"]
    assert shutil.which("reconciler", path=str(Path(sys.executable).parent)), "the venv lacks reconciler"


def test_the_dsn_goes_only_into_the_env_of_the_steps_that_connect() -> None:
    text = (ROOT / "action.yml").read_text()
    assert text.count("inputs.dsn") == 3
    for item in steps():
        for name, value in item.get("env", {}).items():
            assert ("inputs.dsn" in value) == (name == "RECONCILER_DSN"), (step_key(item), name)
            if name == "RECONCILER_DSN":
                assert value == "${{ inputs.dsn }}"
    connecting = [step_key(item) for item in steps() if "RECONCILER_DSN" in item.get("env", {})]
    assert connecting == ["prepare", "plan", "apply"]  # prepare: only to say when it is empty


def test_plan_writes_the_sticky_comment_then_apply_applies_then_no_changes(runner: Runner, dsn: str) -> None:
    plan = runner.run("plan", dsn)
    assert not plan.failed and plan.outputs["exit-code"] == "2"
    assert [item.key for item in plan.steps if item.outcome == "skipped"] == ["apply"]
    text = Path(plan.outputs["plan-file"]).read_text()  # the artifact: the whole plan, as text, no colour
    assert "+ create billing/invoices" in text and "Plan: 5 to create" in text and "\x1b[" not in text
    assert text in plan["plan"].log  # and the job log, where a long comment points

    comment = Path(plan.outputs["comment-file"]).read_text()
    assert comment.startswith("<!-- reconciler-plan -->\n### reconciler plan")
    assert "Plan: 5 to create" in comment and "+ create billing/invoices" in comment
    assert comment.endswith(f"artifact `reconciler-plan` of [this run]({RUN_URL}).\n")
    assert plan.summary == comment.partition("\n")[2]
    post = plan["Post or update the sticky comment"]
    assert post.outcome == "success" and not post.executed
    assert post.env == {
        "COMMENT_FILE": plan.outputs["comment-file"],
        "MARKER": "<!-- reconciler-plan -->",
        "PR_NUMBER": "15",
    }
    assert post.inputs["github-token"] == GITHUB["token"] and "updateComment" in post.inputs["script"]
    upload = plan["Upload the whole plan"]
    assert upload.inputs["name"] == "reconciler-plan"
    assert upload.inputs["path"] == plan.outputs["plan-file"]
    assert sorted(path.name for path in runner.workspace.iterdir()) == ["tasks.d"]  # the checkout stays clean

    apply = runner.run("apply", dsn)
    assert not apply.failed and apply.outputs == {"exit-code": "0", "plan-file": "", "comment-file": ""}
    assert [item.key for item in apply.steps if item.outcome != "skipped"] == [
        "prepare",
        "actions/setup-python@v6",
        "install",
        "validate",
        "apply",
    ]
    assert live_tasks(dsn) == [(task, "default") for task in EXAMPLE_IDS]
    with psycopg.connect(dsn) as conn:  # not a git checkout: the revision is GITHUB_SHA
        assert conn.execute("SELECT revision FROM scheduler.applies").fetchall() == [(SHA,)]

    again = runner.run("plan", dsn)
    assert not again.failed and again.outputs["exit-code"] == "0"
    assert "No changes" in Path(again.outputs["plan-file"]).read_text()
    assert "No changes" in Path(again.outputs["comment-file"]).read_text()


def test_invalid_files_fail_the_action_and_the_comment_shows_why(runner: Runner, dsn: str) -> None:
    (runner.workspace / "tasks.d" / "broken.toml").write_text(INVALID_TASK)
    plan = runner.run("plan", dsn)
    assert plan.failed and plan["validate"].outcome == "failure" and plan.outputs["exit-code"] == ""
    assert plan["plan"].outcome == "skipped" and plan["Upload the whole plan"].outcome == "skipped"
    comment = Path(plan.outputs["comment-file"]).read_text()
    assert comment.startswith("<!-- reconciler-plan -->\n### reconciler: the task files are invalid\n\n```\n")
    assert "tasks.d/broken.toml:3: trigger.expr" in comment and comment.endswith("\n```\n")
    assert plan["Post or update the sticky comment"].outcome == "success"

    apply = runner.run("apply", dsn)
    assert apply.failed and apply["apply"].outcome == "skipped"
    assert live_tasks(dsn) == []


def test_validation_output_cannot_close_the_comments_fence(runner: Runner, dsn: str) -> None:
    # A file name is file content too: a run of backticks in it lengthens the fence.
    (runner.workspace / "tasks.d" / "a````b.toml").write_text(INVALID_TASK)
    comment = Path(runner.run("plan", dsn).outputs["comment-file"]).read_text()
    assert "a````b.toml" in comment
    assert comment.split("\n")[3] == "`````" and comment.endswith("\n`````\n")


def test_plan_and_apply_take_the_same_options_and_refuse_alike(runner: Runner, dsn: str) -> None:
    assert not runner.run("apply", dsn).failed
    shutil.rmtree(runner.workspace / "tasks.d" / "billing")
    plan = runner.run("plan", dsn, options="--max-deletes 0")
    assert plan.failed and plan.outputs["exit-code"] == "1"
    assert "- delete billing/invoices" in Path(plan.outputs["plan-file"]).read_text()
    assert "--max-deletes" in Path(plan.outputs["comment-file"]).read_text()  # the refusal, in the comment
    assert plan["Upload the whole plan"].outcome == "success"
    apply = runner.run("apply", dsn, options="--max-deletes 0")
    assert apply.failed and apply.outputs["exit-code"] == "1"
    assert len(live_tasks(dsn)) == 5
    assert not runner.run("apply", dsn, options="--max-deletes 1", revision="v2").failed
    assert [task for task, _ in live_tasks(dsn)] == EXAMPLE_IDS[1:]
    with psycopg.connect(dsn) as conn:
        revisions = conn.execute("SELECT revision FROM scheduler.applies ORDER BY applied_at").fetchall()
    assert revisions == [(SHA,), ("v2",)]


def test_each_source_keeps_its_own_comment(runner: Runner, dsn: str) -> None:
    plan = runner.run("plan", dsn, source="team>a")  # `>` could end the HTML comment: escaped
    marker = "<!-- reconciler-plan:team&gt;a -->"
    assert not plan.failed and plan["prepare"].outputs["marker"] == marker
    assert Path(plan.outputs["comment-file"]).read_text().startswith(marker + "\n### reconciler plan")
    assert plan["Post or update the sticky comment"].env["MARKER"] == marker
    assert not runner.run("plan", dsn, comment="false")["Post or update the sticky comment"].executed
    assert runner.run("plan", dsn, comment="false")["Post or update the sticky comment"].outcome == "skipped"


@pytest.mark.parametrize(
    ("command", "dsn", "error"),
    [
        ("plan", "", "input dsn is empty"),  # a pull request from a fork
        ("destroy", "host=unused", "input command: expected plan or apply"),
    ],
)
def test_bad_inputs_fail_before_anything_runs(runner: Runner, command: str, dsn: str, error: str) -> None:
    run = runner.run(command, dsn)
    assert run.failed and run["prepare"].outcome == "failure" and f"::error title=reconciler::{error}" in run.log
    assert [item.key for item in run.steps if item.outcome != "skipped"] == ["prepare"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("source", "team\ndir=/tmp/elsewhere"),
        ("command", "plan\n::add-mask::x"),
        ("command", "plan\r\n::set-output name=dir::/tmp/elsewhere"),
        ("tasks-dir", "tasks.d\n::stop-commands::t"),
        ("notifiers-dir", "notifiers.d\n::warning::x"),
        ("options", "--no-prune\tx"),
        ("revision", "v1\n::warning::x"),
    ],
)
def test_an_input_with_a_control_character_is_refused_and_writes_no_output_line(
    runner: Runner, dsn: str, name: str, value: str
) -> None:
    inputs = {"command": "plan", "dsn": dsn, name: value}
    run = run_action(ACTION, inputs, runner.workspace, runner.temp, GITHUB, skip={"install"})
    prepare = run["prepare"]
    assert run.failed and prepare.outcome == "failure" and prepare.outputs == {}
    error = f"::error title=reconciler::input {name} contains a control character (a newline, a tab…); remove it"
    assert prepare.log.splitlines() == [error]  # one line, and the value is not in it
    assert [item.key for item in run.steps if item.outcome != "skipped"] == ["prepare"]
    assert run.outputs["exit-code"] == "" and run.outputs["comment-file"] == ""


def test_the_dsn_never_shows_in_logs_outputs_or_files(runner: Runner, dsn: str) -> None:
    unreachable = "host=127.0.0.1 port=1 user=ci password=pw-Zq83-never-shown connect_timeout=2"
    runs = [runner.run("plan", dsn), runner.run("apply", dsn)]
    failing = runner.run("plan", unreachable)
    assert failing.failed and failing.outputs["exit-code"] == "1" and failing.outputs["plan-file"] == ""
    comment = Path(failing.outputs["comment-file"]).read_text()
    assert "cannot connect to PostgreSQL" in comment and "artifact" not in comment
    runs += [failing, runner.run("apply", unreachable)]
    assert runs[-1].failed
    seen = runner.written() + "".join(
        f"{run.log}{run.summary}{run.outputs}{[(item.outputs, item.inputs) for item in run.steps]}" for run in runs
    )
    for secret in (dsn, unreachable, "pw-Zq83-never-shown"):
        assert secret not in seen


def test_without_pipefail_the_validate_step_would_pass_invalid_files(runner: Runner, dsn: str) -> None:
    # GitHub runs a workflow step without `shell:` as `bash -e {0}`: a pipe exits with tee's 0.
    (runner.workspace / "tasks.d" / "broken.toml").write_text(INVALID_TASK)
    assert runner.run("plan", dsn)["validate"].outcome == "failure"
    defaulted = copy.deepcopy(ACTION)
    [validate] = [item for item in defaulted["runs"]["steps"] if item.get("id") == "validate"]
    del validate["shell"]
    run = runner.run("plan", dsn, action=defaulted)
    assert run["validate"].outcome == "success" and "tasks.d/broken.toml:3: trigger.expr" in run["validate"].log


ONCALL = 'kind = "webhook"\nurl = "http://127.0.0.1:9/oncall"\n'


def live_notifiers(dsn: str) -> list[tuple[str, str, str]]:
    """(source, name, url) of every notifier in the database."""
    with psycopg.connect(dsn) as conn:
        query = "SELECT source, name, spec->>'url' FROM scheduler.notifiers ORDER BY source, name"
        return [(row[0], row[1], row[2]) for row in conn.execute(query)]


def test_a_change_to_notifiers_only_is_planned_in_the_comment_and_applied(runner: Runner, dsn: str) -> None:
    assert not runner.run("apply", dsn).failed  # the tasks are live; then a pull request adds a notifier only
    (runner.workspace / "notifiers.d").mkdir()
    (runner.workspace / "notifiers.d" / "oncall.toml").write_text(ONCALL)
    plan = runner.run("plan", dsn)
    assert not plan.failed and plan.outputs["exit-code"] == "2"
    assert "and 1 notifier file(s) in notifiers.d are valid" in plan["validate"].log
    comment = Path(plan.outputs["comment-file"]).read_text()
    assert "**Notifiers: 1 change(s)**" in comment and "+ notifier oncall" in comment, comment
    assert "+ notifier oncall" in Path(plan.outputs["plan-file"]).read_text()
    apply = runner.run("apply", dsn)
    assert not apply.failed and "Apply complete: 1 change(s) written." in apply["apply"].log
    assert live_notifiers(dsn) == [("default", "oncall", "http://127.0.0.1:9/oncall")]
    assert runner.run("plan", dsn).outputs["exit-code"] == "0"


def test_the_notifiers_dir_input_names_a_directory_elsewhere(runner: Runner, dsn: str) -> None:
    alerts = runner.workspace / "config" / "alerts of team a"  # a path with spaces stays one argument
    alerts.mkdir(parents=True)
    (alerts / "oncall.toml").write_text(ONCALL)
    plan = runner.run("plan", dsn, notifiers_dir="config/alerts of team a")
    assert not plan.failed and "+ notifier oncall" in Path(plan.outputs["comment-file"]).read_text()
    assert not runner.run("apply", dsn, notifiers_dir="config/alerts of team a").failed
    assert live_notifiers(dsn) == [("default", "oncall", "http://127.0.0.1:9/oncall")]
    (alerts / "oncall.toml").write_text("kind = 'webhook'\n")  # broken: the validate step names the file
    failed = runner.run("plan", dsn, notifiers_dir="config/alerts of team a")
    assert failed.failed and failed["validate"].outcome == "failure"
    assert "config/alerts of team a/oncall.toml" in Path(failed.outputs["comment-file"]).read_text()


def test_on_a_checkout_with_uncommitted_changes_plan_and_apply_refuse_unless_allow_dirty(
    runner: Runner, dsn: str
) -> None:
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.invalid", "-C", str(runner.workspace)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "tasks"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    (runner.workspace / "notifiers.d").mkdir()
    (runner.workspace / "notifiers.d" / "oncall.toml").write_text(ONCALL)  # made by an earlier step, not committed
    plan = runner.run("plan", dsn)  # the runner sets CI and GITHUB_ACTIONS
    assert plan.failed and plan.outputs["exit-code"] == "1"
    comment = Path(plan.outputs["comment-file"]).read_text()
    assert "uncommitted changes in 1 file(s) of the declared directories (notifiers.d/oncall.toml) on CI" in comment
    apply = runner.run("apply", dsn)
    assert apply.failed and "or pass --allow-dirty" in apply["apply"].log and live_tasks(dsn) == []
    assert not runner.run("plan", dsn, options="--allow-dirty").failed
    assert not runner.run("apply", dsn, options="--allow-dirty").failed
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT revision FROM scheduler.applies").fetchall() == [(f"{head}-dirty",)]
