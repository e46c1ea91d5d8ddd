"""`reconciler status` as text: the flags and the lines under the table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reconciler.output.text import status_text

DUE = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def item(task_id: str, **changes: Any) -> dict[str, Any]:
    """A task as output/views.status_item shapes it."""
    base = {
        "id": task_id,
        "enabled": True,
        "next_run_at": DUE,
        "next_run_local": "2026-12-02 13:00:00 CET",
        "last_run_at": None,
        "last_status": None,
        "overdue": False,
        "paused": None,
        "drift": False,
        "waiting_for": None,
    }
    return {**base, **changes}


def test_a_task_waiting_for_a_limit_is_flagged_and_named_with_its_limit() -> None:
    out = status_text([item("a/one"), item("a/two", waiting_for="billing-api")], [], [])
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("a/")}
    assert rows["a/two"].endswith("WAITING") and not rows["a/one"].endswith("WAITING")
    assert "⧗ a/two waiting for limit billing-api (due since 2026-12-02 12:00:00 UTC)" in out.splitlines()
    assert "a/one waiting" not in out


def test_the_waiting_line_escapes_what_a_limit_name_could_hold() -> None:
    out = status_text([item("a/two", waiting_for="x\x1b[2Jy")], [], [])
    assert "\x1b" not in out and "x\\x1b[2Jy" in out
