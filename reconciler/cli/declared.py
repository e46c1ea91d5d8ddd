"""The declared files as the commands read them: every kind's directory loaded (files/declared.py), every error
reported on stderr, one line each."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.cli.console import err
from reconciler.cli.options import FilesOptions
from reconciler.errors import UserError

if TYPE_CHECKING:
    from reconciler.files.declared import Declared
    from reconciler.files.tasks import LoadResult


def load_or_report(files: FilesOptions, tasks: LoadResult | None = None) -> Declared | None:
    """Every kind's directory of `files` loaded; `tasks` when the tasks directory was read already (its files
    unchanged since applied standing on their rows: checked by the plan, on the rows' specs). Print every error and
    return None if there is any."""
    from reconciler.files.declared import load_declared

    declared = load_declared(files.dirs, tasks)
    for error in declared.errors:
        err(str(error))
    if declared.errors:
        err(f"{len(declared.errors)} error(s) in {declared.read(files.tasks_dir)}; nothing was changed")
        return None
    return declared


def need_tasks_dir(files: FilesOptions) -> None:
    """watch and up watch the directory: it must be there before they start."""
    if not Path(files.tasks_dir).is_dir():
        raise UserError(
            f"--tasks-dir {files.tasks_dir}: directory not found here or in the folders above; "
            "create it or pass --tasks-dir"
        )
