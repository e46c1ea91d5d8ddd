"""Prometheus metrics and health endpoints for `engine --metrics-addr HOST:PORT` (the dashboard beside them)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reconciler import __version__
from reconciler.clock import DATABASE
from reconciler.db import queries
from reconciler.db.probe import Probe
from reconciler.db.queries import EngineSeenRow, HealthRow
from reconciler.db.store import Store
from reconciler.engine.leader import Lease
from reconciler.web.app import Pages, Served, make_app, serve
from reconciler.web.callbacks import Callbacks
from reconciler.web.gauges import QUERY_SECONDS, LimitGauges, job_gauges, outbox_gauges

log = logging.getLogger("reconciler.metrics")
REFRESH_SECONDS = 5.0  # how often gauges read from the database are refreshed
TASK_SERIES_LIMIT = 10_000  # tasks with per-task series: a bound on what one scrape carries
PROBE_SECONDS = 0.9  # /healthz and /readyz answer within this (and a request's own handling)
OTHER_TASKS = "_other"  # the task label of runs of tasks beyond TASK_SERIES_LIMIT

if TYPE_CHECKING:
    from reconciler.engine.claim import Claimed, Report
    from reconciler.engine.loop import Engine
    from reconciler.targets.http import Outcome


class EngineMetrics:
    """Observer of one engine: counts runs by task and status, fire lag, claim duration, notification sends.

    The fleet-wide gauges (Health, Outbox) are served only while `lease` is held: one engine per
    set of sources reads them (see refresh_gauges)."""

    def __init__(self, registry: CollectorRegistry, lease: Lease, task_limit: int = TASK_SERIES_LIMIT) -> None:
        self.runs = Runs(task_limit)
        registry.register(self.runs)
        self.fire_lag = Histogram(
            "reconciler_fire_lag_seconds",
            "Send time minus scheduled_for",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=registry,
        )
        self.claim_seconds = Histogram(
            "reconciler_claim_duration_seconds", "Claim transaction duration", registry=registry
        )
        self.backlog = Gauge(
            "reconciler_due_backlog", "Enabled tasks due now (read in the background, see the _age)", registry=registry
        )
        self.backlog.set(math.nan)  # not read yet: no value rather than a healthy-looking 0
        self.backlog_read_at = math.nan  # time.time() of the last successful read
        Gauge(
            "reconciler_due_backlog_age_seconds",
            "Seconds since reconciler_due_backlog was last read from the database (NaN: never)",
            registry=registry,
        ).set_function(lambda: time.time() - self.backlog_read_at)
        self.leases = Gauge("reconciler_leases_held", "Leases held by this engine", registry=registry)
        self.up = Gauge("reconciler_engine_up", "1 while the engine runs", registry=registry)
        self.up.set(1)
        Gauge(
            "reconciler_health_leader",
            "1 on the one engine (per set of sources) that serves the per-task, per-engine and outbox gauges; "
            "0 on the others, which serve none of them",
            registry=registry,
        ).set_function(lambda: float(lease.held))
        self.health = Health(lease, task_limit)
        registry.register(self.health)
        self.notifications = Counter(
            "reconciler_notifications",
            "Notification delivery attempts by this engine; outcome: delivered, retry (failed, tried again "
            "later) or failed (gave up). Series: notifiers x events (5) x outcomes (3)",
            ["notifier", "event", "outcome"],
            registry=registry,
        )
        self.outbox = outbox_gauges(lease)
        registry.register(self.outbox)
        self.limits = LimitGauges(lease)
        registry.register(self.limits)
        self.jobs = job_gauges(lease)
        registry.register(self.jobs)
        self.job_seconds = Histogram(
            "reconciler_job_duration_seconds",
            "Jobs this engine ended (completed or timed out), from their target's acceptance to their end, by status",
            ["status"],
            buckets=(1, 10, 60, 300, 900, 1800, 3600, 7200, 21600, 43200, 86400, 259200, 604800),
            registry=registry,
        )
        self.callbacks = Counter(
            "reconciler_job_callbacks",
            "Jobs' callbacks this engine answered, by route (heartbeat, complete) and HTTP status",
            ["route", "code"],
            registry=registry,
        )
        Gauge(
            "reconciler_clock_offset_seconds",
            "The database's clock minus this machine's, as last measured at heartbeat (NaN: not yet); the "
            "database's clock decides what is due, this shows a host whose time sync is off",
            registry=registry,
        ).set_function(lambda: DATABASE.offset if DATABASE.measured else math.nan)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        Info("reconciler_build", "The running reconciler", registry=registry).info({"version": __version__})

    def claimed(self, report: Report) -> None:
        self.claim_seconds.observe(report.seconds)
        self.leases.inc(len(report.runs))
        for item in report.recorded:
            self.runs.inc(item.task_id, item.status)

    def finished(self, claimed: Claimed, outcome: Outcome) -> None:
        self.leases.dec()
        if outcome.status != "accepted":  # a job's final status comes with its callback (job_ended)
            self.runs.inc(claimed.task_id, outcome.status)
        sent = outcome.attempts[0].sent_at if outcome.attempts else 0.0
        if sent:
            self.fire_lag.observe(max(0.0, sent - claimed.scheduled_for.timestamp()))

    def job_ended(self, task_id: str, status: str, seconds: float) -> None:
        """A job this engine ended (a completion it took, or a timeout its upkeep found)."""
        self.runs.inc(task_id, status)
        self.job_seconds.labels(status).observe(seconds)

    def callback(self, route: str, code: int) -> None:
        self.callbacks.labels(route, str(code)).inc()

    def notified(self, notifier: str, event: str, outcome: str) -> None:
        """One delivery attempt of a notification: `outcome` is delivered, retry or failed (gave up)."""
        self.notifications.labels(notifier, event, outcome).inc()


class Runs:
    """reconciler_runs_total{task,status}: the runs this engine recorded a final status for, by task.

    At most `limit` tasks have series of their own (the first counted); the runs of any other
    count in task="_other". A task deleted, or moved out of the engine's sources, loses its
    series at the next refresh (see prune), and its place goes to the next task counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counts: dict[str, dict[str, float]] = {}
        self.other: dict[str, float] = {}

    def inc(self, task: str, status: str) -> None:
        counts = self.counts.get(task)
        if counts is None:
            if len(self.counts) >= self.limit:
                self.other[status] = self.other.get(status, 0.0) + 1
                return
            counts = self.counts[task] = {}
        counts[status] = counts.get(status, 0.0) + 1

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "reconciler_runs",
            "Runs recorded by this engine, by final status; tasks beyond the series limit count as task=_other",
            labels=["task", "status"],
        )
        # collect() runs in a thread while the event loop counts: copies (atomic under the GIL)
        # rather than iterating dicts that may grow meanwhile.
        for task, counts in self.counts.copy().items():
            for status, value in counts.copy().items():
                family.add_metric([task, status], value)
        for status, value in self.other.copy().items():
            family.add_metric([OTHER_TASKS, status], value)
        yield family

    async def prune(self, store: Store, sources: list[str]) -> None:
        """Drop the series of the tasks counted that are no longer in the database (in `sources`)."""
        asked = list(self.counts)
        if not asked:
            return
        async with asyncio.timeout(QUERY_SECONDS), store.connection() as conn:
            rows = await queries.tasks_present(conn, ids=asked, sources=sources)
        for task in set(asked) - {row["id"] for row in rows}:
            self.counts.pop(task, None)


