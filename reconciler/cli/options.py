"""The command line's options as frozen dataclasses: where the argparse Namespace stops.

Each command is a typed function that takes one options value (`ValidateOptions`, `PlanOptions`, …), made of
the groups below (`FilesOptions`, `DatabaseOptions`, `OutputOptions`, …) and its own flags; the parser builds it
(`Command` in parser.py: `options.of(args)`), so no command sees the Namespace. Only the standard library and
light modules are imported here: every command's options are built before anything heavy is imported.
"""

from __future__ import annotations

import os
from argparse import ArgumentTypeError, Namespace
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.cli.argtypes import public_url
from reconciler.errors import UserError
from reconciler.files.locations import DIRECTORY_OPTIONS, TASKS_KIND, Directories, beside, dest

if TYPE_CHECKING:
    from argparse import ArgumentParser

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
    create: bool = True  # False: a read-only command (plan, export) never starts a new, empty embedded database

    @classmethod
    def of(cls, args: Namespace, create: bool = True) -> DatabaseOptions:
        return cls(args.dsn, args.tasks_dir, create)

    def home(self) -> Path:
        """The project's `.reconciler` folder, where its embedded database lives (files/project.py)."""
        from reconciler.files.project import home_for

        return home_for(self.tasks_dir, self.create)


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
        public_url=args.public_url or env_public_url(),
    )


def env_public_url() -> str | None:
    """RECONCILER_PUBLIC_URL (the default of --public-url), checked as the option is; None when unset or empty."""
    text = os.environ.get("RECONCILER_PUBLIC_URL")
    if not text:
        return None
    try:
        return public_url(text)
    except ArgumentTypeError as exc:
        raise UserError(f"RECONCILER_PUBLIC_URL: {exc}") from None


@dataclass(frozen=True)
class OperatorOptions:
    """Who takes an operator action and why (--actor, else GITHUB_ACTOR, else user@host; --reason)."""

    actor: str | None = None
    reason: str | None = None

    @classmethod
    def of(cls, args: Namespace) -> OperatorOptions:
        return cls(args.actor, getattr(args, "reason", None))


@dataclass(frozen=True)
class ValidateOptions:
    files: FilesOptions
    env_policy: bool = False  # every { env = NAME } must be one the engines let tasks read (`allow_env`)
    allow_env: tuple[str, ...] = ()
    check_env: bool = False  # every { env = NAME } must be set in this environment

    @classmethod
    def of(cls, args: Namespace) -> ValidateOptions:
        return cls(FilesOptions.of(args), args.env_policy, tuple(args.allow_env), args.check_env)


@dataclass(frozen=True)
class NextOptions:
    files: FilesOptions
    output: OutputOptions
    ids: tuple[str, ...] = ()
    count: int = 5
    after: str | None = None  # ISO date-time (default now; no offset = UTC)

    @classmethod
    def of(cls, args: Namespace) -> NextOptions:
        return cls(FilesOptions.of(args), OutputOptions.of(args), tuple(args.ids), args.count, args.after)


@dataclass(frozen=True)
class PlanOptions:
    files: FilesOptions
    database: DatabaseOptions
    output: OutputOptions
    verdict: VerdictOptions
    detailed_exitcode: bool = False
    out: str | None = None  # save the plan (json) for `apply PLANFILE`

    @classmethod
    def of(cls, args: Namespace) -> PlanOptions:
        database = DatabaseOptions.of(args, create=False)
        groups = FilesOptions.of(args), database, OutputOptions.of(args), VerdictOptions.of(args)
        return cls(*groups, args.detailed_exitcode, args.out)


@dataclass(frozen=True)
class ApplyCommandOptions:
    files: FilesOptions
    database: DatabaseOptions
    verdict: VerdictOptions
    operator: OperatorOptions
    no_color: bool = False
    planfile: str | None = None
    revision: str | None = None  # --revision: the operator's statement of what is applied

    @classmethod
    def of(cls, args: Namespace) -> ApplyCommandOptions:
        groups = FilesOptions.of(args), DatabaseOptions.of(args), VerdictOptions.of(args), OperatorOptions.of(args)
        return cls(*groups, args.no_color, args.planfile, args.revision)


@dataclass(frozen=True)
class WatchCommandOptions:
    watch: WatchOptions
    database: DatabaseOptions

    @classmethod
    def of(cls, args: Namespace) -> WatchCommandOptions:
        return cls(WatchOptions.of(args), DatabaseOptions.of(args))


@dataclass(frozen=True)
class ReadOptions:
    """A command that reads the database and prints what it found: `status`, `history`, `runs`, `audit`, …;
    `id` and `status` filter (None: all), `limit` bounds the listing."""

    database: DatabaseOptions
    output: OutputOptions
    id: str | None = None
    status: str | None = None
    limit: int = 50
    verbose: bool = False

    @classmethod
    def of(cls, args: Namespace) -> ReadOptions:
        found = getattr(args, "id", None) or getattr(args, "task", None)
        return cls(
            DatabaseOptions.of(args),
            OutputOptions.of(args) if hasattr(args, "format") else OutputOptions(no_color=args.no_color),
            found,
            getattr(args, "status", None),
            getattr(args, "limit", 50),
            getattr(args, "verbose", False),
        )


@dataclass(frozen=True)
class TriggerOptions:
    database: DatabaseOptions
    operator: OperatorOptions
    id: str
    wait: bool = False
    traceparent: str | None = None  # the trace the run joins (a W3C traceparent); None: a new trace

    @classmethod
    def of(cls, args: Namespace) -> TriggerOptions:
        return cls(DatabaseOptions.of(args), OperatorOptions.of(args), args.id, args.wait, args.traceparent)


