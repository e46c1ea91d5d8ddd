"""Builders shared by the engine integration tests: task files, run rows, the injected `now`."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from reconciler.apply import apply_tasks
from reconciler.loader import load_dir
from reconciler.store import Store

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SECRET = "s3cr3t-value-never-stored-7f3a"


async def setup(store: Store, root: Path, files: dict[str, str], now: datetime = NOW) -> None:
    for name, text in files.items():
        (root / f"{name}.toml").parent.mkdir(parents=True, exist_ok=True)
        (root / f"{name}.toml").write_text(text)
    loaded = load_dir(root, "tasks.d")
    assert loaded.errors == [], loaded.errors
    await apply_tasks(store, loaded.tasks, "default", now)


def cron(url: str, expr: str = "*/5 * * * *", policy: str = "", target: str = "", top: str = "") -> str:
    return f'{top}\n[trigger]\nkind = "cron"\nexpr = "{expr}"\n[target]\nurl = "{url}"\n{target}\n[policy]\n{policy}\n'


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


def free_addr() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


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
