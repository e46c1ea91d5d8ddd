"""The built wheel, installed (not editable) into a fresh venv, runs validate and plan on its own."""

from __future__ import annotations

import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.cli.packaging import PROJECT, copy_project, once_per_ci, run

pytestmark = once_per_ci


def test_installed_wheel_runs_version_validate_and_plan_against_the_database(tmp_path: Path, dsn: str) -> None:
    source = copy_project(tmp_path / "source")
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", dist, source], tmp_path)
    (wheel,) = dist.glob("reconciler-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packed = set(archive.namelist())
    assert {"reconciler/db/queries.sql", "reconciler/db/schemata.toml", "reconciler/py.typed"} <= packed

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], tmp_path)
    python, reconciler = venv / "bin" / "python", venv / "bin" / "reconciler"
    # Dependencies from the configured index; pip's cache makes a second run quick.
    run([python, "-m", "pip", "install", "--quiet", wheel], tmp_path, timeout=300)

    # From outside the checkout, so the installed copy is what runs.
    where = run([python, "-c", "import reconciler; print(reconciler.__file__)"], tmp_path)
    assert Path(where.strip()).is_relative_to(venv), where
    version = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["version"]
    assert run([reconciler, "--version"], tmp_path).strip() == f"reconciler {version}"

    tasks = shutil.copytree(PROJECT / "tasks.d", tmp_path / "tasks.d")
    count = len(list(tasks.rglob("*.toml")))
    assert f"{count} task file(s) in tasks.d are valid" in run([reconciler, "validate"], tmp_path)

    # plan creates the schema (schemata.toml) and reads the database (sql/queries.sql): both come from the wheel.
    planned = run([reconciler, "--dsn", dsn, "plan", "--format", "json"], tmp_path)
    assert "ops/ping" in planned, planned
    run([reconciler, "--dsn", dsn, "apply"], tmp_path)
    run([reconciler, "--dsn", dsn, "plan", "--detailed-exitcode"], tmp_path)  # 0: nothing left to change
