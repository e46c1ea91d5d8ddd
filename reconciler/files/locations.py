"""Where a command reads each declared kind's files: a directory per kind name, and the kinds whose directory was
named on the command line (it must be there; a default one may be missing, and then that kind has no files).
Light on purpose: the command line builds it before anything heavy is imported."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

TASKS_KIND = "task"


# Each declared kind's directory as the command line names it: (kind, default directory, option), in the order of
# files/registry.py's KINDS. A light copy of what each Kind says (the command line builds its options from it
# without importing the kinds and their models); tests/ecosystem/test_declared_dirs.py keeps the two equal.
class DirectoryOption(NamedTuple):
    """A kind's directory as the command line names it."""

    kind: str  # the kind's name: `limit`
    directory: str  # its default directory: `limits.d`, beside the tasks directory
    option: str  # the option naming another: `--limits-dir`


DIRECTORY_OPTIONS: tuple[DirectoryOption, ...] = (
    DirectoryOption("calendar", "calendars.d", "--calendars-dir"),
    DirectoryOption("limit", "limits.d", "--limits-dir"),
    DirectoryOption("notifier", "notifiers.d", "--notifiers-dir"),
    DirectoryOption(TASKS_KIND, "tasks.d", "--tasks-dir"),
)


def dest(option: str) -> str:
    """The Namespace attribute of an option: `--limits-dir` → limits_dir."""
    return option.removeprefix("--").replace("-", "_")


def beside(folder: str, name: str) -> str:
    """The path of `name` next to `folder` as written (`--tasks-dir .` has `../name` beside it, not `name`)."""
    return os.path.normpath(os.path.join(folder, os.pardir, name))


@dataclass(frozen=True)
class Directories:
    """A path per kind name (in the registry's order), and which of them were named on the command line."""

    paths: Mapping[str, str]
    required: frozenset[str] = frozenset()

    def path(self, name: str) -> str:
        return self.paths[name]

    @property
    def tasks_dir(self) -> str:
        return self.paths[TASKS_KIND]

    def listed(self) -> list[Path]:
        """Every kind's directory, in the registry's order: what `watch` and `up` watch and what `apply` checks for
        uncommitted changes."""
        return [Path(path) for path in self.paths.values()]
