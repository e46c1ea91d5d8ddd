"""Every install command the documentation shows is one a test runs: a grep of README.md, docs/ and
deploy/ finds no install line that test_wheel.py does not run (or CI, for the test command)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.ecosystem.packaging import INSTALL_DOC, PROJECT, install_blocks

# A command that installs Python packages or makes the venv they go in.
INSTALL = re.compile(r"\b(pip3?|pipx|uv pip)\s+(install|wheel)\b|-m\s+(venv|pip\s+(install|wheel))\b")
# Run by .ci/run (as `python -m pip install -q -e '.[dev]'`, then `python -m pytest -q`): the
# README's and docs/development.md's test command; checked against .ci/run below.
RUN_BY_CI = {"pip install -e '.[dev]'", "pip install -e '.[dev]' && python -m pytest -q"}


def documents() -> list[Path]:
    deploy = [p for p in sorted((PROJECT / "deploy").rglob("*")) if p.is_file()]
    return [PROJECT / "README.md", *sorted((PROJECT / "docs").rglob("*.md")), *deploy]


def install_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) of each install command in `text`: the `code spans` of a line of prose
    that hold one, else the whole line without a comment's `#` or a prompt's `$`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if not INSTALL.search(line):
            continue
        spans = [span for span in re.findall(r"`([^`]+)`", line) if INSTALL.search(span)]
        found += [(number, command) for command in spans or [re.sub(r"^[#$\s]+", "", line).strip()]]
    return found


def test_no_documented_install_line_goes_untested() -> None:
    executed = {line for block in install_blocks() for line in block}
    untested = [
        f"{path.relative_to(PROJECT)}:{number}: {command}"
        for path in documents()
        for number, command in install_commands(path.read_text(errors="replace"))
        if command not in executed | RUN_BY_CI
    ]
    assert not untested, "install lines no test runs (run them in docs/install.md's marked blocks):\n" + "\n".join(
        untested
    )


def test_the_grep_finds_install_lines_in_every_form() -> None:
    text = (
        "    python3 -m venv /opt/x && /opt/x/bin/pip install reconciler\n"
        "#   /opt/reconciler/bin/pip install reconciler\n"
        "Run `pipx install reconciler` or `uv pip install reconciler`, then `reconciler up`.\n"
        "python -m pip wheel .\n"
        "reconciler validate\n"
    )
    assert install_commands(text) == [
        (1, "python3 -m venv /opt/x && /opt/x/bin/pip install reconciler"),
        (2, "/opt/reconciler/bin/pip install reconciler"),
        (3, "pipx install reconciler"),
        (3, "uv pip install reconciler"),
        (4, "python -m pip wheel ."),
    ]


def test_the_documentation_installs_this_distribution_from_the_checkout() -> None:
    """The blocks install what pyproject.toml builds, never a name from the index (PyPI's `reconciler`
    is another project); the README's quick start and the systemd unit's comment are among them."""
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "reconciler-scheduler"
    assert project["scripts"] == {"reconciler": "reconciler.cli.parser:main"}
    wheel_block, editable_block = install_blocks()
    wheel_name = project["name"].replace("-", "_")
    assert f"/opt/reconciler/bin/pip install dist/{wheel_name}-*.whl" in wheel_block
    assert "pip install -e ." in editable_block
    assert "pip install -e ." in dict(install_commands((PROJECT / "README.md").read_text())).values()
    unit = (PROJECT / "deploy" / "systemd" / "reconciler-engine.service").read_text()
    assert [c for _, c in install_commands(unit)] == [line for line in wheel_block if INSTALL.search(line)]
    assert INSTALL_DOC.name in unit


def test_ci_runs_the_documented_test_command() -> None:
    ci = (PROJECT / ".ci" / "run").read_text().splitlines()
    assert "python -m pip install -q -e '.[dev]'" in ci
    assert "python -m pytest -q" in ci
