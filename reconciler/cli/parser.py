"""The command line: its grammar (argparse), each command's typed function and options, and `main(argv) -> int`.

Every command is a `Command`: a typed function of cli/ and the options value it takes (cli/options.py), built
from the parsed line. The command modules are light to import (what they use is imported inside them), so the
parser binds the functions themselves: editors and tools follow every command to its code.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

from reconciler import __version__
from reconciler.cli import backfill as cli_backfill
from reconciler.cli import commands as cli_commands
from reconciler.cli import completion as cli_completion
from reconciler.cli import dashboard as cli_dashboard
from reconciler.cli import db as cli_db
from reconciler.cli import engine as cli_engine
from reconciler.cli import export as cli_export
from reconciler.cli import operator as cli_operator
from reconciler.cli import schema as cli_schema
from reconciler.cli import watch as cli_watch
from reconciler.cli.argtypes import (
    COUNT,
    DEBOUNCE_MS,
    KEEP_DAYS,
    KEEP_DAYS_DEFAULT,
    LIMIT,
    MAX_DELETES,
    MAX_SLEEP,
    SECONDS,
    bounded,
    host_port,
    public_url,
    revision_name,
    traceparent,
)
from reconciler.cli.options import (
    ApplyCommandOptions,
    BackfillOptions,
    CancelOptions,
    CompletionOptions,
    DashboardOptions,
    DatabaseOptions,
    DbOptions,
    EngineOptions,
    ExplainOptions,
    ExportOptions,
    NextOptions,
    PlanOptions,
    ReadOptions,
    SchemaOptions,
    SelectionOptions,
    TriggerOptions,
    UpOptions,
    ValidateOptions,
    WatchCommandOptions,
)
from reconciler.errors import EXIT_ERROR, EXIT_OK, UserError, as_bytes, is_utf8
from reconciler.files.locations import DIRECTORY_OPTIONS, TASKS_KIND, beside, dest
from reconciler.files.project import find_tasks_dir
from reconciler.logs import error_line, flush_logs
from reconciler.runs import STATUSES

OptionsT = TypeVar("OptionsT")


@dataclass(frozen=True)
class Command(Generic[OptionsT]):
    """A command: its typed function, and how its options value is built from the parsed command line."""

    run: Callable[[OptionsT], int]
    options: Callable[[argparse.Namespace], OptionsT]

    def __call__(self, args: argparse.Namespace) -> int:
        return self.run(self.options(args))


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 1: 2 means "changes present" under --detailed-exitcode."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--max-del` is a typo, not --max-deletes
        super().__init__(**kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """Global options, accepted before or after the command name."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    for kind, directory, option in DIRECTORY_OPTIONS:
        where = "" if kind == TASKS_KIND else " beside the tasks directory"
        given = directory if kind == TASKS_KIND else None  # the others: beside --tasks-dir (see parse)
        parser.add_argument(option, default=default(given), help=f"{kind} files directory (default {directory}{where})")
    parser.add_argument(
        "--dsn", default=default(None), help="PostgreSQL DSN (else RECONCILER_DSN, DATABASE_URL, embedded)"
    )
    parser.add_argument(
        "--source",
        action="append",
        default=default(None),
        help="ownership label of this repo's tasks (default `default`); `engine` takes it repeatedly: "
        "claim only those sources' tasks (default: every source)",
    )
    parser.add_argument(
        "--actor",
        default=default(None),
        help="who takes an operator action, for the audit log (default: GITHUB_ACTOR, else user@host)",
    )
    parser.add_argument("--log-format", choices=["text", "json"], default=default("text"))
    parser.add_argument(
        "--no-color", action="store_true", default=default(False), help="no ANSI colours (as does a non-empty NO_COLOR)"
    )


def _token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dashboard-token-env",
        metavar="NAME",
        help="require `Authorization: Bearer <token>` on the dashboard, the token read from this environment variable",
    )


