"""The project a command runs in: which `.reconciler/` (embedded database) a tasks directory uses, and how a
directory is named in messages. Folders in tmp_path, no database."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import UserError
from reconciler.files.project import home_for, project_root, shown_path


def project(root: Path, database: bool = True) -> Path:
    (root / "tasks.d").mkdir(parents=True)
    (root / ".git").mkdir()
    if database:
        (root / ".reconciler").mkdir()
    return root


def test_an_exported_tasks_dir_inside_the_project_uses_the_projects_database(tmp_path: Path) -> None:
    root = project(tmp_path / "proj")
    (root / "exported" / "tasks.d").mkdir(parents=True)
    assert project_root("exported/tasks.d", root) == root
    assert home_for("exported/tasks.d", create=False, cwd=root) == root / ".reconciler"


def test_a_tasks_dir_outside_any_project_uses_the_current_projects_database(tmp_path: Path) -> None:
    root = project(tmp_path / "proj")
    (tmp_path / "elsewhere" / "tasks.d").mkdir(parents=True)
    assert project_root(str(tmp_path / "elsewhere" / "tasks.d"), root / "tasks.d") == root


def test_a_tasks_dir_of_a_project_with_its_own_database_uses_that_one(tmp_path: Path) -> None:
    here = project(tmp_path / "here")
    there = project(tmp_path / "there")
    assert project_root(str(there / "tasks.d"), here) == there


def test_a_read_only_command_refuses_to_start_a_new_database_outside_the_current_folder(tmp_path: Path) -> None:
    here = project(tmp_path / "here", database=False)
    (tmp_path / "elsewhere" / "tasks.d").mkdir(parents=True)
    with pytest.raises(UserError) as refused:
        home_for(str(tmp_path / "elsewhere" / "tasks.d"), create=False, cwd=here)
    message = str(refused.value)
    assert "--dsn" in message and "run it from the project" in message and "\n" not in message
    assert not (tmp_path / "elsewhere" / ".reconciler").exists()
    # apply creates it (announced on stderr when it does); the first plan in a project may too
    assert home_for(str(tmp_path / "elsewhere" / "tasks.d"), cwd=here) == tmp_path / "elsewhere" / ".reconciler"
    assert home_for("tasks.d", create=False, cwd=here) == here / ".reconciler"


def test_a_directory_is_named_readably(tmp_path: Path) -> None:
    root = project(tmp_path / "proj")
    inside = root / "tasks.d" / "billing"
    inside.mkdir()
    assert shown_path("..", inside) == str(root / "tasks.d")
    assert shown_path(".", root / "tasks.d") == str(root / "tasks.d")
    assert shown_path("tasks.d", root) == "tasks.d"
    assert shown_path("./exported/../tasks.d", root) == "tasks.d"
