"""How a command runs against the database: the store opened for its work, the declared files read beside
it, and the signals that end a long-running command.

The store's module (and psycopg with it) is imported only when a command opens one: `validate` and `next`
import this module's neighbours without it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from reconciler import tracing
from reconciler.cli.console import log
from reconciler.cli.declared import load_or_report
from reconciler.cli.options import DatabaseOptions, FilesOptions
from reconciler.errors import DatabaseUnavailable

if TYPE_CHECKING:
    from reconciler.db.store import Store
    from reconciler.engine.loop import Engine
    from reconciler.files.declared import Declared

T = TypeVar("T")


def store_for(database: DatabaseOptions, pool_size: int = 4) -> Store:
    """The store (not opened yet) of --dsn, else RECONCILER_DSN, else DATABASE_URL, else the project's
    embedded server (started if need be); its errors name which one it was."""
    from reconciler.db.embedded import resolve_dsn
    from reconciler.db.store import Store

    dsn, origin = resolve_dsn(database.dsn, database.home)
    return Store(dsn, origin=origin, max_size=pool_size)


def with_store(
    database: DatabaseOptions, work: Callable[[Store], Awaitable[T]], pool_size: int = 4, init: bool = True
) -> T:
    """Open the store named by --dsn / env / embedded, initialize the schema (unless `init` is
    False: `plan` never writes), run `work`."""

    async def run() -> T:
        async with store_for(database, pool_size) as store:
            if init:
                await store.init_schema()
            return await work(store)

    return asyncio.run(run())


def with_files(
    files: FilesOptions, database: DatabaseOptions, work: Callable[[Store, Declared], Awaitable[T]]
) -> T | None:
    """`work` on the store and the task files, for plan and apply. The database is read first: the
    files unchanged since they were applied are not parsed again. Errors in the files are reported
    and give None, before an unreachable database too (every file is parsed then)."""
    from reconciler.reconcile.apply import load_files

    async def run(store: Store) -> T | None:
        loaded = load_or_report(files, await load_files(store, Path(files.tasks_dir), files.tasks_dir))
        return None if loaded is None else await work(store, loaded)

    try:
        return with_store(database, run, init=False)
    except DatabaseUnavailable:
        if load_or_report(files) is None:
            return None
        raise


def stop_on_signals(engine: Engine | None = None, say: Callable[[str], None] | None = None) -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (Ctrl-C): the engine drains, a watch ends; both exit 0.

    With an engine, the first signal says (through `say`, default an INFO log: a normal stop
    must not page anyone) what the drain waits for, and a second one stops at once: runs still
    in flight are recorded `lost` when their leases expire (docs/engine.md, "Stopping").
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    tell = say or log.info

    def signalled(again: str) -> None:
        if engine is None:
            stop.set()
        elif not stop.is_set():
            stop.set()
            if not engine.in_flight:
                tell("stopping: no run in flight")
                return
            tell(
                f"draining {engine.in_flight} run(s) (up to {engine.config.drain_seconds:g} s); "
                f"{again} again to stop now"
            )
        elif not engine.hurry.is_set():
            engine.hurry.set()
            tell(f"stopping now, {engine.in_flight} run(s) in flight")

    loop.add_signal_handler(signal.SIGTERM, signalled, "SIGTERM")
    loop.add_signal_handler(signal.SIGINT, signalled, "Ctrl-C")
    return stop


def tracer(env: Mapping[str, str] | None = None) -> tracing.Tracer:
    """The engine's tracer: OpenTelemetry's when OTEL_* variables ask for traces and the extra is installed (else a
    warning, and no spans), else the one that records none and imports nothing."""
    env = os.environ if env is None else env
    if not tracing.wanted(env):
        return tracing.Tracer()
    try:
        from reconciler import otel
    except ImportError as exc:
        log.warning(
            "OTEL_* variables ask for traces, but the otel extra is not installed (%s): "
            "pip install 'reconciler-scheduler[otel]'; runs are not traced",
            exc.name,
        )
        return tracing.Tracer()
    try:
        return otel.from_environment(env)
    except otel.NotConfigured as exc:
        log.warning("tracing is off: %s", exc)
        return tracing.Tracer()
