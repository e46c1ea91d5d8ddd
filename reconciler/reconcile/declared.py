"""The declared kinds stored whole in a plan and its apply (notifiers, calendars, limits and any kind registered
like them): each kind's stored rows read, and its changes written in apply's transaction. No kind is named here:
each says where it is stored and what else a write does (files/kinds.py, NamedKind)."""

from __future__ import annotations

from typing import Any

from reconciler.db import declared
from reconciler.db.rows import Conn
from reconciler.files.kinds import NamedKind
from reconciler.reconcile.diff import ItemChange, StoredRow


async def stored_rows(conn: Conn, kind: NamedKind[Any]) -> list[StoredRow]:
    """Every stored item of `kind`, of every source."""
    rows = await declared.stored_items(conn, table=kind.table, kind=kind.name)
    return [StoredRow.from_row(row) for row in rows]


async def write_changes(conn: Conn, kind: NamedKind[Any], changes: list[ItemChange[Any]], source: str) -> None:
    """One kind's changes of a plan, in apply's transaction."""
    for change in changes:
        if change.item is None:  # deleted
            await declared.item_delete(
                conn, table=kind.table, kind=kind.name, source=source, name=change.name, then=kind.on_delete
            )
            continue
        await declared.item_upsert(
            conn,
            table=kind.table,
            kind=kind.name,
            source=source,
            name=change.name,
            spec=change.item.canonical,
            spec_hash=change.item.spec_hash,
            columns=kind.columns(change.item),
            created=kind.created_columns(change.item) if change.op == "create" else {},
            then=kind.on_write,
        )