def _engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--concurrency", type=COUNT, default=100, help="requests in flight in this process")
    parser.add_argument(
        "--metrics-addr", type=host_port, help="HOST:PORT for /metrics, /healthz, /readyz and the dashboard"
    )
    parser.add_argument(
        "--no-dashboard", action="store_true", help="serve /metrics and the probes without the dashboard"
    )
    _token_option(parser)
    parser.add_argument("--engine-id", help="name in scheduler.engines and run rows (default: POD_NAME, else HOST-PID)")
    parser.add_argument("--batch", type=COUNT, default=100, help="due tasks claimed per transaction")
    parser.add_argument("--max-sleep", type=MAX_SLEEP, default=30.0, help="longest sleep between claims (s)")
    parser.add_argument("--drain-seconds", type=SECONDS, default=30.0, help="wait for in-flight runs on SIGTERM")
    parser.add_argument(
        "--keep-runs-days",
        type=KEEP_DAYS,
        default=KEEP_DAYS_DEFAULT,
        help="drop whole days of run history older than this many days (default 30; 0 keeps every run)",
    )
    parser.add_argument(
        "--lease-margin", type=SECONDS, default=30.0, help="seconds a run's lease outlives its timeouts (default 30)"
    )
    parser.add_argument(
        "--listen-dsn",
        metavar="DSN",
        help="a direct (or session-mode) connection for LISTEN when the engine's DSN is a pooler in transaction "
        "mode (default RECONCILER_LISTEN_DSN, else the engine's DSN)",
    )
    parser.add_argument(
        "--public-url",
        type=public_url,
        metavar="URL",
        help="the address targets reach the engines' --metrics-addr at: the base of a job's callback URL "
        '(completion = "callback"; default RECONCILER_PUBLIC_URL)',
    )
    parser.add_argument(
        "--max-clock-offset",
        type=SECONDS,
        default=5.0,
        help="warn when this machine's clock is further than this off the database's (s, default 5)",
    )
    _allow_env(
        parser,
        "environment variables tasks may read (glob, repeatable; default: all but RECONCILER_*, DATABASE_URL, PG*)",
    )


def _verdict_options(parser: argparse.ArgumentParser) -> None:
    """The options that decide whether an apply goes ahead: `plan` takes the same ones, for the same verdict."""
    parser.add_argument("--no-prune", action="store_true", help="keep tasks that are missing from the files")
    parser.add_argument("--allow-empty", action="store_true", help="allow deleting every task of this source")
    parser.add_argument(
        "--max-deletes", type=MAX_DELETES, help="refuse to delete more (default 25%% of this source's tasks)"
    )
    parser.add_argument(
        "--allow-older", action="store_true", help="allow applying a checkout that is behind the live revision"
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="on CI (CI or GITHUB_ACTIONS set), apply declared files with uncommitted changes (recorded <sha>-dirty)",
    )


def _reason(parser: argparse.ArgumentParser, help_text: str = "why, for the audit log (`reconciler audit`)") -> None:
    parser.add_argument("--reason", help=help_text)


