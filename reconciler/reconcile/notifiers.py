"""Notifiers in a plan: the diff of `notifiers.d/` against `scheduler.notifiers` for one source, the tasks'
subscriptions checked against it, and apply's writes (in the plan's transaction)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.db import apply_queries
from reconciler.db.store import Conn, Row, TaskRow
from reconciler.files.notifiers import Notifier, Notifiers, subscription_errors
from reconciler.files.tasks import Task
from reconciler.reconcile.plan import FieldDiff, Op, Plan, diff_fields


@dataclass(frozen=True)
class NotifierRow:
    source: str
    name: str
    spec: dict[str, Any]
    spec_hash: str

    @classmethod
    def from_row(cls, row: Row) -> NotifierRow:
        return cls(row["source"], row["name"], row["spec"], row["spec_hash"])


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
    stored = {row.name: row for row in rows if row.source == source}
    changes: list[NotifierChange] = []
    for name, notifier in desired.items():
        row = stored.get(name)
        if row is None:
            changes.append(NotifierChange("create", name, notifier=notifier))
        elif row.spec_hash != notifier.spec_hash:
            fields = diff_fields(row.spec, notifier.normalized)
            changes.append(NotifierChange("update", name, fields, notifier, row.spec))
    changes += [NotifierChange("delete", name, before=row.spec) for name, row in stored.items() if name not in desired]
    return sorted(changes, key=lambda c: c.name)


def attach_notifiers(
    plan: Plan, notifiers: Notifiers, stored: list[NotifierRow], tasks: list[Task], rows: list[TaskRow]
) -> Plan:
    """Add the notifier changes to `plan`, the unknown subscriptions to its conflicts, and the notifier
    rows to its state fingerprint (a saved plan is stale once they change)."""
    plan.notifiers = diff_notifiers(notifiers.by_name, stored, plan.source)
    stored_specs = {row.id: row.spec for row in rows}
    plan.conflicts += notifiers.errors + subscription_errors(tasks, stored_specs, notifiers)
    if stored:
        digest = hashlib.sha256(plan.state_fingerprint.encode())
        for row in sorted(stored, key=lambda r: (r.source, r.name)):
            digest.update(f"{row.source}\0{row.name}\0{row.spec_hash}\n".encode())
        plan.state_fingerprint = "sha256:" + digest.hexdigest()
    return plan


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