@dataclass(frozen=True)
class _Families:
    """Families already made, as a collector generate_latest can render."""

    families: list[Metric]

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def _stamp(moment: datetime | None) -> float:
    return moment.timestamp() if moment is not None else math.nan


class Health:
    """Per-task and per-engine gauges from the last read of the database (see refresh_gauges), so a
    scrape never waits for it; served only while `lease` is held, by one engine per set of sources.
    Series: four per enabled task (at most `limit` tasks, the first by id), one per engine seen in
    the last hour, and the read's age."""

    def __init__(self, lease: Lease, limit: int = TASK_SERIES_LIMIT) -> None:
        self.lease, self.limit = lease, limit
        self.tasks: list[HealthRow] = []
        self.engines: list[EngineSeenRow] = []
        self.now = math.nan  # the engine's clock at the last read
        self.read_at = math.nan  # time.time() of the last read
        self._text: tuple[float, bytes] | None = None  # (read_at, the per-task families rendered)

    def collect(self) -> Iterator[Metric]:
        if not self.lease.held:
            return
        seen = GaugeMetricFamily(
            "reconciler_engine_last_seen_timestamp_seconds",
            "Each engine's last heartbeat (engines seen in the last hour)",
            labels=["engine"],
        )
        for row in self.engines:
            seen.add_metric([row["engine_id"]], row["last_seen"].timestamp())
        age = GaugeMetricFamily(
            "reconciler_task_health_age_seconds", "Seconds since the per-task gauges were read (NaN: never)"
        )
        age.add_metric([], time.time() - self.read_at)
        yield from (seen, age)

    def task_text(self) -> bytes:
        """The four per-task families in the exposition format, rendered once per read (the first scrape
        after it; a scrape thread calls this): tens of thousands of samples are the bulk of a scrape, and
        rendering them on every scrape took the event loop's share of the GIL for a third of a second."""
        if not self.lease.held:
            return b""
        tasks, read_at = self.tasks, self.read_at
        cached = self._text
        if cached is not None and cached[0] == read_at:
            return cached[1]
        text = generate_latest(_Families(list(self._task_families(tasks))))
        self._text = (read_at, text)
        return text

    def _task_families(self, tasks: list[HealthRow]) -> Iterator[Metric]:
        last = GaugeMetricFamily(
            "reconciler_task_last_success_timestamp_seconds",
            "When the task's last succeeded run finished (NaN: no success in the kept history)",
            labels=["task"],
        )
        failing = GaugeMetricFamily(
            "reconciler_task_failing", "1 when the task's last finished run failed or was lost", labels=["task"]
        )
        upcoming = GaugeMetricFamily(
            "reconciler_task_next_run_timestamp_seconds", "The task's next occurrence (NaN: none)", labels=["task"]
        )
        overdue = GaugeMetricFamily(
            "reconciler_task_overdue_seconds",
            "How long the due occurrence has waited unclaimed",
            labels=["task"],
        )
        for row in tasks:
            task = [row["id"]]
            last.add_metric(task, _stamp(row["last_success"]))
            failing.add_metric(task, 1.0 if row["failing"] else 0.0)
            upcoming.add_metric(task, _stamp(row["next_run_at"]))
            overdue.add_metric(task, max(0.0, self.now - _stamp(row["next_run_at"])) if row["next_run_at"] else 0.0)
        yield from (last, failing, upcoming, overdue)

    async def read(self, store: Store, now: datetime, sources: list[str]) -> None:
        async with asyncio.timeout(QUERY_SECONDS), store.connection() as conn:
            tasks = await queries.task_health(conn, now=now, sources=sources, limit=self.limit)
            engines = await queries.engines_seen(conn, now=now)
        self.tasks, self.engines, self.now, self.read_at = tasks, engines, now.timestamp(), time.time()

    def clear(self) -> None:
        self.tasks, self.engines, self.read_at = [], [], math.nan


