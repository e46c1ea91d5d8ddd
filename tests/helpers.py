"""Small builders shared by the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

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
