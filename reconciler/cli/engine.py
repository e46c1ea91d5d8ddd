"""The long-running commands: `engine` (claim and fire until SIGTERM) and `up` (apply, watch and fire).

Each is a typed function of its options returning an exit code. This module is imported with the parser: the
engine, aiohttp and psycopg are imported inside the functions that run them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from reconciler.cli.console import err, log
from reconciler.cli.dashboard import DEFAULT_ADDR, DashboardProcess, dashboard_token, warn_if_open
from reconciler.cli.declared import need_tasks_dir
from reconciler.cli.options import EngineOptions, ServeOptions, UpOptions
from reconciler.cli.runtime import stop_on_signals, store_for, tracer, with_store
from reconciler.cli.watch import watch_files
from reconciler.clock import utc_text, utcnow
from reconciler.errors import EXIT_OK, DatabaseUnavailable, UserError, one_line
from reconciler.logs import setup_logging

if TYPE_CHECKING:
    from reconciler.db.store import Store
    from reconciler.engine.claim import Claimed, Report
    from reconciler.engine.config import EngineConfig
    from reconciler.engine.loop import Engine
    from reconciler.engine.outage import Outage
    from reconciler.targets.http import Outcome
    from reconciler.web.forward import Forward
    from reconciler.web.metrics import Endpoint


async def open_patiently(store: Store, stop: asyncio.Event, outage: Outage) -> bool:
    """Connect (and create the schema) with back-off until the database answers; False if stopped first.

    An engine started during a database cut-over waits instead of exiting: under Kubernetes
    an exit is a crash loop. /healthz answers 503 meanwhile. `outage` logs the wait once, then
    once a minute, and its end.
    """
    from reconciler.engine.loop import back_off

    backoff = 0.5
    while not stop.is_set():
        try:
            await store.open()
            await store.init_schema()
            outage.answered()
            return True
        except DatabaseUnavailable as exc:
            outage.failed(exc)
        backoff = await back_off(stop, backoff)
    return False


@dataclass(frozen=True)
class WebOptions:
    """What an engine serves over HTTP: /metrics, the probes and the dashboard on `addr`.

    `fallback`: when `addr` is taken, listen on a port the kernel picks (for `up`, whose address is a
    default, not a promise); `say` is told the dashboard's URL once it listens."""

    addr: str
    dashboard: Forward | None = None
    token: str | None = None
    fallback: bool = False
    say: Callable[[str], None] | None = None


async def start_web(web: WebOptions, engine: Engine, store: Store) -> Endpoint:
    from reconciler.web.metrics import serve_metrics

    try:
        served = await serve_metrics(web.addr, engine, store, dashboard=web.dashboard, token=web.token)
    except OSError as exc:
        if not web.fallback:
            raise UserError(
                f"--metrics-addr {web.addr}: cannot listen ({exc.strerror or exc}); pick another port"
            ) from None
        host = web.addr.rpartition(":")[0]
        served = await serve_metrics(f"{host}:0", engine, store, dashboard=web.dashboard, token=web.token)
    warn_if_open(web.addr, web.token)
    if web.say is not None:
        web.say(served.url)
    return served


async def run_engine(store: Store, web: WebOptions | None, stop: asyncio.Event, engine: Engine) -> None:
    """Serve `engine` (and /metrics, the probes and the dashboard on `web.addr`, if any) until `stop` is set;
    waits for the database first."""
    server = await start_web(web, engine, store) if web is not None else None
    if server is not None and web is not None and web.fallback and engine.config.public_url is None:
        # `up` (a local loop): its own address is where local targets report their jobs
        engine.config = replace(engine.config, public_url=server.url)
    sources = list(engine.config.sources)
    fields = {"engine_id": engine.config.engine_id, "concurrency": engine.config.concurrency, "sources": sources}
    scope = f"sources {', '.join(sources)}" if sources else "every source"
    log.info("engine %s started (%s)", engine.config.engine_id, scope, extra={"fields": fields})
    try:
        if await open_patiently(store, stop, engine.outage):
            await engine.serve(stop)
        else:
            await engine.firer.close()
    finally:
        if server is not None:
            await server.close()
        await asyncio.to_thread(engine.tracer.shutdown)  # the spans still buffered are sent
    log.info("engine %s stopped", engine.config.engine_id, extra={"fields": fields})


def web_options(
    serve: ServeOptions, dsn: str, default: str | None = None, say: Callable[[str], None] | None = None
) -> WebOptions | None:
    """--metrics-addr (else `default`) with the dashboard of the engine's database `dsn`, unless --no-dashboard."""
    addr = serve.addr or default
    if addr is None:
        return None
    from reconciler.web.forward import Forward

    token = dashboard_token(serve)
    dashboard = None
    if not serve.no_dashboard:  # in a process of its own (web/forward.py): pages never hold up a fire
        dashboard = Forward(DashboardProcess(dsn, token))
    return WebOptions(addr, dashboard, token, serve.addr is None, say)


