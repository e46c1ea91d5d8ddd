"""What the packaging tests share: a clean copy of the project, the venv's tools, and when to skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]

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
