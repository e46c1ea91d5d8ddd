"""Calendars in a plan: the diff of `calendars.d/` against `scheduler.calendars` for one source, what a change
of a calendar does to the tasks that name it (they are retimed), and apply's writes (in the plan's transaction)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.db import apply_queries
from reconciler.db.rows import Conn
from reconciler.files.calendars import Calendar, holidays_version
from reconciler.reconcile.diff import FieldDiff, Op, StoredRow, diff_declared


class CalendarRow(StoredRow):
    """A row of scheduler.calendars."""


@dataclass
class CalendarChange:
    op: Op  # create | update | delete
    name: str
    fields: list[FieldDiff] = field(default_factory=list)
    calendar: Calendar | None = None
    before: dict[str, Any] | None = None  # the stored spec (update, delete)

    @property
    def after(self) -> dict[str, Any] | None:
        return self.calendar.normalized if self.calendar is not None else None


async def calendar_rows(conn: Conn) -> list[CalendarRow]:
    return [CalendarRow.from_row(row) for row in await apply_queries.calendars_all(conn)]


def diff_calendars(desired: Mapping[str, Calendar], rows: list[CalendarRow], source: str) -> list[CalendarChange]:
    """What apply does to this source's calendars: create, update (a file's change, or new holiday data of the
    package, or the years resolved moving on), delete (unchanged ones are left out)."""
    return [CalendarChange(*change) for change in diff_declared(desired, rows, source)]


def version(calendar: Mapping[str, Any] | None) -> str | None:
    """A short digest of a calendar as a task stores it: the same calendar, the same text."""
    if calendar is None:
        return None
    text = json.dumps(calendar, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:12]


def calendar_fields(stored: Mapping[str, Any] | None, desired: Mapping[str, Any] | None) -> list[FieldDiff]:
    """The calendars a task names whose applied version differs from the files': `calendars.NAME` old → new
    (a digest of each; the calendar's own change shows what changed in it)."""
    stored, desired = stored or {}, desired or {}
    return [
        FieldDiff(f"calendars.{name}", version(stored.get(name)), version(desired.get(name)))
        for name in sorted({*stored, *desired})
        if stored.get(name) != desired.get(name)
    ]


async def write_calendars(conn: Conn, changes: list[CalendarChange], source: str) -> None:
    """The calendar changes of a plan, in apply's transaction (the tasks that name them are written after)."""
    for change in changes:
        if change.op == "delete":
            await apply_queries.calendar_delete(conn, source=source, name=change.name)
            continue
        assert change.calendar is not None
        await apply_queries.calendar_upsert(
            conn,
            source=source,
            name=change.name,
            spec=change.calendar.canonical,
            spec_hash=change.calendar.spec_hash,
            holidays_version=holidays_version() if change.calendar.spec.kind == "business_days" else None,
        )