def _allow_env(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--allow-env", action="append", default=[], metavar="PATTERN", help=help_text)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="reconciler", description="GitOps scheduler of HTTP calls on PostgreSQL")
    parser.add_argument("--version", action="version", version=f"reconciler {__version__}")
    _global_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, command: Command[Any], help_text: str) -> argparse.ArgumentParser:
        """A command of the line: its `command` runs with the options the line gives."""
        child = sub.add_parser(name, help=help_text, allow_abbrev=False)
        _global_options(child, suppress=True)
        child.set_defaults(run=command)
        return child

    def fmt(child: argparse.ArgumentParser, *choices: str) -> None:
        child.add_argument("--format", choices=["text", *choices], default="text")

    validate = add(
        "validate", Command(cli_commands.validate, ValidateOptions.of), "parse and check every task file (no database)"
    )
    validate.add_argument(
        "--env-policy", action="store_true", help="also check that every { env = NAME } is one engines let tasks read"
    )
    _allow_env(validate, "with --env-policy: the engines' --allow-env globs (default: all but the engines' own)")
    validate.add_argument(
        "--check-env", action="store_true", help="also report every { env = NAME } not set in this environment"
    )
    nxt = add("next", Command(cli_commands.next_fire_times, NextOptions.of), "next fire times per task (no database)")
    nxt.add_argument("ids", nargs="*", metavar="ID")
    nxt.add_argument("--count", type=COUNT, default=5)
    nxt.add_argument("--after", help="ISO date-time to count from (default now; no offset = UTC)")
    fmt(nxt, "json")

    plan = add(
        "plan",
        Command(cli_commands.plan, PlanOptions.of),
        "diff the task files against the database, with apply's verdict (read-only)",
    )
    fmt(plan, "json", "markdown")
    plan.add_argument("--detailed-exitcode", action="store_true", help="exit 2 when there are changes")
    plan.add_argument("--out", help="save the plan (json) for `apply PLANFILE`")
    _verdict_options(plan)

    apply = add("apply", Command(cli_commands.apply, ApplyCommandOptions.of), "apply the diff in one transaction")
    apply.add_argument("planfile", nargs="?", metavar="PLANFILE")
    _verdict_options(apply)
    apply.add_argument(
        "--revision",
        type=revision_name,
        help="the revision applied (default: git HEAD of --tasks-dir, else CI variables)",
    )
    _reason(apply)

    watch = add("watch", Command(cli_watch.watch, WatchCommandOptions.of), "apply whenever the task files change")
    watch.add_argument("--no-prune", action="store_true")
    watch.add_argument("--debounce-ms", type=DEBOUNCE_MS, default=300)

    status = add(
        "status", Command(cli_db.status, ReadOptions.of), "tasks, next runs, last run status, drift, live engines"
    )
    fmt(status, "json")

    history = add("history", Command(cli_db.history, ReadOptions.of), "applies, newest first: revision, author, counts")
    history.add_argument("id", nargs="?", metavar="ID", help="only the applies that changed this task")
    history.add_argument("--limit", type=LIMIT, default=20)
    fmt(history, "json")

    export = add(
        "export",
        Command(cli_export.export, ExportOptions.of),
        "write the database's tasks, notifiers, calendars and limits as new files (never over existing ones); "
        "--source: that source's only",
    )
    export.add_argument(
        "--out-dir",
        help="tasks directory to write (default exported.d); each other kind goes to its directory beside it",
    )
    export.add_argument("--force", action="store_true", help="overwrite files that already exist in --out-dir")

    _engine_options(
        add("engine", Command(cli_engine.engine, EngineOptions.of), "claim and fire due tasks until SIGTERM")
    )
    up = add(
        "up", Command(cli_engine.up, UpOptions.of), "local one-process mode: embedded database, apply, watch and engine"
    )
    _engine_options(up)
    up.add_argument("--no-prune", action="store_true", help="keep tasks that are missing from the files")
    up.add_argument("--debounce-ms", type=DEBOUNCE_MS, default=300)

    runs = add("runs", Command(cli_db.runs, ReadOptions.of), "run history")
    runs.add_argument("id", nargs="?", metavar="ID")
    runs.add_argument("--limit", type=LIMIT, default=50)
    runs.add_argument("--status", choices=STATUSES)
    runs.add_argument(
        "-v", "--verbose", action="store_true", help="also the engine, the times and the stored response excerpt"
    )
    fmt(runs, "json")

    notifications = add(
        "notifications",
        Command(cli_db.notifications, ReadOptions.of),
        "notifications, newest first: task, event, notifier, delivery state",
    )
    notifications.add_argument("--status", choices=["pending", "delivered", "failed"])
    notifications.add_argument("--task", metavar="ID", help="only this task's notifications")
    notifications.add_argument("--limit", type=LIMIT, default=50)
    fmt(notifications, "json")

    trigger = add(
        "trigger", Command(cli_db.trigger, TriggerOptions.of), "queue one manual run now (schedule untouched)"
    )
    trigger.add_argument("id", metavar="ID")
    trigger.add_argument(
        "--wait", action="store_true", help="follow the run: print its result, exit 0 if it succeeded, 1 if not"
    )
    trigger.add_argument(
        "--traceparent",
        type=traceparent,
        metavar="TRACEPARENT",
        help="a W3C traceparent (00-<trace id>-<span id>-<flags>): the run joins that trace (default: a new one)",
    )
    _reason(trigger)
    cancel = add("cancel", Command(cli_db.cancel, CancelOptions.of), "cancel a manual run that is still queued")
    cancel.add_argument("run_id", type=bounded(int, 1, 2**63 - 1), metavar="RUN_ID")
    _reason(cancel)
    backfill = add(
        "backfill",
        Command(cli_backfill.backfill, BackfillOptions.of),
        "re-run a past range of a task's occurrences [from, to) exactly; --list, --cancel N",
    )
    backfill.add_argument("id", nargs="?", metavar="ID", help="the task (with --list: only its backfills)")
    backfill.add_argument(
        "--from", dest="start", metavar="T", help="ISO date or date-time, included (no offset: the task's zone)"
    )
    backfill.add_argument("--to", dest="end", metavar="T", help="ISO date or date-time, excluded, at most now")
    backfill.add_argument("--dry-run", action="store_true", help="print the occurrences; write nothing")
    backfill.add_argument(
        "--reprocess",
        choices=["none", "failed", "all"],
        default="none",
        help="none: leave out occurrences with a run (default); failed: re-run those whose last run failed, was "
        "missed, skipped or lost; all: every one",
    )
    backfill.add_argument(
        "--wait", action="store_true", help="follow the runs; exit 0 if every one succeeded, 1 otherwise"
    )
    backfill.add_argument("--list", action="store_true", help="list backfills, newest first, with state and counts")
    backfill.add_argument("--limit", type=LIMIT, default=50, help="with --list: at most this many")
    backfill.add_argument(
        "--cancel", type=bounded(int, 1, 2**63 - 1), metavar="N", help="drop what backfill N still has queued"
    )
    fmt(backfill, "json")
    _reason(backfill)
    pause = add(
        "pause",
        Command(cli_operator.pause, SelectionOptions.of),
        "pause tasks at runtime: their occurrences are skipped (not in git)",
    )
    pause.add_argument("ids", nargs="*", metavar="ID", help="the tasks (or --source S: every task of that source)")
    _reason(pause, "why (required): shown in runs, status, explain, plan and the audit log")
    pause.add_argument("--until", metavar="T", help="ISO date-time at which the pause ends by itself (no offset = UTC)")
    resume = add(
        "resume",
        Command(cli_operator.resume, SelectionOptions.of),
        "end a pause: the tasks fire again from now (no catch-up)",
    )
    resume.add_argument("ids", nargs="*", metavar="ID", help="the tasks (or --source S: its paused tasks)")
    _reason(resume)
    audit = add(
        "audit", Command(cli_operator.audit, ReadOptions.of), "operator actions, newest first: who, what, when and why"
    )
    audit.add_argument("id", nargs="?", metavar="ID", help="only the actions on this task")
    audit.add_argument("--limit", type=LIMIT, default=50)
    fmt(audit, "json")
    add(
        "down",
        Command(cli_db.down, DatabaseOptions.of),
        "stop this project's embedded PostgreSQL (started by any command without --dsn)",
    )

    dashboard = add(
        "dashboard",
        Command(cli_dashboard.dashboard, DashboardOptions.of),
        "the read-only web UI (default 127.0.0.1:9464)",
    )
    dashboard.add_argument("--addr", type=host_port, help="HOST:PORT to listen on (default 127.0.0.1:9464)")
    dashboard.add_argument("--with-parent", action="store_true", help=argparse.SUPPRESS)  # an engine's child
    _token_option(dashboard)

    explain = add("explain", Command(cli_db.explain, ExplainOptions.of), "why a task did or did not fire around a time")
    explain.add_argument("id", metavar="ID")
    explain.add_argument("--at", help="ISO date-time to explain (default now; no offset = UTC)")

    db = add("db", Command(cli_db.db, DbOptions.of), "database maintenance")
    db.add_argument(
        "action",
        choices=["init", "maintain", "grants"],
        help="init: create or upgrade the schema (and convert runs to partitions); maintain: make partitions ahead "
        "and drop those older than --keep-runs-days (as the owner, when engines may not); grants: print GRANTs",
    )
    db.add_argument("--keep-runs-days", type=KEEP_DAYS, default=0, help="maintain: drop older days (default 0: none)")
    for role in ("planner", "applier", "engine", "dashboard"):
        db.add_argument(f"--role-{role}", metavar="ROLE", help=f"grants: the {role}'s role")

    schema = add(
        "schema",
        Command(cli_schema.schema, SchemaOptions.of),
        "print the JSON Schema of task files (for editors and CI)",
    )
    schema.add_argument(
        "--kind",
        choices=[kind for kind, _, _ in DIRECTORY_OPTIONS],
        default=TASKS_KIND,
        help="the kind of file (default task)",
    )
    completion = add(
        "completion", Command(cli_completion.completion, CompletionOptions.of), "print a shell completion script"
    )
    completion.add_argument("shell", metavar="SHELL", help="bash, zsh or fish")
    return parser


