"""`reconciler audit` as text: a backfill names its id, range and count; its cancel, the id and what it dropped."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reconciler.output.text import audit_line

AT = datetime(2026, 12, 3, 9, 55, tzinfo=UTC)


def row(action: str, details: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": 9, "at": AT, "actor": "bob", "action": action, "source": "default", "task_ids": ["nightly"],
        "reason": "INC-42", "details": details,
    }  # fmt: skip


def test_a_backfill_cancel_names_the_backfill_and_what_it_dropped() -> None:
    line = audit_line(row("cancel", {"backfill_id": 3, "dropped": 239}))
    assert (
        line
        == "#9 2026-12-03 09:55:00 UTC bob cancel [default] nightly: INC-42 (backfill 3, 239 queued run(s) dropped)"
    )


def test_a_backfill_names_its_id_count_range_and_reprocess() -> None:
    details = {
        "backfill_id": 3, "from": "2026-11-01T00:00:00+00:00", "to": "2026-11-02T00:00:00+00:00",
        "reprocess": "none", "queued": 288,
    }  # fmt: skip
    assert audit_line(row("backfill", details)).endswith(
        ": INC-42 (backfill 3, 288 run(s) queued over [2026-11-01 00:00:00 UTC, 2026-11-02 00:00:00 UTC), "
        "--reprocess none)"
    )


def test_a_manual_run_s_cancel_is_as_before() -> None:
    assert audit_line(row("cancel", {"run_id": 12})).endswith(": INC-42 (run id 12)")
