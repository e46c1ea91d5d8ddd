"""The queries of `plan` and `apply`, typed: reading what the files were, writing tasks, notifiers and
the audit row (one function per named statement of queries.sql)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TypedDict, cast

from psycopg.types.json import Jsonb

from reconciler.db.rows import Conn
from reconciler.db.store import Store


class LiveRow(TypedDict):
    revision: str | None
    applied_at: datetime


class UnchangedRow(TypedDict):
    id: str
    digest: str
    spec_hash: str
    enabled: bool
    timezone: str
    moved_from: str | None


async def applies_live(conn: Conn, *, source: str) -> list[LiveRow]:
    """The live revision of `source` (its newest apply's); none before its first apply."""
    return cast(list[LiveRow], await Store.fetch(conn, "applies_live", {"source": source}))


async def tasks_seal(conn: Conn, *, digests: Mapping[str, str]) -> int:
    """Store the file digests ({id: digest}) on the rows equal to their files that lack it."""
    return await Store.execute(conn, "tasks_seal", {"digests": Store.jsonb(dict(digests))})


async def tasks_unchanged(conn: Conn, *, digests: Jsonb) -> list[UnchangedRow]:
    """What the files of these digests (a jsonb {id: digest}) parsed to when applied, where still bound."""
    return cast(list[UnchangedRow], await Store.fetch(conn, "tasks_unchanged", {"digests": digests}))


async def tasks_lock(conn: Conn, *, ids: Sequence[str]) -> int:
    """Lock the task rows `ids` (sorted) for the apply's transaction."""
    return await Store.execute(conn, "tasks_lock", {"ids": list(ids)})


async def notify_state_reset(conn: Conn, *, ids: Sequence[str]) -> int:
    return await Store.execute(conn, "notify_state_reset", {"ids": list(ids)})


async def applies_insert(
    conn: Conn,
    *,
    source: str,
    revision: str | None,
    author: str | None,
    message: str | None,
    reference: str | None,
    now: datetime,
    counts: Jsonb,
    changes: Jsonb,
    plan_digest: str,
) -> int:
    """The row of one apply (`counts` and `changes` as jsonb); its id."""
    rows = await Store.fetch(
        conn,
        "applies_insert",
        {
            "source": source,
            "revision": revision,
            "author": author,
            "message": message,
            "reference": reference,
            "now": now,
            "counts": counts,
            "changes": changes,
            "plan_digest": plan_digest,
        },
    )
    applied: int = rows[0]["id"]
    return applied


async def notifications_end_deleted(conn: Conn, *, source: str, name: str) -> int:
    """A deleted notifier's pending notifications end (failed) now."""
    return await Store.execute(conn, "notifications_end_deleted", {"source": source, "name": name})
