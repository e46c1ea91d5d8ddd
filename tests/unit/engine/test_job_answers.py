"""What a callback on an attempt that is over is told (engine/jobs.py): 409 with the outcome once the job reported,
410 once it timed out or its deadline passed, nothing while it is on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from reconciler.db.job_queries import CallbackRow
from reconciler.engine.jobs import Jobs

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
PAST, FUTURE = NOW - timedelta(seconds=1), NOW + timedelta(hours=1)


def row(status: str, deadline: datetime | None, **extra: Any) -> CallbackRow:
    values = {"status": status, "deadline_at": deadline, "now": NOW, "attempt": 1, "output": None, "error": None,
              "retry_at": None, **extra}  # fmt: skip
    return cast(CallbackRow, values)


@pytest.mark.parametrize(
    ("status", "deadline", "extra", "code"),
    [
        ("running", FUTURE, {}, None),
        ("lost", FUTURE, {}, None),  # its engine died before recording the 202: the job's result still lands
        ("succeeded", FUTURE, {"output": {"rows": 1}}, 409),
        ("succeeded", PAST, {}, 409),  # a repeat after the deadline is still a repeat
        ("failed", FUTURE, {"error": "boom"}, 409),
        ("queued", FUTURE, {"retry_at": FUTURE}, 409),  # it failed and waits for its retry
        ("queued", NOW, {"retry_at": FUTURE}, 410),  # it timed out and waits for its retry
        ("timed_out", NOW, {}, 410),
        ("running", PAST, {}, 410),  # past its deadline, before an upkeep ended it
        ("skipped", FUTURE, {}, 409),
    ],
)
def test_an_attempt_that_is_over_answers_409_or_410(
    status: str, deadline: datetime, extra: dict[str, Any], code: int | None
) -> None:
    answer = Jobs._standing(row(status, deadline, **extra))
    assert (answer.status if answer else None) == code
    if answer is not None:
        assert answer.body["status"] == status and answer.body["error"]
        if "output" in extra:
            assert answer.body["output"] == extra["output"]
