"""`reconciler completion SHELL`: scripts the shells accept, completing task ids from the tasks directory."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.builders import run_reconciler
from tests.cli.test_startup import TASK, imported_by

ROOT = Path(__file__).parent.parent.parent


def script(shell: str, tmp_path: Path) -> Path:
    done = run_reconciler("completion", shell, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    path = tmp_path / f"reconciler.{shell}"
    path.write_text(done.stdout)
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose tasks.d holds two tasks, plus a draft and a hidden folder the loader ignores."""
    tasks = tmp_path / "project" / "tasks.d"
    for name in ("billing/invoices.toml", "ops/ping.toml", "_draft.toml", ".hidden/old.toml", "ops/notes.txt"):
        (tasks / name).parent.mkdir(parents=True, exist_ok=True)
        (tasks / name).write_text(TASK)
    other = tmp_path / "project" / "other.d"
    other.mkdir()
    (other / "nightly.toml").write_text(TASK)
    return tmp_path / "project"


def bash_complete(completion: Path, cwd: Path, *words: str) -> list[str]:
    """What bash offers after `reconciler WORDS` (the last word is the one being completed)."""
    program = f"""
source {completion}
COMP_WORDS=(reconciler "$@")
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
_shtab_reconciler
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "-c", program, "bash", *words], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return sorted(line for line in done.stdout.splitlines() if line)


def test_bash_script_is_valid_bash_with_the_task_id_completer(tmp_path: Path) -> None:
    completion = script("bash", tmp_path)
    checked = subprocess.run(["bash", "-n", str(completion)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    text = completion.read_text()
    assert "_reconciler_task_ids()" in text
    for command in ("trigger", "explain", "history", "runs", "next"):
        assert f"_shtab_reconciler_{command}_pos_0_COMPGEN=_reconciler_task_ids" in text, command


def test_bash_completes_task_ids_as_the_loader_finds_them(project: Path, tmp_path: Path) -> None:
    completion = script("bash", tmp_path)
    assert bash_complete(completion, project, "trigger", "") == ["billing/invoices", "ops/ping"]
    assert bash_complete(completion, project, "explain", "ops/") == ["ops/ping"]
    assert bash_complete(completion, project, "next", "billing/invoices", "o") == ["ops/ping"]


def test_bash_finds_tasks_dir_above_and_follows_tasks_dir_option(project: Path, tmp_path: Path) -> None:
    completion = script("bash", tmp_path)
    inside = project / "tasks.d" / "billing"
    assert bash_complete(completion, inside, "runs", "") == ["billing/invoices", "ops/ping"]
    assert bash_complete(completion, project, "--tasks-dir", "other.d", "history", "") == ["nightly"]
    # bash splits `--tasks-dir=other.d` at the `=`.
    assert bash_complete(completion, project, "--tasks-dir", "=", "other.d", "trigger", "") == ["nightly"]
    assert bash_complete(completion, tmp_path, "trigger", "") == []


def test_bash_completes_commands(tmp_path: Path) -> None:
    completion = script("bash", tmp_path)
    assert bash_complete(completion, tmp_path, "comp") == ["completion"]


def test_zsh_script_has_the_task_id_completer(tmp_path: Path) -> None:
    completion = script("zsh", tmp_path)
    text = completion.read_text()
    assert text.startswith("#compdef reconciler")
    assert "_reconciler_task_ids()" in text and ":ID:_reconciler_task_ids" in text
    zsh = shutil.which("zsh")
    if zsh is not None:  # not installed on every machine: the syntax check runs where it is
        checked = subprocess.run([zsh, "-n", str(completion)], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stderr


def test_fish_script_has_the_task_id_completer(tmp_path: Path) -> None:
    completion = script("fish", tmp_path)
    text = completion.read_text()
    assert "function __reconciler_task_ids" in text and '-ka "(__reconciler_task_ids)"' in text
    fish = shutil.which("fish")
    if fish is not None:
        checked = subprocess.run([fish, "--no-execute", str(completion)], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stderr


def test_unknown_shell_is_one_line_error() -> None:
    done = run_reconciler("completion", "tcsh", cwd=ROOT)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert "unknown shell 'tcsh'" in done.stderr and "bash, zsh, fish" in done.stderr


def test_light_commands_do_not_load_completion_or_schema(tmp_path: Path) -> None:
    """The parser binds every command's function (its module is light); what completion and schema use is
    imported only when they run."""
    (tmp_path / "tasks.d").mkdir()
    (tmp_path / "tasks.d" / "nightly.toml").write_text(TASK)
    for argv in (["validate"], ["next", "--count", "1"], ["--help"]):
        modules = imported_by(argv, tmp_path)
        assert [m for m in ("shtab", "reconciler.spec.jsonschema") if m in modules] == []
