"""The queries of limits on the engine's path, typed: what a claim writes back to the limits it locked, and a
retry's token (one short transaction of its own)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TypedDict, cast

from reconciler.db.queries import LimitRow
from reconciler.db.rows import Conn
from reconciler.db.statements import Statement, pipelined
from reconciler.db.store import Store


class LimitHealthRow(TypedDict):
    source: str
    name: str
    in_flight: int
    tokens: float
    rate_per_second: float | None
    waiting: int  # tasks whose due occurrence waits for it
    delayed_total: int
    missed_total: int


async def limits_health(conn: Conn, *, now: datetime | None, sources: Sequence[str]) -> list[LimitHealthRow]:
    """Every limit of `sources` (none: every source) as the metrics show it."""
    params = {"now": now, "sources": list(sources)}
    return cast(list[LimitHealthRow], await Store.fetch(conn, "limits_health", params))


def limits_take(
    *,
    keys: Sequence[tuple[str, str]],
    tokens: Sequence[float],
    ats: Sequence[datetime],
    delayed: Sequence[int],
    missed: Sequence[int],
) -> Statement:
    """Write back the tokens left in each limit's bucket (as of `ats`) and add to its delayed and missed counters."""
    return Statement(
        "limits_take",
        {
            "sources": [source for source, _ in keys],
            "names": [name for _, name in keys],
            "tokens": list(tokens),
            "ats": list(ats),
            "delayed": list(delayed),
            "missed": list(missed),
        },
    )


async def limits_locked(conn: Conn, *, keys: Sequence[tuple[str, str]], at: datetime | None) -> list[LimitRow]:
    """Lock the limits `keys` (source, name) for the transaction and read them (see limits_read)."""
    groups = {"sources": [source for source, _ in keys], "names": [name for _, name in keys]}
    _, rows = await pipelined(
        conn, [Statement("limits_lock", groups), Statement("limits_read", {**groups, "now": at, "finished": []})]
    )
    return cast(list[LimitRow], rows)