# (metric, column of the notifications_health query, help): the outbox as last read.
async def refresh_gauges(
    metrics: EngineMetrics, engine: Engine, store: Store, seconds: float = REFRESH_SECONDS
) -> None:
    """Read the database gauges every `seconds`, each read bounded by QUERY_SECONDS.

    /metrics serves what was last read (with its age) and so answers at once whatever the
    database does: Prometheus's scrape timeout (10 s) would otherwise drop every engine
    metric exactly during an outage. Only the engine holding the health lease reads the
    fleet-wide gauges; the lease is renewed here, every time.
    """
    lease = metrics.health.lease
    while True:
        now, sources = engine.clock.now(), list(engine.config.sources)
        try:
            async with asyncio.timeout(QUERY_SECONDS), store.connection() as conn:
                [row] = await queries.due_backlog(conn, now=now, sources=sources)
            metrics.backlog.set(row["due"])
            metrics.backlog_read_at = time.time()
            await metrics.runs.prune(store, sources)
            async with asyncio.timeout(QUERY_SECONDS):
                leading = await lease.renew()
            if leading:
                await metrics.health.read(store, now, sources)
                await metrics.limits.read(store, now, sources)
                await metrics.jobs.read(store, now, sources)
                await metrics.outbox.read(store, now, sources)  # last: a failed outbox read costs only its gauges
            else:  # a follower keeps nothing a later turn as leader could serve before its first read
                metrics.health.clear()
                metrics.outbox.values = {}
                metrics.limits.rows = []
                metrics.jobs.values = {}
        except Exception as exc:  # the database away: the values age, the scrape goes on
            log.debug("gauges not refreshed: %s", type(exc).__name__)
        await asyncio.sleep(seconds)


