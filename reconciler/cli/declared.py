"""The declared files as the commands read them: tasks.d, notifiers.d, calendars.d and limits.d, loaded, with every
error reported, and the tasks bound to the calendars they name."""

from __future__ import annotations

from pathlib import Path

from reconciler.cli.console import err
from reconciler.cli.options import FilesOptions
from reconciler.errors import UserError
from reconciler.files.calendar_refs import bind_all, calendar_errors
from reconciler.files.calendars import Calendars, load_calendars
from reconciler.files.limit_refs import limit_errors
from reconciler.files.limits import Limits, load_limits
from reconciler.files.notifiers import Notifiers, load_notifiers
from reconciler.files.subscriptions import subscription_errors
from reconciler.files.tasks import LoadResult, load_dir


def load_or_report(files: FilesOptions, loaded: LoadResult | None = None) -> LoadResult | None:
    """Load tasks.d (unless `loaded` is what was) and notifiers.d; print every error and return None
    if there is any. Subscriptions to unknown notifiers are checked here when every task file was
    parsed (`loaded` None), else by the plan (an unchanged file's spec is its row's)."""
    result = loaded if loaded is not None else load_dir(Path(files.tasks_dir), files.tasks_dir)
    result.notifiers = notifiers = notifier_files(files)
    result.errors = [*result.errors, *notifiers.errors]
    if loaded is None:
        result.errors += subscription_errors(result.tasks, {}, notifiers)
    with_calendars(result, files)
    with_limits(result, files)
    for error in result.errors:
        err(str(error))
    if result.errors:
        shown = read_dirs(files, notifiers, result.calendars, result.limits)
        err(f"{len(result.errors)} error(s) in {shown}; nothing was changed")
        return None
    return result


def with_calendars(result: LoadResult, files: FilesOptions) -> None:
    """calendars.d loaded into `result`, with its errors and those of the calendars the tasks name; when there
    are none, the tasks bound to their calendars (their schedules are then the engines')."""
    result.calendars = calendars = calendar_files(files)
    result.errors += [*calendars.errors, *calendar_errors(result.tasks, calendars)]
    if not result.errors:
        result.tasks = bind_all(result.tasks, calendars)


def with_limits(result: LoadResult, files: FilesOptions) -> None:
    """limits.d loaded into `result`, with its errors and those of the limits the tasks name (a task standing on
    its row is checked by the plan, on the row's spec)."""
    result.limits = limits = limit_files(files)
    result.errors += [*limits.errors, *limit_errors(result.tasks, limits)]


def read_dirs(
    files: FilesOptions,
    notifiers: Notifiers | None,
    calendars: Calendars | None = None,
    limits: Limits | None = None,
) -> str:
    """`tasks.d`, and `notifiers.d` / `calendars.d` / `limits.d` when they are there: what a command read."""
    kinds = (notifiers, calendars, limits)
    dirs = [files.tasks_dir, *(kind.root for kind in kinds if kind is not None and kind.present)]
    return " and ".join(dirs) if len(dirs) < 3 else f"{', '.join(dirs[:-1])} and {dirs[-1]}"


def calendar_files(files: FilesOptions) -> Calendars:
    """--calendars-dir (default calendars.d beside --tasks-dir), loaded; none when it does not exist."""
    return load_calendars(Path(files.calendars_dir), files.calendars_dir, files.calendars_required)


def limit_files(files: FilesOptions) -> Limits:
    """--limits-dir (default limits.d beside --tasks-dir), loaded; none when it does not exist."""
    return load_limits(Path(files.limits_dir), files.limits_dir, files.limits_required)


def notifier_files(files: FilesOptions) -> Notifiers:
    """--notifiers-dir (default notifiers.d beside --tasks-dir), loaded; none when it does not exist."""
    return load_notifiers(Path(files.notifiers_dir), files.notifiers_dir, files.notifiers_required)


def declared_dirs(files: FilesOptions) -> list[Path]:
    """The directory of every declared kind (--tasks-dir, --notifiers-dir, …), in the registry's order: what
    `watch` and `up` watch, and what `apply` checks for uncommitted changes."""
    from reconciler.files.registry import KINDS

    return [Path(getattr(files, kind.option.removeprefix("--").replace("-", "_"))) for kind in KINDS]


def need_tasks_dir(files: FilesOptions) -> None:
    """watch and up watch the directory: it must be there before they start."""
    if not Path(files.tasks_dir).is_dir():
        raise UserError(
            f"--tasks-dir {files.tasks_dir}: directory not found here or in the folders above; "
            "create it or pass --tasks-dir"
        )
