"""Builders shared by the engine integration tests: task files, run rows, the injected `now`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from reconciler.files.tasks import load_dir
from reconciler.reconcile.apply import apply_tasks
from reconciler.web.metrics import Endpoint, serve_metrics
from tests.builders import write_tasks

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SECRET = "s3cr3t-value-never-stored-7f3a"


async def setup(store: Store, root: Path, files: dict[str, str], now: datetime = NOW) -> None:
    loaded = load_dir(write_tasks(root, files), "tasks.d")
    assert loaded.errors == [], loaded.errors
    await apply_tasks(store, loaded.tasks, "default", now)


def runs(dsn: str, task_id: str | None = None) -> list[dict[str, object]]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(
            "SELECT task_id, scheduled_for, kind, status, attempt, http_status, error FROM scheduler.runs "
            "WHERE %(t)s::text IS NULL OR task_id = %(t)s ORDER BY scheduled_for, id",
            {"t": task_id},
        ).fetchall()


def next_run(dsn: str, task_id: str) -> datetime | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT next_run_at FROM scheduler.tasks WHERE id = %s", (task_id,)).fetchone()
    assert row is not None
    value: datetime | None = row[0]
    return value


async def metrics_endpoint(engine: Engine, store: Store, **options: Any) -> tuple[Endpoint, str]:
    """`serve_metrics` on a port the kernel picks (127.0.0.1:0), read back from the bound socket:
    (the endpoint, its base URL). No port is probed, closed and reused, so none can be taken meanwhile."""
    served = await serve_metrics("127.0.0.1:0", engine, store, **options)
    return served, served.url


async def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """`url`/metrics, by sample name: each sample's labels and value."""
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{url}/metrics")
    assert response.status_code == 200
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


class RecordingSleep:
    """A Firer's `sleep` that records each back-off or jitter wait and returns at once (a loop turn):
    a retry test checks the waits asked for without waiting them out."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)
