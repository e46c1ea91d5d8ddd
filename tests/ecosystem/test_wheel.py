"""docs/install.md's install blocks, run as written in a fresh venv: the wheel built from a checkout and
installed (not editable) runs version, validate, plan and apply on its own; then the editable install
of the README's quick start."""

from __future__ import annotations

import shutil
import tomllib
import zipfile
from pathlib import Path

from tests.ecosystem.packaging import PROJECT, copy_project, install_blocks, once_per_ci, run, run_block

pytestmark = once_per_ci


def test_documented_installs_run_version_validate_plan_and_apply(tmp_path: Path, dsn: str) -> None:
    wheel_block, editable_block = install_blocks()
    source = copy_project(tmp_path / "source")
    venv = tmp_path / "venv"
    python, reconciler = venv / "bin" / "python", venv / "bin" / "reconciler"
    version = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["version"]

    # Dependencies from the configured index; pip's cache makes a second run quick.
    assert run_block(wheel_block, venv, source).rstrip().endswith(f"reconciler {version}")
    (wheel,) = (source / "dist").glob("reconciler_scheduler-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packed = set(archive.namelist())
    assert {"reconciler/db/queries.sql", "reconciler/db/schemata.toml", "reconciler/py.typed"} <= packed

    # From outside the checkout, so the installed copy is what runs.
    where = run([python, "-c", "import reconciler; print(reconciler.__file__)"], tmp_path)
    assert Path(where.strip()).is_relative_to(venv), where
    assert run([reconciler, "--version"], tmp_path).strip() == f"reconciler {version}"

    tasks = shutil.copytree(PROJECT / "tasks.d", tmp_path / "tasks.d")
    count = len(list(tasks.rglob("*.toml")))
    assert f"{count} task file(s) in tasks.d are valid" in run([reconciler, "validate"], tmp_path)

    # plan creates the schema (schemata.toml) and reads the database (sql/queries.sql): both come from the wheel.
    planned = run([reconciler, "--dsn", dsn, "plan", "--format", "json"], tmp_path)
    assert "ops/ping" in planned, planned
    run([reconciler, "--dsn", dsn, "apply"], tmp_path)
    run([reconciler, "--dsn", dsn, "plan", "--detailed-exitcode"], tmp_path)  # 0: nothing left to change

    # The quick start's editable install, in the same venv (its dependencies are there already).
    assert run_block(editable_block, venv, source).rstrip().endswith(f"reconciler {version}")
    where = run([python, "-c", "import reconciler; print(reconciler.__file__)"], tmp_path)
    assert Path(where.strip()).is_relative_to(source), where
    assert f"{count} task file(s) in tasks.d are valid" in run([reconciler, "validate"], tmp_path)
