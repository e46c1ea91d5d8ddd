"""Prometheus metrics and health endpoints for `engine --metrics-addr HOST:PORT`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reconciler.store import Store

log = logging.getLogger("reconciler.metrics")
REFRESH_SECONDS = 5.0  # how often gauges read from the database are refreshed
QUERY_SECONDS = 2.0  # at most this long per refresh: a database that hangs costs a stale value, never a scrape

if TYPE_CHECKING:
    from reconciler.claim import Claimed, Report
    from reconciler.engine import Engine
    from reconciler.targets import Outcome


class EngineMetrics:
    """Observer of one engine: counts runs by task and status, fire lag, claim duration."""

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
        try:
            async with asyncio.timeout(QUERY_SECONDS), store.connection() as conn:
                params = {"now": engine.clock.now(), "sources": list(engine.config.sources)}
                [row] = await Store.fetch(conn, "due_backlog", params)
            metrics.backlog.set(row["due"])
            metrics.backlog_read_at = time.time()
        except Exception as exc:  # the database away: the value ages, the scrape goes on
            log.debug("backlog not refreshed: %s", type(exc).__name__)
        await asyncio.sleep(REFRESH_SECONDS)


async def serve_metrics(addr: str, engine: Engine, store: Store) -> Endpoint:
    """Start the HTTP endpoint and the gauge refresher; close the returned Endpoint to stop both."""
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry)
    engine.observers.append(metrics)
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