def engine_pool_size(config: EngineConfig) -> int:
    return max(4, min(20, int(config.concurrency) // 10 + 4))


def engine(options: EngineOptions) -> int:
    """Claim and fire due tasks until SIGTERM (then drain and exit 0)."""
    from reconciler.engine.loop import Engine

    setup_logging(options.log_format)
    config = options.config
    if config.public_url is not None and options.serve.addr is None:
        raise UserError(
            "--public-url needs --metrics-addr HOST:PORT: a job's callbacks arrive at the engine's HTTP server, "
            "which the public URL must reach"
        )

    async def run() -> int:
        store = store_for(options.database, engine_pool_size(config))
        engine = Engine(store, config, tracer=tracer())
        try:
            await run_engine(store, web_options(options.serve, store.dsn), stop_on_signals(engine), engine)
        finally:
            await store.close()
        return EXIT_OK

    return asyncio.run(run())


class RunPrinter:
    """Engine observer for `up`: one line per run on stdout."""

    def claimed(self, report: Report) -> None:
        for item in report.recorded:
            detail = (item.error or "").removeprefix(f"{item.status}: ")  # `skipped (skipped: …)` says it twice
            self._line(item.task_id, utc_text(item.scheduled_for), item.status, detail)

    def finished(self, claimed: Claimed, outcome: Outcome) -> None:
        last = outcome.last
        detail = last.error or f"HTTP {last.http_status}"
        tries = f", attempt {last.attempt}" if last.attempt > 1 else ""
        when = "manual run" if claimed.kind == "manual" else utc_text(claimed.scheduled_for)
        when += " (backfill)" if claimed.kind == "backfill" else ""
        self._line(claimed.task_id, when, outcome.status, f"{detail}, {last.duration_ms} ms{tries}")

    def job_ended(self, task_id: str, status: str, seconds: float) -> None:
        """A job (completion = "callback") reported, or timed out: its accepted run's line was printed before."""
        self._print(f"job {task_id}: {status} ({seconds:.0f} s after its target accepted it)")

    @staticmethod
    def _line(task_id: str, when: str, status: str, detail: str) -> None:
        RunPrinter._print(f"run {task_id} @ {when}: {status} ({detail})")

    @staticmethod
    def _print(text: str) -> None:
        from reconciler.output.text import safe

        print(safe(f"[{utcnow().strftime('%H:%M:%S')}] {text}"), flush=True)


def is_run_result(record: logging.LogRecord) -> bool:
    """A log record of a run's result (its structured fields carry the status)."""
    fields = getattr(record, "fields", None)
    return isinstance(fields, dict) and "status" in fields


def stop_if_failed(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Set `stop` when `task` died: a dead watcher would leave `up` firing what was applied while edits go unseen."""
    if not task.cancelled() and task.exception() is not None:
        stop.set()


def up(options: UpOptions) -> int:
    """Apply, watch and fire in one process: the local development loop."""
    from reconciler.engine.loop import Engine
    from reconciler.engine.outage import log as outage_log

    # Run lines go to stdout; logs only for warnings, unless machine-readable logs are asked for.
    watching = options.watch
    need_tasks_dir(watching.files)
    people = options.log_format != "json"
    # People read one form: `[HH:MM:SS] …` for runs, applies and warnings alike.
    setup_logging("console" if people else options.log_format, logging.WARNING if people else logging.INFO)
    if people:  # RunPrinter already gave each run its line on stdout
        logging.getLogger("reconciler.engine").addFilter(lambda record: not is_run_result(record))
        outage_log.setLevel(logging.INFO)  # "database reachable" ends the warning that the database was not
    config = options.config  # `up` fires its own tasks only, even on a shared database

    async def work(store: Store) -> int:
        engine = Engine(store, config, tracer=tracer())
        stop = stop_on_signals(engine, err if people else None)
        printer = RunPrinter()
        engine.observers.append(printer)
        engine.jobs.on_ended.append(printer.job_ended)
        files = watching.files
        dirs = [files.tasks_dir, *(str(path) for path in files.dirs.listed() if str(path) != files.tasks_dir)]
        watched = f"{', '.join(dirs[:-1])} and {dirs[-1]}"
        print(f"reconciler up: watching {watched}, engine {config.engine_id}; Ctrl-C stops", flush=True)

        def show_url(url: str) -> None:
            shown = (
                f"/metrics on {url}/metrics" if options.serve.no_dashboard else f"dashboard on {url}/ (and /metrics)"
            )
            print(f"reconciler up: {shown}", flush=True)

        watcher = asyncio.create_task(watch_files(store, watching, stop))
        watcher.add_done_callback(lambda task: stop_if_failed(task, stop))
        try:
            await run_engine(store, web_options(options.serve, store.dsn, DEFAULT_ADDR, show_url), stop, engine)
        finally:
            stop.set()
            (failure,) = await asyncio.gather(watcher, return_exceptions=True)
        if isinstance(failure, Exception):
            if not isinstance(failure, OSError):  # not the system refusing a watch: a bug, whose stack is wanted
                log.error("the file watcher failed", exc_info=failure)
            raise UserError(f"the file watcher stopped ({one_line(failure)}); `up` stopped with it: restart it")
        print("reconciler up: stopped", flush=True)
        return EXIT_OK

    return with_store(options.database, work, pool_size=engine_pool_size(config))