def lease_name(sources: tuple[str, ...]) -> str:
    """The health lease of engines with these sources: engines of other sources read other tasks."""
    return "metrics " + (",".join(sorted(sources)) if sources else "*")


async def serve_metrics(
    addr: str,
    engine: Engine,
    store: Store,
    *,
    refresh_seconds: float = REFRESH_SECONDS,
    task_limit: int = TASK_SERIES_LIMIT,
    probe_dsn: str | None = None,
    dashboard: Pages | None = None,
    token: str | None = None,
) -> Endpoint:
    """Start the HTTP endpoint (with `dashboard`'s pages beside it, when given) and the gauge refresher;
    close the returned Endpoint to stop both.

    The health lease lasts three refreshes: a leader that stops is replaced within that.
    `probe_dsn` (default the store's) is what /healthz and /readyz connect to; `token` guards the
    dashboard (see web/app.py)."""
    registry = CollectorRegistry()
    lease = Lease(store, lease_name(engine.config.sources), engine.config.engine_id, 3 * refresh_seconds)
    metrics = EngineMetrics(registry, lease, task_limit)
    engine.observers.append(metrics)
    engine.deliverer.observers.append(metrics)
    engine.jobs.on_callback.append(metrics.callback)
    engine.jobs.on_ended.append(metrics.job_ended)
    Gauge(
        "reconciler_listen_connected",
        "1 while this engine's LISTEN connection is up (a NOTIFY wakes it at once); 0 while it polls instead",
        registry=registry,
    ).set_function(lambda: float(engine.listener.connected))
    probe = Probe(probe_dsn or store.dsn, PROBE_SECONDS)

    async def scrape(request: web.Request) -> web.Response:
        # rendered in a thread: a scrape of thousands of series never holds up a fire
        body = await asyncio.to_thread(lambda: generate_latest(registry) + metrics.health.task_text())
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(request: web.Request) -> web.Response:
        ok = await probe.ok()
        if request.path == "/readyz":  # ready once a claim has gone through
            ok = ok and engine.ready
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "database unreachable\n")

    app = make_app(token)
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/healthz", health)
    app.router.add_get("/readyz", health)
    Callbacks(engine.jobs).add_routes(app)  # before the dashboard's catch-all
    if dashboard is not None:
        dashboard.add_routes(app)
    served = await serve(app, addr)
    refresher = asyncio.create_task(refresh_gauges(metrics, engine, store, refresh_seconds))
    return Endpoint(served, refresher, registry, metrics, probe, dashboard)


@dataclass
class Endpoint:
    """The listening server and its background refresher; close() stops both (and the dashboard's pool).
    The health lease is not given back: it runs out, as a crashed engine's does."""

    served: Served
    refresher: asyncio.Task[None]
    registry: CollectorRegistry
    metrics: EngineMetrics
    probe: Probe
    dashboard: Pages | None = None

    @property
    def url(self) -> str:
        return self.served.url

    async def close(self) -> None:
        self.refresher.cancel()
        await self.served.close()
        await self.probe.close()
        if self.dashboard is not None:
            await self.dashboard.close()
