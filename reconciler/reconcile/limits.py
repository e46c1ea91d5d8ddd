"""Limits in a plan: the diff of `limits.d/` against `scheduler.limits` for one source, and apply's writes (in
the plan's transaction, before the tasks that name them)."""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.db import apply_queries
from reconciler.db.rows import Conn
from reconciler.files.limits import Limit
from reconciler.reconcile.diff import ItemChange, StoredRow, diff_declared


class LimitRow(StoredRow):
    """A row of scheduler.limits (its spec; the numbers and the bucket are the engines')."""


class LimitChange(ItemChange[Limit]):
    """What apply does to one limit of the source."""

    @property
    def limit(self) -> Limit | None:
        return self.item


async def limit_rows(conn: Conn) -> list[LimitRow]:
    return [LimitRow.from_row(row) for row in await apply_queries.limits_all(conn)]


def diff_limits(desired: Mapping[str, Limit], rows: list[LimitRow], source: str) -> list[LimitChange]:
    """What apply does to this source's limits: create, update, delete (unchanged ones are left out)."""
    return [LimitChange(*change) for change in diff_declared(desired, rows, source)]


async def write_limits(conn: Conn, changes: list[LimitChange], source: str) -> None:
    """The limit changes of a plan, in apply's transaction: a changed limit keeps its bucket's tokens (at most
    its new burst), so an apply never hands out a burst the limit would not have allowed."""
    for change in changes:
        limit = change.limit
        if limit is None:  # deleted
            await apply_queries.limit_delete(conn, source=source, name=change.name)
            continue
        await apply_queries.limit_upsert(
            conn,
            max_in_flight=limit.spec.max_in_flight,
            rate_per_second=limit.spec.rate_per_second,
            burst=limit.spec.bucket,  # the burst, else the rate rounded up (None: no rate)
            name=change.name,
            source=source,
            spec=limit.canonical,
            spec_hash=limit.spec_hash,
        )
