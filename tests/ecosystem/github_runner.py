"""GitHub's runner in miniature, for the composite action: expressions, step conditions, `run:` scripts.

As the runner does (actions/runner): a step runs when its `if:` holds, with an implicit
`success() &&` when the condition calls no status function; `${{ }}` in `env:`, `with:`, `if:`
and the action's outputs are evaluated against `inputs` (defaults included), `github`, `runner`
and `steps`; a script is written to a file and run by its shell's command line in the workspace;
each step gets its own GITHUB_OUTPUT and GITHUB_STEP_SUMMARY; a failed step fails the action.
Not emulated: `uses:` steps and the steps named in `skip` are recorded with their evaluated
`with:` and `env:` as if they succeeded, never run; GITHUB_PATH and GITHUB_ENV (a script that
writes them fails the test). Expressions are the subset the action uses (anything else fails),
and `==` compares strings case-sensitively where GitHub ignores case.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# The runner's arguments per shell (actions/runner, ScriptHandler.cs and ScriptHandlerHelpers.cs):
# a workflow step with no shell runs bash with sh's arguments, `-e {0}`; `shell: bash` is
# `bash --noprofile --norc -e -o pipefail {0}`. Nothing here uses another shell.
RUNNER_ARGS: dict[str | None, tuple[str, ...]] = {
    None: ("-e",),
    "bash": ("--noprofile", "--norc", "-e", "-o", "pipefail"),
}

_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
_TOKEN = re.compile(
    r"\s*(?:(?P<op>&&|\|\||==|!=|!|\(|\))"
    r"|'(?P<string>(?:[^']|'')*)'"
    r"|(?P<number>\d+)"
    r"|(?P<function>always|success|failure|cancelled)\(\)"
    r"|(?P<name>[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*))"
)
_STATUS_FUNCTION = re.compile(r"\b(?:always|success|failure|cancelled)\(\)")
_PYTHON_OP = {"&&": " and ", "||": " or ", "==": "==", "!=": "!=", "!": " not ", "(": "(", ")": ")"}
_LITERAL = {"true": True, "false": False, "null": None}


def evaluate(expression: str, context: Mapping[str, Any], failed: bool = False) -> Any:
    """The value of one expression (without `${{ }}`); `failed`: whether an earlier step failed."""
    functions = {"always": True, "success": not failed, "failure": failed, "cancelled": False}
    python, position, text = [], 0, expression.strip()
    while position < len(text):
        token = _TOKEN.match(text, position)
        if token is None or token.end() == position:
            raise ValueError(f"expression not emulated: {expression!r} at {text[position:]!r}")
        position = token.end()
        if token["op"]:
            python.append(_PYTHON_OP[token["op"]])
        elif token["string"] is not None:
            python.append(repr(token["string"].replace("''", "'")))
        elif token["number"]:
            python.append(token["number"])
        elif token["function"]:
            python.append(repr(functions[token["function"]]))
        elif token["name"] in _LITERAL:
            python.append(repr(_LITERAL[token["name"]]))
        else:
            python.append(repr(lookup(context, token["name"])))
    return eval(" ".join(python), {"__builtins__": {}}, {})  # only literals and operators: built from the tokens above


def lookup(context: Mapping[str, Any], dotted: str) -> Any:
    """`steps.plan.outputs.exit-code` in the context; null (None) when any part is missing."""
    value: Any = context
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def as_string(value: Any) -> str:
    """An expression's value spliced into a string, as the runner writes it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def interpolate(text: str, context: Mapping[str, Any]) -> str:
    """`text` with every `${{ expression }}` replaced by its value."""
    return _EXPRESSION.sub(lambda match: as_string(evaluate(match[1], context)), text)


def condition_holds(condition: Any, context: Mapping[str, Any], failed: bool) -> bool:
    """A step's `if:`: `${{ }}` optional, and `success() && (…)` unless it calls a status function."""
    if condition is None:
        condition = "success()"
    if isinstance(condition, bool):
        return condition and not failed
    text = str(condition).strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    if not _STATUS_FUNCTION.search(text):
        text = f"success() && ({text})"
    return bool(evaluate(text, context, failed))