@dataclass(frozen=True)
class CancelOptions:
    database: DatabaseOptions
    operator: OperatorOptions
    run_id: int

    @classmethod
    def of(cls, args: Namespace) -> CancelOptions:
        return cls(DatabaseOptions.of(args), OperatorOptions.of(args), args.run_id)


@dataclass(frozen=True)
class ExplainOptions:
    database: DatabaseOptions
    id: str
    at: str | None = None  # ISO date-time (default now; no offset = UTC)

    @classmethod
    def of(cls, args: Namespace) -> ExplainOptions:
        return cls(DatabaseOptions.of(args), args.id, args.at)


@dataclass(frozen=True)
class DbOptions:
    database: DatabaseOptions
    action: str  # init | maintain | grants
    roles: tuple[str | None, str | None, str | None, str | None] = (None, None, None, None)  # planner … dashboard
    keep_runs_days: float | None = None  # maintain: retire partitions older than this (None: none)

    @classmethod
    def of(cls, args: Namespace) -> DbOptions:
        roles = (args.role_planner, args.role_applier, args.role_engine, args.role_dashboard)
        keep = args.keep_runs_days or None  # 0: keep every run, as the engine's option
        return cls(DatabaseOptions.of(args), args.action, roles, keep)


@dataclass(frozen=True)
class ExportOptions:
    database: DatabaseOptions
    source: str | None = None  # --source given: that source's only
    out_dir: str | None = None
    force: bool = False
    log_format: str = "text"

    @classmethod
    def of(cls, args: Namespace) -> ExportOptions:
        source = args.source if args.sources else None
        return cls(DatabaseOptions.of(args, create=False), source, args.out_dir, args.force, args.log_format)


@dataclass(frozen=True)
class BackfillOptions:
    database: DatabaseOptions
    output: OutputOptions
    operator: OperatorOptions
    id: str | None = None
    start: str | None = None  # --from
    end: str | None = None  # --to
    dry_run: bool = False
    reprocess: str = "none"
    wait: bool = False
    list: bool = False
    limit: int = 50
    cancel: int | None = None

    @classmethod
    def of(cls, args: Namespace) -> BackfillOptions:
        groups = DatabaseOptions.of(args), OutputOptions.of(args), OperatorOptions.of(args)
        flags = (args.id, args.start, args.end, args.dry_run, args.reprocess, args.wait, args.list, args.limit)
        return cls(*groups, *flags, args.cancel)


@dataclass(frozen=True)
class SelectionOptions:
    """`pause` and `resume`: the tasks they act on (ids, or every task of --source), and the operator."""

    database: DatabaseOptions
    operator: OperatorOptions
    ids: tuple[str, ...] = ()
    source: str | None = None
    until: str | None = None  # pause: ISO date-time at which it ends by itself

    @classmethod
    def of(cls, args: Namespace) -> SelectionOptions:
        source = args.sources[0] if args.sources else None
        return cls(
            DatabaseOptions.of(args), OperatorOptions.of(args), tuple(args.ids), source, getattr(args, "until", None)
        )


@dataclass(frozen=True)
class ServeOptions:
    """What a long-running command serves over HTTP: the dashboard (and, for an engine, /metrics and the probes)."""

    addr: str | None = None  # --metrics-addr, or `dashboard --addr`
    no_dashboard: bool = False
    token_env: str | None = None  # --dashboard-token-env: the variable holding the bearer token
    with_parent: bool = False  # `dashboard` as an engine's child (its stdin is the engine's pipe)

    @classmethod
    def of(cls, args: Namespace) -> ServeOptions:
        addr = getattr(args, "metrics_addr", None) or getattr(args, "addr", None)
        return cls(
            addr, getattr(args, "no_dashboard", False), args.dashboard_token_env, getattr(args, "with_parent", False)
        )


@dataclass(frozen=True)
class EngineOptions:
    database: DatabaseOptions
    serve: ServeOptions
    config: EngineConfig
    log_format: str = "text"

    @classmethod
    def of(cls, args: Namespace) -> EngineOptions:
        return cls(DatabaseOptions.of(args), ServeOptions.of(args), engine_config(args, args.sources), args.log_format)


@dataclass(frozen=True)
class UpOptions:
    database: DatabaseOptions
    serve: ServeOptions
    watch: WatchOptions
    config: EngineConfig  # `up` fires its own source's tasks only, even on a shared database
    log_format: str = "text"

    @classmethod
    def of(cls, args: Namespace) -> UpOptions:
        watch = WatchOptions.of(args)
        config = engine_config(args, (watch.files.source,))
        return cls(DatabaseOptions.of(args), ServeOptions.of(args), watch, config, args.log_format)


@dataclass(frozen=True)
class DashboardOptions:
    database: DatabaseOptions
    serve: ServeOptions
    log_format: str = "text"

    @classmethod
    def of(cls, args: Namespace) -> DashboardOptions:
        return cls(DatabaseOptions.of(args), ServeOptions.of(args), args.log_format)


@dataclass(frozen=True)
class SchemaOptions:
    kind: str = "task"

    @classmethod
    def of(cls, args: Namespace) -> SchemaOptions:
        return cls(args.kind)


@dataclass(frozen=True)
class CompletionOptions:
    shell: str
    parser: ArgumentParser  # the command line whose options it completes

    @classmethod
    def of(cls, args: Namespace) -> CompletionOptions:
        return cls(args.shell, args.parser)
