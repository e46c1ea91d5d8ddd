"""The command line's options as frozen dataclasses: where the argparse Namespace stops.

Each command turns its Namespace into the option groups it needs once, at its top
(`FilesOptions.of(args)`, `engine_config(args, …)`); every function below the command takes those
typed values, never the Namespace. Only the standard library and light modules are imported here:
`validate` and `next` read their options through this module too, and start without psycopg.
"""

from __future__ import annotations

import os
from argparse import Namespace
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciler.files.locations import DIRECTORY_OPTIONS, TASKS_KIND, Directories, beside, dest
from reconciler.spec.values import parse_instant as parse_instant

if TYPE_CHECKING:
    from reconciler.engine.config import EngineConfig


@dataclass(frozen=True)
class FilesOptions:
    """The declared files a command reads (a directory per kind) and the source they belong to."""

    dirs: Directories
    source: str = "default"

    @property
    def tasks_dir(self) -> str:
        return self.dirs.tasks_dir

    @classmethod
    def of(cls, args: Namespace) -> FilesOptions:
        paths = {kind: getattr(args, dest(option)) for kind, _, option in DIRECTORY_OPTIONS}
        return cls(Directories(paths, frozenset(args.required_dirs)), args.source)

    @classmethod
    def beside(cls, tasks_dir: str, source: str = "default") -> FilesOptions:
        """Every other kind's directory where the command line puts it by default: beside `tasks_dir`."""
        paths = {kind: beside(tasks_dir, name) for kind, name, _ in DIRECTORY_OPTIONS}
        paths[TASKS_KIND] = tasks_dir
        return cls(Directories(paths), source)


@dataclass(frozen=True)
class DatabaseOptions:
    """The database a command opens: --dsn (else the environment), else the project's embedded one."""

    dsn: str | None
    tasks_dir: str  # the embedded database lives in the project of the tasks directory

    @classmethod
    def of(cls, args: Namespace) -> DatabaseOptions:
        return cls(args.dsn, args.tasks_dir)


@dataclass(frozen=True)
class OutputOptions:
    """How a command prints its result: --format, and --no-color for text on a terminal."""

    format: str = "text"
    no_color: bool = False

    @classmethod
    def of(cls, args: Namespace) -> OutputOptions:
        return cls(args.format, args.no_color)


@dataclass(frozen=True)
class VerdictOptions:
    """The flags that decide whether an apply goes ahead: `plan` takes the same ones, for the same verdict."""

    prune: bool = True
    allow_empty: bool = False
    max_deletes: int | None = None  # None: the default share of the source's tasks
    allow_older: bool = False
    allow_dirty: bool = False  # apply a working tree with uncommitted changes on CI

    @classmethod
    def of(cls, args: Namespace) -> VerdictOptions:
        return cls(not args.no_prune, args.allow_empty, args.max_deletes, args.allow_older, args.allow_dirty)


@dataclass(frozen=True)
class WatchOptions:
    """`watch` and `up`: the files they apply on every change, and how."""

    files: FilesOptions
    prune: bool = True
    debounce_ms: int = 300
    actor: str | None = None  # --actor, for the audit rows of its applies

    @classmethod
    def of(cls, args: Namespace) -> WatchOptions:
        return cls(FilesOptions.of(args), not args.no_prune, args.debounce_ms, args.actor)


def engine_config(args: Namespace, sources: tuple[str, ...]) -> EngineConfig:
    """The engine's options of `engine` and `up`, which claim `sources` (empty: every source)."""
    # Imported here: the engine is heavy, and only the two commands that run one call this.
    from reconciler.engine.config import EngineConfig
    from reconciler.engine.loop import default_engine_id
    from reconciler.spec.environment import globs

    return EngineConfig(
        sources=sources,
        engine_id=args.engine_id or default_engine_id(),
        batch=args.batch,
        concurrency=args.concurrency,
        max_sleep=args.max_sleep,
        drain_seconds=args.drain_seconds,
        keep_runs_days=args.keep_runs_days or None,  # 0: keep every run
        lease_margin=args.lease_margin,
        max_clock_offset=args.max_clock_offset,
        listen_dsn=args.listen_dsn or os.environ.get("RECONCILER_LISTEN_DSN") or None,
        allow_env=globs(args.allow_env),
    )
