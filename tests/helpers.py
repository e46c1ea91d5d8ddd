"""Small builders shared by the tests."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import IO, Any

from reconciler.models import TaskSpec
from reconciler.triggers import Schedule, compile_schedule, upcoming

TARGET = {"url": "http://127.0.0.1:9/hook"}


def spec(zone: str, trigger: dict[str, Any], **policy: Any) -> TaskSpec:
    """A task spec with a dummy target."""
    return TaskSpec.model_validate({"timezone": zone, "trigger": trigger, "target": TARGET, "policy": policy})


def schedule(zone: str, trigger: dict[str, Any], **policy: Any) -> Schedule:
    return compile_schedule(spec(zone, trigger, **policy))


def fires_iso(zone: str, trigger: dict[str, Any], after: str, count: int, **policy: Any) -> list[str]:
    """The next `count` fire times as ISO strings in the task's zone."""
    from zoneinfo import ZoneInfo

    sched = schedule(zone, trigger, **policy)
    return [f.at.astimezone(ZoneInfo(zone)).isoformat() for f in upcoming(sched, datetime.fromisoformat(after), count)]


def finished_runs(dsn: str) -> int:
    """How many run rows have a final status (not queued, not running)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM scheduler.runs WHERE status NOT IN ('queued', 'running')").fetchone()
    return int(row[0]) if row else 0


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
