"""Prometheus metrics and health endpoints for `engine --metrics-addr HOST:PORT`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reconciler.clock import DATABASE
from reconciler.store import Row, Store

log = logging.getLogger("reconciler.metrics")
REFRESH_SECONDS = 5.0  # how often gauges read from the database are refreshed
QUERY_SECONDS = 2.0  # at most this long per refresh: a database that hangs costs a stale value, never a scrape
TASK_SERIES_LIMIT = 10_000  # tasks with per-task series (the first by id): a bound on what one scrape carries

if TYPE_CHECKING:
    from reconciler.claim import Claimed, Report
    from reconciler.engine import Engine
    from reconciler.targets import Outcome


class EngineMetrics:
    """Observer of one engine: counts runs by task and status, fire lag, claim duration, notification sends."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter("reconciler_runs", "Runs recorded by this engine", ["task", "status"], registry=registry)
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
        self._claimed_by: dict[int, str] = {}
        self.health = Health()
        registry.register(self.health)
        self.notifications = Counter(
            "reconciler_notifications",
            "Notification delivery attempts by this engine; outcome: delivered, retry (failed, tried again "
            "later) or failed (gave up). Series: notifiers x events (5) x outcomes (3)",
            ["notifier", "event", "outcome"],
            registry=registry,
        )
        self.outbox = Outbox()
        registry.register(self.outbox)
        Gauge(
            "reconciler_clock_offset_seconds",
            "The database's clock minus this machine's, as last measured at heartbeat (NaN: not yet); the "
            "database's clock decides what is due, this shows a host whose time sync is off",
            registry=registry,
        ).set_function(lambda: DATABASE.offset if DATABASE.measured else math.nan)

    def claimed(self, report: Report) -> None:
        self.claim_seconds.observe(report.seconds)
        self.leases.inc(len(report.runs))
        for item in report.recorded:
            self.runs.labels(item.task_id, item.status).inc()

    def finished(self, claimed: Claimed, outcome: Outcome) -> None:
        self.leases.dec()
        self.runs.labels(claimed.task_id, outcome.status).inc()
        sent = outcome.attempts[0].sent_at if outcome.attempts else 0.0
        if sent:
            self.fire_lag.observe(max(0.0, sent - claimed.scheduled_for.timestamp()))

    def notified(self, notifier: str, event: str, outcome: str) -> None:
        """One delivery attempt of a notification: `outcome` is delivered, retry or failed (gave up)."""
        self.notifications.labels(notifier, event, outcome).inc()


def _stamp(moment: datetime | None) -> float:
    return moment.timestamp() if moment is not None else math.nan


class Health:
    """Per-task and per-engine gauges from the last read of the database (see refresh_gauges), so a
    scrape never waits for it. Each engine reports every task of its sources: alert on min or max
    by task. Series: four per enabled task (at most TASK_SERIES_LIMIT tasks) and one per engine
    seen in the last hour."""

    def __init__(self) -> None:
        self.tasks: list[Row] = []
        self.engines: list[Row] = []
        self.now = math.nan  # the engine's clock at the last read
        self.read_at = math.nan  # time.time() of the last read

    def collect(self) -> Iterator[Metric]:
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
        for row in self.tasks:
            task = [row["id"]]
            last.add_metric(task, _stamp(row["last_success"]))
            failing.add_metric(task, 1.0 if row["failing"] else 0.0)
            upcoming.add_metric(task, _stamp(row["next_run_at"]))
            overdue.add_metric(task, max(0.0, self.now - _stamp(row["next_run_at"])) if row["next_run_at"] else 0.0)
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
        yield from (last, failing, upcoming, overdue, seen, age)

    async def read(self, store: Store, now: datetime, sources: list[str]) -> None:
        async with asyncio.timeout(QUERY_SECONDS), store.connection() as conn:
            params = {"now": now, "sources": sources, "limit": TASK_SERIES_LIMIT}
            tasks = await Store.fetch(conn, "task_health", params)
            engines = await Store.fetch(conn, "engines_seen", params)
        self.tasks, self.engines, self.now, self.read_at = tasks, engines, now.timestamp(), time.time()


