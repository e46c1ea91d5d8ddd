"""Command line: argparse only, no logic. `main(argv) -> int`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from reconciler import __version__, render
from reconciler.clock import utcnow
from reconciler.errors import UserError
from reconciler.loader import LoadResult, load_dir
from reconciler.triggers import upcoming

EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2

Handler = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, Handler] = {}


def command(name: str) -> Callable[[Handler], Handler]:
    def register(func: Handler) -> Handler:
        COMMANDS[name] = func
        return func

    return register


def err(line: str) -> None:
    """One readable line on stderr."""
    print(line, file=sys.stderr)


def parse_instant(text: str, option: str) -> datetime:
    """An ISO date-time; without an offset it is UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"{option}: {text!r} is not an ISO date-time; write e.g. 2026-12-03T00:00:00Z") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def load_or_report(args: argparse.Namespace) -> LoadResult | None:
    """Load tasks.d; print every error and return None if there is any."""
    result = load_dir(Path(args.tasks_dir), args.tasks_dir)
    for error in result.errors:
        err(str(error))
    if result.errors:
        err(f"{len(result.errors)} error(s) in {args.tasks_dir}; nothing was changed")
        return None
    return result


@command("validate")
def cmd_validate(args: argparse.Namespace) -> int:
    result = load_or_report(args)
    if result is None:
        return EXIT_ERROR
    print(f"{len(result.tasks)} task file(s) in {args.tasks_dir} are valid")
    return EXIT_OK


@command("next")
def cmd_next(args: argparse.Namespace) -> int:
    result = load_or_report(args)
    if result is None:
        return EXIT_ERROR
    by_id = {task.id: task for task in result.tasks}
    unknown = [i for i in args.ids if i not in by_id]
    if unknown:
        raise UserError(f"unknown task id(s): {', '.join(unknown)}; see `reconciler validate` for the ids")
    after = parse_instant(args.after, "--after") if args.after else utcnow()
    chosen = [by_id[i] for i in args.ids] if args.ids else result.tasks
    rows = [(task, upcoming(task.schedule, after, args.count)) for task in chosen]
    print(render.next_json(rows) if args.format == "json" else render.next_text(rows))
    return EXIT_OK


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--tasks-dir", default=default("tasks.d"), help="task files directory (default tasks.d)")
    parser.add_argument(
        "--dsn", default=default(None), help="PostgreSQL DSN (else RECONCILER_DSN, DATABASE_URL, embedded)"
    )
    parser.add_argument("--source", default=default("default"), help="ownership label of this repo's tasks")
    parser.add_argument("--log-format", choices=["text", "json"], default=default("text"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reconciler", description="GitOps scheduler of HTTP calls on PostgreSQL")
    parser.add_argument("--version", action="version", version=f"reconciler {__version__}")
    _global_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        child = sub.add_parser(name, help=help_text)
        _global_options(child, suppress=True)
        return child

    add("validate", "parse and check every task file (no database)")
    nxt = add("next", "next fire times per task (no database)")
    nxt.add_argument("ids", nargs="*", metavar="ID")
    nxt.add_argument("--count", type=int, default=5)
    nxt.add_argument("--after", help="ISO date-time to count from (default now; no offset = UTC)")
    nxt.add_argument("--format", choices=["text", "json"], default="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UserError as exc:
        err(f"error: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
