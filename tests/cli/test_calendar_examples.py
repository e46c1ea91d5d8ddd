"""The README's business-time examples are what `reconciler next` prints for examples/business-time/, today."""

from __future__ import annotations

import re
from pathlib import Path

from tests.builders import run_reconciler

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "examples" / "business-time" / "tasks.d"


def test_the_readme_shows_what_next_prints_for_the_examples() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^\$ reconciler next (.+)$", readme, flags=re.MULTILINE)
    assert len(commands) == 3
    for command in commands:
        printed = run_reconciler("--tasks-dir", str(TASKS), "next", *command.split(), ok=True).stdout
        assert f"$ reconciler next {command}\n{printed}" in readme, printed


def test_the_examples_are_valid() -> None:
    done = run_reconciler("--tasks-dir", str(TASKS), "validate", ok=True)
    assert "3 task file(s)" in done.stdout and "2 calendar file(s)" in done.stdout