# (metric, column of the notifications_health query, help): the outbox as last read.
OUTBOX_GAUGES = (
    (
        "reconciler_notifications_pending",
        "pending",
        "Notifications neither delivered nor given up: due, being sent or waiting for a retry",
    ),
    ("reconciler_notifications_failed", "failed", "Notifications created in the last 24 h that gave up"),
    (
        "reconciler_notification_oldest_pending_age_seconds",
        "oldest_due_seconds",
        "How long the longest-waiting due notification has been due: since it was written, or since its retry "
        "time (one waiting for its retry or being sent is not due); 0: none due",
    ),
)


class Outbox:
    """The notification outbox's gauges (OUTBOX_GAUGES) for the engine's sources, from the last read of
    the database (see refresh_gauges), so a scrape never waits for it. Series: three."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def collect(self) -> Iterator[Metric]:
        for name, column, doc in OUTBOX_GAUGES:
            yield GaugeMetricFamily(name, f"{doc} (NaN: not read yet)", value=self.values.get(column, math.nan))

    async def read(self, store: Store, now: datetime, sources: list[str]) -> None:
        async with asyncio.timeout(QUERY_SECONDS), store.connection() as conn:
            [row] = await Store.fetch(conn, "notifications_health", {"now": now, "sources": sources})
        self.values = {column: float(value) for column, value in row.items()}


async def _database_ok(store: Store) -> bool:
    try:
        async with asyncio.timeout(3), store.connection() as conn:
            await conn.execute("SELECT 1")
        return True
    except Exception:
        return False


async def refresh_gauges(metrics: EngineMetrics, engine: Engine, store: Store) -> None:
    """Read the database gauges every REFRESH_SECONDS, each read bounded by QUERY_SECONDS.

    /metrics serves what was last read (with its age) and so answers at once whatever the
    database does: Prometheus's scrape timeout (10 s) would otherwise drop every engine metric
    exactly during an outage.
    """
    while True:
        now, sources = engine.clock.now(), list(engine.config.sources)
        try:
            async with asyncio.timeout(QUERY_SECONDS), store.connection() as conn:
                [row] = await Store.fetch(conn, "due_backlog", {"now": now, "sources": sources})
            metrics.backlog.set(row["due"])
            metrics.backlog_read_at = time.time()
            await metrics.health.read(store, now, sources)
            await metrics.outbox.read(store, now, sources)  # last: an outbox read that fails costs only its own gauges
        except Exception as exc:  # the database away: the values age, the scrape goes on
            log.debug("gauges not refreshed: %s", type(exc).__name__)
        await asyncio.sleep(REFRESH_SECONDS)


async def serve_metrics(addr: str, engine: Engine, store: Store) -> Endpoint:
    """Start the HTTP endpoint and the gauge refresher; close the returned Endpoint to stop both."""
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry)
    engine.observers.append(metrics)
    engine.deliverer.observers.append(metrics)
    host, _, port = addr.rpartition(":")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            request = (await asyncio.wait_for(reader.readline(), 5)).decode("latin-1").split()
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            path = request[1] if len(request) > 1 else "/"
            status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            if path == "/metrics":
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(registry)
            elif path in ("/healthz", "/readyz"):
                ok = await _database_ok(store)
                if path == "/readyz":  # ready once a claim has gone through
                    ok = ok and engine.ready
                status = "200 OK" if ok else "503 Service Unavailable"
                body = b"ok\n" if ok else b"database unreachable\n"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, host or "127.0.0.1", int(port))
    return Endpoint(server, asyncio.create_task(refresh_gauges(metrics, engine, store)))


@dataclass
class Endpoint:
    """The listening /metrics server and its background refresher; close() stops both."""

    server: asyncio.Server
    refresher: asyncio.Task[None]

    def close(self) -> None:
        self.refresher.cancel()
        self.server.close()
