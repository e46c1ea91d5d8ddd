"""Small builders shared by the tests."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

import psycopg

from reconciler.files.tasks import load_dir
from reconciler.schedule.base import Schedule
from reconciler.schedule.preview import upcoming
from reconciler.schedule.triggers import Calendars, compile_schedule
from reconciler.spec.task import TaskSpec

TARGET = {"url": "http://127.0.0.1:9/hook"}


def spec(zone: str, trigger: dict[str, Any], **policy: Any) -> TaskSpec:
    """A task spec with a dummy target."""
    return TaskSpec.model_validate({"timezone": zone, "trigger": trigger, "target": TARGET, "policy": policy})


def schedule(zone: str, trigger: dict[str, Any], calendars: Calendars | None = None, **policy: Any) -> Schedule:
    return compile_schedule(spec(zone, trigger, **policy), calendars)


def fires_iso(zone: str, trigger: dict[str, Any], after: str, count: int, **policy: Any) -> list[str]:
    """The next `count` fire times as ISO strings in the task's zone."""
    from zoneinfo import ZoneInfo

    sched = schedule(zone, trigger, **policy)
    return [f.at.astimezone(ZoneInfo(zone)).isoformat() for f in upcoming(sched, datetime.fromisoformat(after), count)]


def finished_runs(dsn: str) -> int:
    """How many run rows have a final status (not queued, not running)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM scheduler.runs WHERE status NOT IN ('queued', 'running')").fetchone()
    return int(row[0]) if row else 0


def leases(dsn: str) -> int:
    """How many run leases are held."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM scheduler.run_leases").fetchone()
    return int(row[0]) if row else 0


def one_row(dsn: str, query: str, params: tuple[object, ...] = ()) -> tuple[Any, ...]:
    """The one row a query returns, on a connection of its own."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None, query
    return tuple(row)


def settled(dsn: str, expected: int) -> bool:
    """Every occurrence has a run row, none is still queued or running, and no lease is held."""
    row = one_row(
        dsn,
        "SELECT count(*) FILTER (WHERE status IN ('queued', 'running')), count(*),"
        " (SELECT count(*) FROM scheduler.run_leases) FROM scheduler.runs",
    )
    return bool(row[0] == 0 and row[1] >= expected and row[2] == 0)


def expected_occurrences(root: Path, start: datetime, end: datetime) -> set[tuple[str, datetime]]:
    """(task id, occurrence) of every task file under `root` in [start, end)."""
    found = set()
    for task in load_dir(root, "tasks.d").tasks:
        moment = task.schedule.next_fire_time(start - timedelta(seconds=1))
        while moment is not None and moment < end:
            found.add((task.id, moment))
            moment = task.schedule.next_fire_time(moment)
    return found


def wait_until(check: Callable[[], object], seconds: float, step: float = 0.1) -> bool:
    """Poll `check` until it is truthy (True) or `seconds` pass (False); a bounded wait for subprocess tests."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return False


async def async_wait_until(check: Callable[[], object], seconds: float, step: float = 0.05) -> bool:
    """wait_until for coroutines: polls `check` (plain or async) without blocking the event loop."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return True
        await asyncio.sleep(step)
    return False


class Output:
    """Collects the lines of a subprocess's pipe in a thread, so the pipe never fills."""

    def __init__(self, stream: IO[str] | None) -> None:
        self.lines: list[str] = []
        assert stream is not None
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join(timeout=10)

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))
