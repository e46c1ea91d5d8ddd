"""The project a command runs in: the folder holding the tasks directory, found from wherever the command runs
(`reconciler status` inside `tasks.d/billing/` works on the same project as at the root), and the `.reconciler/`
folder in it where the embedded PostgreSQL lives (db/embedded.py starts it there)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from reconciler.errors import UserError

HOME_NAME = ".reconciler"


def _upwards(here: Path) -> list[Path]:
    """`here` and the folders above it, up to and including the first that holds a `.git`."""
    folders = []
    for folder in (here, *here.parents):
        folders.append(folder)
        if (folder / ".git").exists():
            break
    return folders


def find_tasks_dir(tasks_dir: str, cwd: Path | None = None) -> str:
    """--tasks-dir as given when it exists from here; a relative one that does not is looked for
    in the folders above (a command run inside `tasks.d/billing/`, up to the git top level) and
    returned relative to here, so messages name files as the user can open them."""
    here = (cwd or Path.cwd()).resolve()
    given = Path(tasks_dir)
    if given.is_absolute() or (here / given).is_dir():
        return tasks_dir
    for folder in _upwards(here)[1:]:
        if (folder / given).is_dir():
            return os.path.relpath(folder / given, here)
    return tasks_dir


def project_root(tasks_dir: str, cwd: Path | None = None) -> Path | None:
    """The folder the embedded database belongs to: the one holding the tasks directory; else
    the nearest one above that holds a `.reconciler/`; else the git top level; else None."""
    here = (cwd or Path.cwd()).resolve()
    given = here / tasks_dir
    if given.is_dir():
        return given.resolve().parent
    for folder in _upwards(here):
        if (folder / HOME_NAME).is_dir():
            return folder
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(top.stdout.strip()) if top.returncode == 0 and top.stdout.strip() else None


def home_for(tasks_dir: str) -> Path:
    """`<project root>/.reconciler`; outside any project an error rather than a stray database."""
    root = project_root(tasks_dir)
    if root is None:
        raise UserError(
            f"no tasks directory {tasks_dir!r} here or above, and no git repository: run the command in your "
            "project, pass --tasks-dir, or name a database with --dsn or RECONCILER_DSN"
        )
    return root / HOME_NAME
