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


def _existing_home(start: Path) -> Path | None:
    """The nearest folder from `start` upwards (to its git top level) that holds a `.reconciler/`."""
    return next((folder for folder in _upwards(start) if (folder / HOME_NAME).is_dir()), None)


def _git_top(here: Path) -> Path | None:
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(top.stdout.strip()) if top.returncode == 0 and top.stdout.strip() else None


def project_root(tasks_dir: str, cwd: Path | None = None) -> Path | None:
    """The folder the embedded database belongs to. One that has it already: the nearest holding a `.reconciler/`
    from the tasks directory upwards, else from the current directory upwards (so `plan --tasks-dir
    exported/tasks.d`, or a tasks directory outside any project, reads the project's database, not a new one).
    None has it yet: the folder holding the tasks directory, else the git top level, else None."""
    here = (cwd or Path.cwd()).resolve()
    given = here / tasks_dir
    found = _existing_home(given.resolve()) if given.is_dir() else None
    found = found or _existing_home(here)
    if found is not None:
        return found
    return given.resolve().parent if given.is_dir() else _git_top(here)


def home_for(tasks_dir: str, create: bool = True, cwd: Path | None = None) -> Path:
    """`<project root>/.reconciler`; outside any project an error rather than a stray database. Unless `create`
    (a read-only command: plan, export), only one that exists or that the current directory's project would
    create: never a new empty server for a tasks directory elsewhere."""
    here = (cwd or Path.cwd()).resolve()
    root = project_root(tasks_dir, here)
    if root is None:
        raise UserError(
            f"no tasks directory {tasks_dir!r} here or above, and no git repository: run the command in your "
            "project, pass --tasks-dir, or name a database with --dsn or RECONCILER_DSN"
        )
    home = root / HOME_NAME
    if not create and not home.is_dir() and not here.is_relative_to(root):
        raise UserError(
            f"no embedded PostgreSQL for {shown_path(tasks_dir, here)}: none in {shown_path(str(home), here)} nor in "
            "a project above this folder, and a read-only command starts no new one; run it from the project "
            "whose database you mean, or name one with --dsn or RECONCILER_DSN"
        )
    return home


def shown_path(path: str, cwd: Path | None = None) -> str:
    """A directory as a message names it: relative to the current directory when it lies below it (`tasks.d`,
    `exported/tasks.d`), else resolved (`/home/me/project/tasks.d`): never a bare `..` or `.`. A path given
    absolute stays as given (normalised), as the error lines of its files name it."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    here = (cwd or Path.cwd()).resolve()
    full = (here / path).resolve()
    if full != here and full.is_relative_to(here):
        return str(full.relative_to(here))
    return str(full)
