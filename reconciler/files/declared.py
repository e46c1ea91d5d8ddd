"""Every declared directory a command reads, as one immutable value: each kind's directory loaded, the tasks bound
to the calendars they name, and every error of every file (and of every task naming what its directory lacks).

`Directories` (files/locations.py) says where each kind's files are (`--tasks-dir`, `--limits-dir`, …, one per kind
of the registry); `load_declared` reads them all, each kind the way its `Kind` says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.files.directory import load_named
from reconciler.files.kinds import DeclaredItem, Named, NamedKind
from reconciler.files.locations import Directories
from reconciler.files.problems import FileError, FileWarning
from reconciler.files.project import shown_path
from reconciler.files.registry import named_kinds
from reconciler.files.tasks import LoadResult, Task, read_files


@dataclass(frozen=True)
class Declared:
    """The declared files a command read: the tasks, each named kind's directory loaded (by kind name, in the
    registry's order), and every error."""

    tasks: list[Task]
    named: Mapping[str, Named[Any]] = field(default_factory=dict)
    errors: list[FileError] = field(default_factory=list)
    warnings: list[FileWarning] = field(default_factory=list)  # valid files that do nothing: no task names them

    @property
    def ok(self) -> bool:
        return not self.errors

    def of(self, kind: NamedKind[Any]) -> Named[Any]:
        """The loaded directory of `kind`; a KeyError when the command did not read it."""
        return self.named[kind.name]

    def items(self) -> list[DeclaredItem]:
        """Every valid file of every kind: the named kinds' in the registry's order, then the tasks."""
        return [item for named in self.named.values() for item in named.by_name.values()] + list(self.tasks)

    def read(self, tasks_dir: str) -> str:
        """`tasks.d`, and each named kind's directory that is there: what the command read, for its messages."""
        dirs = [shown_path(tasks_dir), *(shown_path(named.root) for named in self.named.values() if named.present)]
        return " and ".join(dirs) if len(dirs) < 3 else f"{', '.join(dirs[:-1])} and {dirs[-1]}"


def load_declared(dirs: Directories, tasks: LoadResult | None = None) -> Declared:
    """Every kind's directory of `dirs` loaded and checked; `tasks` when the tasks directory was read already (its
    files unchanged since applied standing on their rows: see reconcile.apply.load_files), else read here. Each
    named kind adds the errors of its files and of the tasks naming what it lacks (a task standing on its row is
    checked by the plan, on the row's spec), and those of the task files with errors, as far as their names parsed
    (every error in one run); when there are none, the tasks are bound to what they name."""
    found = tasks if tasks is not None else read_files(Path(dirs.tasks_dir), dirs.tasks_dir).load()
    errors = list(found.errors)
    named: dict[str, Named[Any]] = {}
    kinds = named_kinds()
    for kind in kinds:
        path = dirs.path(kind.name)
        loaded = load_named(kind.current(), Path(path), path, kind.name in dirs.required)
        named[kind.name] = loaded
        errors += [*loaded.errors, *kind.references([*found.tasks, *found.unparsed], loaded, None)]
    bound = found.tasks
    warnings: list[FileWarning] = []
    if not errors:
        for kind in kinds:
            bound = kind.bind(bound, named[kind.name])
            warnings += kind.unused(bound, named[kind.name], None)
    return Declared(bound, named, in_file_order(errors), warnings)


def in_file_order(errors: list[FileError]) -> list[FileError]:
    """Errors file by file (as paths sort: a folder's files together), each file's in line order; the errors of
    one line keep the order they were found in."""
    return sorted(errors, key=lambda error: (error.path.split("/"), error.line))