def run_script(script: str, shell: str | None, cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a script as the runner does: from a file, with the shell's arguments."""
    if shell not in RUNNER_ARGS:
        pytest.fail(f"shell {shell!r}: only GitHub's default and `bash` are emulated here")
    with tempfile.TemporaryDirectory(prefix="step-") as scripts:
        path = Path(scripts) / "step.sh"
        path.write_text(script)
        return subprocess.run(
            ["bash", *RUNNER_ARGS[shell], str(path)],
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=120,
        )


def read_outputs(path: Path) -> dict[str, str]:
    """A GITHUB_OUTPUT file: `name=value` lines and `name<<DELIMITER` blocks."""
    outputs: dict[str, str] = {}
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, _, delimiter = line.partition("<<")
            block = []
            for item in lines:
                if item == delimiter:
                    break
                block.append(item)
            outputs[name] = "\n".join(block)
        elif line:
            name, _, value = line.partition("=")
            outputs[name] = value
    return outputs


@dataclass
class Step:
    """One step as the run left it."""

    key: str  # its id, else its name, else what it uses
    outcome: str  # success, failure or skipped
    executed: bool  # run here (a `run:` step not skipped); False for `uses:` and `skip` steps
    env: dict[str, str] = field(default_factory=dict)  # its evaluated `env:`
    inputs: dict[str, str] = field(default_factory=dict)  # its evaluated `with:`
    outputs: dict[str, str] = field(default_factory=dict)
    log: str = ""  # stdout then stderr
    summary: str = ""


@dataclass
class ActionRun:
    """The steps, in order, and the action's outputs."""

    steps: list[Step]
    outputs: dict[str, str]

    def __getitem__(self, key: str) -> Step:
        [found] = [item for item in self.steps if item.key == key]
        return found

    @property
    def failed(self) -> bool:
        return any(item.outcome == "failure" for item in self.steps)

    @property
    def log(self) -> str:
        return "".join(item.log for item in self.steps)

    @property
    def summary(self) -> str:
        return "".join(item.summary for item in self.steps)


def step_key(item: Mapping[str, Any]) -> str:
    return str(item.get("id") or item.get("name") or item["uses"])


def runner_env(workspace: Path, runner_temp: Path, github: Mapping[str, Any]) -> dict[str, str]:
    """What every step's process sees: this environment without a database of its own, this venv's
    commands first on PATH, and the runner's GITHUB_* and RUNNER_* variables."""
    base = {k: v for k, v in os.environ.items() if k not in ("RECONCILER_DSN", "DATABASE_URL")}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    return {
        **base,
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_ACTION_PATH": as_string(github.get("action_path")),
        "GITHUB_SHA": as_string(github.get("sha")),
        "GITHUB_REPOSITORY": as_string(github.get("repository")),
        "GITHUB_SERVER_URL": as_string(github.get("server_url")),
        "GITHUB_RUN_ID": as_string(github.get("run_id")),
        "RUNNER_TEMP": str(runner_temp),
    }


def run_action(
    action: Mapping[str, Any],
    given: Mapping[str, str],
    workspace: Path,
    runner_temp: Path,
    github: Mapping[str, Any],
    skip: Collection[str] = (),
) -> ActionRun:
    """Run a composite action's steps in order, as the runner would with `with: given`."""
    assert action["runs"]["using"] == "composite"
    declared = action.get("inputs", {})
    unknown = set(given) - set(declared)
    assert not unknown, f"inputs the action does not declare: {sorted(unknown)}"
    context: dict[str, Any] = {"github": dict(github), "runner": {"temp": str(runner_temp), "os": "Linux"}, "steps": {}}
    context["inputs"] = {
        name: given[name] if name in given else interpolate(str(spec.get("default", "")), context)
        for name, spec in declared.items()
    }
    missing = [name for name, spec in declared.items() if spec.get("required") and name not in given]
    assert not missing, f"required inputs not given: {missing}"
    base_env = runner_env(workspace, runner_temp, github)
    steps: list[Step] = []
    for item in action["runs"]["steps"]:
        failed = any(done.outcome == "failure" for done in steps)
        key = step_key(item)
        if not condition_holds(item.get("if"), context, failed):
            done = Step(key, "skipped", executed=False)
        else:
            env = {name: interpolate(str(value), context) for name, value in item.get("env", {}).items()}
            inputs = {name: interpolate(str(value), context) for name, value in item.get("with", {}).items()}
            if "run" not in item or key in skip:
                done = Step(key, "success", executed=False, env=env, inputs=inputs)
            else:
                done = execute(item, key, env, workspace, {**base_env, **env})
        steps.append(done)
        if "id" in item:
            context["steps"][item["id"]] = {
                "outputs": done.outputs,
                "outcome": done.outcome,
                "conclusion": done.outcome,
            }
    outputs = {name: interpolate(str(spec["value"]), context) for name, spec in action.get("outputs", {}).items()}
    return ActionRun(steps, outputs)


def execute(item: Mapping[str, Any], key: str, env: dict[str, str], workspace: Path, environ: dict[str, str]) -> Step:
    """Run one `run:` step with fresh runner files; its outcome, outputs, log and summary."""
    assert "${{" not in item["run"], f"{key}: expressions belong in env:, not in scripts"
    with tempfile.TemporaryDirectory(prefix="runner-files-") as folder:
        files = {
            name: Path(folder) / name for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_PATH", "GITHUB_ENV")
        }
        for path in files.values():
            path.write_text("")
        cwd = workspace / item.get("working-directory", ".")
        proc = run_script(item["run"], item.get("shell"), cwd, {**environ, **{k: str(v) for k, v in files.items()}})
        for name in ("GITHUB_PATH", "GITHUB_ENV"):
            assert files[name].read_text() == "", f"{key} writes {name}, which this emulation does not apply"
        return Step(
            key,
            "success" if proc.returncode == 0 else "failure",
            executed=True,
            env=env,
            outputs=read_outputs(files["GITHUB_OUTPUT"]),
            log=proc.stdout + proc.stderr,
            summary=files["GITHUB_STEP_SUMMARY"].read_text(),
        )
