"""Every declared directory goes through GitOps, from one list: the kinds of reconciler/files/registry.py.

The workflows' `paths`, the sample workflow of docs/gitops.md, the pre-commit hook's `files`, the action's
inputs, the command line's options and what `watch`/`up` watch are all checked against `KINDS` here, so a
kind added to the registry without them fails this file, naming each place.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from reconciler.cli.options import FilesOptions
from reconciler.cli.parser import build_parser, parse
from reconciler.files.kinds import Kind
from reconciler.files.locations import DIRECTORY_OPTIONS
from reconciler.files.registry import KINDS
from tests.ecosystem.test_workflows import workflow

ROOT = Path(__file__).resolve().parents[2]
GITOPS_DOC = ROOT / "docs" / "gitops.md"
SAMPLE_FIRST_LINE = "# .github/workflows/reconciler.yml in a repository of task files"
Kinds = tuple[Kind[Any], ...]


def directory_globs(kinds: Kinds) -> list[str]:
    """The workflows' `paths`: every declared directory, in the registry's order."""
    return [f"{kind.directory}/**" for kind in kinds]


def hook_files(kinds: Kinds) -> str:
    """The pre-commit hook's `files`: a file of any declared directory."""
    return "^(" + "|".join(re.escape(kind.directory) for kind in kinds) + r")/.*\.toml$"


def input_name(kind: Kind[Any]) -> str:
    """The action's input of a kind's directory: its option without dashes (`tasks-dir`)."""
    return kind.option.removeprefix("--")


def sample_workflow() -> dict[str, Any]:
    """The sample workflow of docs/gitops.md: its yaml block that starts with SAMPLE_FIRST_LINE."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", GITOPS_DOC.read_text(), re.DOTALL | re.MULTILINE)
    [sample] = [block for block in blocks if block.startswith(SAMPLE_FIRST_LINE)]
    data: dict[str, Any] = yaml.safe_load(sample)
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def gaps(kinds: Kinds) -> list[str]:
    """Every place that does not follow `kinds`, one line each (empty: every declared directory is covered)."""
    found: list[str] = []
    paths = directory_globs(kinds)

    def expect(place: str, value: Any, wanted: Any) -> None:
        if value != wanted:
            found.append(f"{place} is {value!r}; expected {wanted!r}")

    plan, apply = workflow("plan.yml")["on"], workflow("apply.yml")["on"]
    expect(".github/workflows/plan.yml on.pull_request.paths", plan["pull_request"]["paths"], paths)
    expect(".github/workflows/apply.yml on.push.paths", apply["push"]["paths"], paths)
    sample = sample_workflow()
    expect("docs/gitops.md sample on.pull_request.paths", sample["on"]["pull_request"]["paths"], paths)
    expect("docs/gitops.md sample on.push.paths", sample["on"]["push"]["paths"], paths)
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    expect(".pre-commit-hooks.yaml files", hook["files"], hook_files(kinds))

    action = yaml.safe_load((ROOT / "action.yml").read_text())
    [prepare] = [step for step in action["runs"]["steps"] if step.get("id") == "prepare"]
    options = {option for group in build_parser()._actions for option in group.option_strings}
    for kind in kinds:
        name = input_name(kind)
        if name not in action["inputs"]:
            found.append(f"action.yml has no input {name}")
        elif f"${{{{ inputs.{name} }}}}" not in prepare["env"].values() or kind.option not in prepare["run"]:
            found.append(f"action.yml's prepare step does not pass input {name} as {kind.option}")
        if kind.option not in options:
            found.append(f"the command line has no global option {kind.option}")
        if (kind.name, kind.directory, kind.option) not in DIRECTORY_OPTIONS:
            found.append(f"DIRECTORY_OPTIONS has no {kind.option} (the command line builds its options from it)")
    return found


class QuotaKind(Kind[Any]):
    """A kind made here only (quotas.d), registered here only: nothing else knows it."""

    name = "quota"
    directory = "quotas.d"
    option = "--quotas-dir"
    model = dict
    empty = "empty quota file"


def test_every_declared_directory_is_covered_by_the_workflows_the_hook_the_action_and_the_command_line() -> None:
    assert [kind.directory for kind in KINDS] == ["calendars.d", "limits.d", "notifiers.d", "tasks.d"]
    assert gaps(KINDS) == []


def test_a_kind_added_to_the_registry_alone_fails_the_check_naming_every_place() -> None:
    places = [line.split(" is ")[0].split(" has ")[0] for line in gaps((*KINDS, QuotaKind()))]
    assert places == [
        ".github/workflows/plan.yml on.pull_request.paths",
        ".github/workflows/apply.yml on.push.paths",
        "docs/gitops.md sample on.pull_request.paths",
        "docs/gitops.md sample on.push.paths",
        ".pre-commit-hooks.yaml files",
        "action.yml",
        "the command line",
        "DIRECTORY_OPTIONS",
    ]


def test_the_command_lines_light_list_of_directories_is_the_registrys() -> None:
    """cli/options.py keeps the kinds' directories as plain strings (the CLI starts without importing the kinds):
    the same kinds, in the same order."""
    assert list(DIRECTORY_OPTIONS) == [(kind.name, kind.directory, kind.option) for kind in KINDS]


def test_the_hook_pattern_takes_every_declared_file_and_nothing_else() -> None:
    pattern = re.compile(hook_files(KINDS))
    declared = ("tasks.d/ops/ping.toml", "tasks.d/a.toml", "notifiers.d/oncall.toml", "calendars.d/us.toml")
    for path in (*declared, "limits.d/billing-api.toml"):
        assert pattern.search(path), path
    others = ("tasks.d.toml", "docs/tasks.d/x.toml", "tasksxd/a.toml", "notifiers.d/oncall.json", "README.md")
    for path in (*others, "limits.d.toml", "limits.d/billing-api.json"):
        assert not pattern.search(path), path


def test_watch_and_up_watch_the_directory_of_every_kind(tmp_path: Path) -> None:
    args = parse(["--tasks-dir", str(tmp_path / "tasks.d"), "watch"])
    assert FilesOptions.of(args).dirs.listed() == [tmp_path / kind.directory for kind in KINDS]
