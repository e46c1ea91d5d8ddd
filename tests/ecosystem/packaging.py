"""What the packaging tests share: a clean copy of the project, the venv's tools, and when to skip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
INSTALL_DOC = PROJECT / "docs" / "install.md"
# Marks a ```sh block of docs/install.md that test_wheel.py runs as written.
RUNS_THIS_BLOCK = "<!-- tests/ecosystem/test_wheel.py runs this block -->"
# The only words of a marked block the test changes: where the documented venvs go.
VENV_PLACEHOLDER = re.compile(r"/opt/reconciler\b|(?<![\w./-])\.venv\b")

# Building and installing do not depend on the database server, and they are slow: CI's second
# pass (against an external PostgreSQL, RECONCILER_TEST_DSN) does not repeat them.
once_per_ci = pytest.mark.skipif(
    bool(os.environ.get("RECONCILER_TEST_DSN")), reason="packaging tests run once, in the embedded-PostgreSQL pass"
)


def tool(name: str) -> str:
    """A console script installed next to this interpreter (the venv's hadolint, pre-commit, …)."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else name


def copy_project(dest: Path) -> Path:
    """What a wheel or a hook environment is built from, without caches or anything else in the checkout.

    Untracked files count: the test checks the files on disk, as CI checks them once committed.
    """
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        shutil.copy2(PROJECT / name, dest / name)
    shutil.copytree(PROJECT / "reconciler", dest / "reconciler", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def outside_env(**extra: str) -> dict[str, str]:
    """This environment without the current venv, and without settings that would point a command at a database."""
    dropped = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "RECONCILER_DSN", "DATABASE_URL"}
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("PG")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env | extra


def run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """Run a command that must succeed; its combined output, or a failure showing it."""
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=outside_env() if env is None else env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}"
    return done.stdout


def install_blocks() -> list[list[str]]:
    """The lines of each ```sh block of docs/install.md marked RUNS_THIS_BLOCK, in order."""
    lines = INSTALL_DOC.read_text().splitlines()
    blocks = []
    for at, line in enumerate(lines):
        if line.strip() == RUNS_THIS_BLOCK:
            assert lines[at + 1].strip() == "```sh", f"docs/install.md:{at + 2}: a marked block must follow its mark"
            end = lines.index("```", at + 2)
            blocks.append([text.strip() for text in lines[at + 2 : end] if text.strip()])
    return blocks


def run_block(block: list[str], venv: Path, cwd: Path) -> str:
    """A documented block as one bash script, its venv paths replaced by `venv`, with `python3` the
    interpreter running the tests; its combined output."""
    shims = venv.parent / "shims"
    shims.mkdir(exist_ok=True)
    if not (shims / "python3").exists():
        (shims / "python3").symlink_to(sys.executable)
    env = outside_env()
    env["PATH"] = os.pathsep.join([str(shims), env.get("PATH", "")])
    script = "\n".join(VENV_PLACEHOLDER.sub(str(venv), line) for line in block)
    return run(["bash", "-eo", "pipefail", "-c", script], cwd, env=env, timeout=300)
