"""The rows the door hands out: a row as a dict, the connection type, and a task's row with its spec parsed on
first use."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, TypedDict

from psycopg import AsyncConnection

Row = dict[str, Any]
Conn = AsyncConnection[Row]


@dataclass(frozen=True)
class TaskRow:
    """One row of scheduler.tasks (spec parsed on first use)."""

    id: str
    source: str
    spec_text: str
    spec_hash: str
    enabled: bool
    timezone: str
    next_run_at: datetime | None
    version: str = ""
    tampered: bool | None = None  # None: no digest to compare (row not written by apply)
    calendars: dict[str, Any] | None = None  # the calendars the task names, as applied (see Task.bind)

    @cached_property
    def spec(self) -> dict[str, Any]:
        """The stored spec; one that is not a JSON object (edited by hand) shows as a single `spec` field."""
        parsed = json.loads(self.spec_text)
        return parsed if isinstance(parsed, dict) else {"spec": parsed}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TaskRow:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__ if name in row})


class RunHead(TypedDict):
    """The columns every read of a run row starts with."""

    id: int
    task_id: str
    scheduled_for: datetime
    kind: str
    status: str
    attempt: int