def tune_gc() -> None:
    """Collect the young generation less often, as mypy does: loading 10,000 task files makes
    ~350,000 long-lived objects, and default thresholds spend ~30 % of a plan in the collector."""
    gc.set_threshold(100_000, 20, 20)


def scope_sources(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`--source` as each command takes it: `engine` a set of sources to claim (`args.sources`,
    empty for every source); the others one ownership label (`args.source`)."""
    given: list[str] = args.source or []
    if args.command == "engine":  # `--source a,b` as `--source a --source b`, like --allow-env
        given = [part.strip() for value in given for part in value.split(",")]
    for name in given:
        if not name or not name.isprintable() or len(name) > 200:
            parser.error(f"--source {name!r}: a source is 1 to 200 printable characters")
    args.sources = tuple(dict.fromkeys(given))
    if args.command != "engine" and len(args.sources) > 1:
        parser.error(f"{args.command} takes one --source (only `engine` claims several)")
    args.source = given[-1] if given else "default"


# The options that name a path: {as shown: attribute}.
PATH_OPTIONS = {
    **{option: dest(option) for _, _, option in DIRECTORY_OPTIONS},
    "--out": "out",
    "--out-dir": "out_dir",
    "PLANFILE": "planfile",
}


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with the defaults that depend on other options filled in."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.parser = parser  # `completion` completes this very command line
    scope_sources(parser, args)
    for option, name in PATH_OPTIONS.items():
        path = getattr(args, name, None)
        if path is not None and not is_utf8(path):  # every path shown, compared and stored below it is text
            parser.error(f"{option} {as_bytes(path)}: the path is not UTF-8 text; rename it")
    args.tasks_dir = find_tasks_dir(args.tasks_dir)  # from inside tasks.d/billing/ too
    args.required_dirs = []  # the kinds whose directory was named: it must be there; a default one is optional
    for kind, directory, option in DIRECTORY_OPTIONS:
        if kind != TASKS_KIND:
            args.required_dirs += [kind] if getattr(args, dest(option)) else []
            setattr(args, dest(option), getattr(args, dest(option)) or beside(args.tasks_dir, directory))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code."""
    tune_gc()
    args = parse(argv)
    try:
        code: int = args.run(args)  # in the try: a Ctrl-C during a late import exits 130 too
        return code
    except UserError as exc:
        flush_logs()  # the lines logged before it come first
        print(error_line(str(exc), args.log_format), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `reconciler plan | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return EXIT_OK
    finally:
        flush_logs()
