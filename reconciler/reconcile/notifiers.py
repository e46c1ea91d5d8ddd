"""Notifiers in a plan: the diff of `notifiers.d/` against `scheduler.notifiers` for one source, and apply's
writes (in the plan's transaction)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.db import apply_queries
from reconciler.db.rows import Conn
from reconciler.files.notifiers import Notifier
from reconciler.reconcile.diff import FieldDiff, Op, StoredRow, diff_declared


class NotifierRow(StoredRow):
    """A row of scheduler.notifiers."""


@dataclass
class NotifierChange:
    op: Op  # create | update | delete
    name: str
    fields: list[FieldDiff] = field(default_factory=list)
    notifier: Notifier | None = None
    before: dict[str, Any] | None = None  # the stored spec (update, delete)

    @property
    def after(self) -> dict[str, Any] | None:
        return self.notifier.normalized if self.notifier is not None else None


async def notifier_rows(conn: Conn) -> list[NotifierRow]:
    return [NotifierRow.from_row(row) for row in await apply_queries.notifiers_all(conn)]


def diff_notifiers(desired: Mapping[str, Notifier], rows: list[NotifierRow], source: str) -> list[NotifierChange]:
    """What apply does to this source's notifiers: create, update, delete (unchanged ones are left out)."""
    return [NotifierChange(*change) for change in diff_declared(desired, rows, source)]


async def write_notifiers(conn: Conn, changes: list[NotifierChange], source: str) -> None:
    """The notifier changes of a plan, in apply's transaction; a deleted notifier's pending events end with it."""
    for change in changes:
        if change.op == "delete":
            await apply_queries.notifier_delete(conn, source=source, name=change.name)
            await apply_queries.notifications_end_deleted(conn, source=source, name=change.name)
        else:
            assert change.notifier is not None
            params = {
                "source": source,
                "name": change.name,
                "spec": change.notifier.canonical,
                "spec_hash": change.notifier.spec_hash,
            }
            await apply_queries.notifier_upsert(conn, **params)
