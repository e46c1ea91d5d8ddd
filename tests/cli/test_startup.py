"""The CLI starts light: `--version`, `--help` and the offline commands load no database, HTTP or engine module.

What is imported, not how long it takes: the times are `bench/startup.py`'s, on a quiet machine.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.cli.parser import Command, build_parser

# Loaded only by the commands that talk to PostgreSQL, fire requests, serve metrics or watch files.
HEAVY = (
    "psycopg",
    "aiohttp",
    "prometheus_client",
    "pgserver",
    "watchfiles",
    "reconciler.engine.loop",
    "reconciler.db.store",
)
# Runs main(argv) in a fresh interpreter and writes its exit code and sys.modules to the file named first.
PROBE = """
import json, sys
from pathlib import Path
from reconciler.cli.parser import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
Path(sys.argv[1]).write_text(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""
TASK = 'timezone = "UTC"\n[trigger]\nkind = "cron"\nexpr = "0 3 * * *"\n[target]\nurl = "http://127.0.0.1:9/"\n'


def imported_by(argv: list[str], cwd: Path) -> set[str]:
    """The modules loaded once `reconciler ARGV` has run in a new process (which must exit 0)."""
    out = cwd / "modules.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RECONCILER_DSN", "DATABASE_URL")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(out.read_text())
    assert found["code"] == 0, done.stderr
    return set(found["modules"])


@pytest.mark.parametrize(
    ("argv", "also_not"),
    [
        (["--version"], ("pydantic",)),
        (["--help"], ("pydantic",)),
        (["validate"], ()),
        (["next", "--count", "2"], ()),
    ],
)
def test_light_commands_import_no_database_http_or_engine(
    argv: list[str], also_not: tuple[str, ...], tmp_path: Path
) -> None:
    (tmp_path / "tasks.d").mkdir()
    (tmp_path / "tasks.d" / "nightly.toml").write_text(TASK)
    modules = imported_by(argv, tmp_path)
    assert "reconciler.cli" in modules
    assert [name for name in (*HEAVY, *also_not) if name in modules] == []


def test_every_command_is_a_typed_function_of_its_options() -> None:
    """Dispatch by the functions themselves: each command's `run` takes the one options value its `options` builds."""
    [commands] = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    for name, parser in commands.choices.items():
        command = parser.get_default("run")
        assert isinstance(command, Command), name
        [parameter] = inspect.signature(command.run).parameters.values()
        built = command.options.__self__  # type: ignore[attr-defined]  # the options class whose `of` builds it
        assert parameter.annotation == built.__name__, name
