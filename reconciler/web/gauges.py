"""The fleet's gauges read from the database in the background (see metrics.refresh_gauges), served only by the
engine holding the health lease (as metrics.Health): the outbox's, the running jobs' and the limits'. A scrape
serves the last read and never waits for the database."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from reconciler.db import job_queries, limit_queries, queries
from reconciler.db.limit_queries import LimitHealthRow
from reconciler.db.rows import Conn
from reconciler.db.store import Store
from reconciler.engine.leader import Lease

QUERY_SECONDS = 2.0  # at most this long per read: a database that hangs costs a stale value, never a scrape
Gauges = Sequence[tuple[str, str, str]]  # (metric name, column of the row read, help)
RowReader = Callable[[Conn, datetime, list[str]], Awaitable[Mapping[str, Any]]]

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


JOB_GAUGES = (
    ("reconciler_jobs_running", "running", 'Jobs (completion = "callback") their targets accepted, not ended yet'),
    ("reconciler_job_oldest_seconds", "oldest_seconds", "Age of the oldest running job since its target accepted it"),
    (
        "reconciler_job_heartbeat_age_seconds",
        "stalest_heartbeat_seconds",
        "The longest any running job has gone without a heartbeat (since it was accepted, when it sent none)",
    ),
)


class RowGauges:
    """Gauges of one row read from the database for the engine's sources (`gauges`: name, column, help), from the
    last read; served only while `lease` is held. Series: one per gauge."""

    def __init__(self, lease: Lease, gauges: Gauges, reader: RowReader) -> None:
        self.lease = lease
        self.gauges = gauges
        self.reader = reader
        self.values: dict[str, float] = {}

    def collect(self) -> Iterator[Metric]:
        if not self.lease.held:
            return
        for name, column, doc in self.gauges:
            yield GaugeMetricFamily(name, f"{doc} (NaN: not read yet)", value=self.values.get(column, math.nan))

    async def read(self, store: Store, now: datetime, sources: list[str]) -> None:
        async with asyncio.timeout(QUERY_SECONDS), store.connection() as conn:
            row = await self.reader(conn, now, sources)
        self.values = {column: float(row[column]) for _, column, _ in self.gauges}


async def outbox_row(conn: Conn, now: datetime, sources: list[str]) -> Mapping[str, Any]:
    [row] = await queries.notifications_health(conn, now=now, sources=sources)
    return row


async def jobs_row(conn: Conn, now: datetime, sources: list[str]) -> Mapping[str, Any]:
    return await job_queries.jobs_health(conn, now=now, sources=sources)


def outbox_gauges(lease: Lease) -> RowGauges:
    """The notification outbox's gauges (OUTBOX_GAUGES). Series: three."""
    return RowGauges(lease, OUTBOX_GAUGES, outbox_row)


def job_gauges(lease: Lease) -> RowGauges:
    """The running jobs' gauges (JOB_GAUGES, docs/jobs.md). Series: three."""
    return RowGauges(lease, JOB_GAUGES, jobs_row)


class LimitGauges:
    """Per limit (limits.d) of the engine's sources: runs in flight, tokens, tasks waiting, and the counters of
    occurrences delayed and missed for it, from the last read of the database; served only while `lease` is
    held, as Health's. Series: five per limit."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.rows: list[LimitHealthRow] = []

    def collect(self) -> Iterator[Metric]:
        if not self.lease.held:
            return
        labels = ["source", "limit"]
        in_flight = GaugeMetricFamily(
            "reconciler_limit_in_flight", "Runs in flight counted against the limit", labels=labels
        )
        tokens = GaugeMetricFamily(
            "reconciler_limit_tokens", "Tokens in the limit's bucket (limits with rate_per_second)", labels=labels
        )
        waiting = GaugeMetricFamily(
            "reconciler_limit_waiting", "Tasks whose due occurrence waits for the limit to have room", labels=labels
        )
        delayed = CounterMetricFamily(
            "reconciler_limit_delayed", "Occurrences that had to wait for the limit", labels=labels
        )
        missed = CounterMetricFamily(
            "reconciler_limit_missed", "Occurrences recorded missed after waiting for the limit", labels=labels
        )
        for row in self.rows:
            key = [row["source"], row["name"]]
            in_flight.add_metric(key, row["in_flight"])
            if row["rate_per_second"] is not None:
                tokens.add_metric(key, row["tokens"])
            waiting.add_metric(key, row["waiting"])
            delayed.add_metric(key, row["delayed_total"])
            missed.add_metric(key, row["missed_total"])
        yield from (in_flight, tokens, waiting, delayed, missed)

    async def read(self, store: Store, now: datetime, sources: list[str]) -> None:
        async with asyncio.timeout(QUERY_SECONDS), store.connection() as conn:
            self.rows = await limit_queries.limits_health(conn, now=now, sources=sources)
