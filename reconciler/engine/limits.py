"""Limits in the claim: the buckets of the limits a claim's tasks name, read under their locks (limits_read), and
the fair share of their room between the tasks that want to start runs (pure, but for the statement written
back).

A run starts only when every limit its task names has room: fewer than max_in_flight of the limit's runs in
flight, and a token in its bucket. Room goes oldest first and fairly between tasks: each task in turn gets one
run started (tasks ordered by their runs in flight, fewest first, then by their oldest run), then each task its
second, and so on; a task whose turn finds a limit full gets no later turn in this claim, so its runs start in
order.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from reconciler.db import limit_queries
from reconciler.db.queries import LimitRow
from reconciler.db.statements import Statement, execute

LAST = datetime.max.replace(tzinfo=UTC)  # the order of a party that wants nothing (it is not served)
Key = tuple[str, str]  # (source, name): a limit is its source's, as a task is
T = TypeVar("T", bound=Hashable)


def names_of(value: Any) -> tuple[str, ...]:
    """The limit names a task's stored `policy.limits` holds (a hand edit may store anything: only strings count)."""
    if not isinstance(value, list):
        return ()
    return tuple(name for name in value if isinstance(name, str))


def keys_of(rows: Iterable[Mapping[str, Any]]) -> list[Key]:
    """The limits (source, name) the rows' tasks name, sorted (the order their locks are taken in)."""
    return sorted({(row["source"], name) for row in rows for name in names_of(row["limits"])})


@dataclass
class Bucket:
    """One limit as a claim holds it: its numbers, what is in flight, the tokens as of `at`, and what the claim did."""

    name: str
    max_in_flight: int | None
    rate: float | None
    in_flight: int
    tokens: float
    at: datetime
    started: int = 0
    delayed: int = 0  # occurrences this claim made wait (first time)
    missed: int = 0  # occurrences recorded missed after waiting

    @classmethod
    def of(cls, row: LimitRow) -> Bucket:
        return cls(
            row["name"],
            row["max_in_flight"],
            row["rate_per_second"],
            row["in_flight"],
            row["tokens"],
            row["at"],
        )

    @property
    def room(self) -> bool:
        """Whether one more run may start now."""
        if self.max_in_flight is not None and self.in_flight + self.started >= self.max_in_flight:
            return False
        return self.rate is None or self.tokens >= 1

    def take(self) -> None:
        self.started += 1
        if self.rate is not None:
            self.tokens -= 1

    @property
    def changed(self) -> bool:
        return (self.rate is not None and self.started > 0) or self.delayed > 0 or self.missed > 0


@dataclass(frozen=True)
class Taken:
    """A limit's bucket as a claim leaves it: its tokens as of `at`, and the occurrences it delayed and missed."""

    key: Key
    tokens: float
    at: datetime
    delayed: int
    missed: int


def taken_statement(taken: Sequence[Taken]) -> Statement | None:
    """The write-back of the buckets' tokens and counters (None: nothing to write)."""
    if not taken:
        return None
    return limit_queries.limits_take(
        keys=[t.key for t in taken],
        tokens=[t.tokens for t in taken],
        ats=[t.at for t in taken],
        delayed=[t.delayed for t in taken],
        missed=[t.missed for t in taken],
    )


class Gate:
    """The limits a claim locked; tasks naming none (or only limits that do not exist) always pass."""

    def __init__(self, rows: Sequence[LimitRow] = ()) -> None:
        self.buckets: dict[Key, Bucket] = {(row["source"], row["name"]): Bucket.of(row) for row in rows}

    def full(self, source: str, names: Iterable[str]) -> str | None:
        """The first of the limits `names` (of `source`) with no room, or None."""
        for name in names:
            bucket = self.buckets.get((source, name))
            if bucket is not None and not bucket.room:
                return name
        return None

    def admit(self, source: str, names: Sequence[str]) -> str | None:
        """Start one run counted against `names` if each has room (None), else the name of one that is full."""
        stopped = self.full(source, names)
        if stopped is None:
            for name in names:
                if (bucket := self.buckets.get((source, name))) is not None:
                    bucket.take()
        return stopped

    def count(self, source: str, name: str | None, *, delayed: int = 0, missed: int = 0) -> None:
        """Add to a limit's counters (a limit that no longer exists: nothing)."""
        bucket = self.buckets.get((source, name or ""))
        if bucket is not None:
            bucket.delayed += delayed
            bucket.missed += missed

    def share(
        self, wants: Mapping[T, tuple[str, Sequence[str], Sequence[datetime]]], busy: Mapping[T, int] | None = None
    ) -> dict[T, tuple[int, str | None]]:
        """The fair share: for each wanting party (a task: its source, the limits it names, the moments of the runs
        it wants to start, oldest first), how many of its runs start and the limit that stopped the rest (None
        when all start). `busy`: each party's runs in flight already; the turns go to the least busy first (then the
        oldest), so fairness holds across claims too: when a limit is saturated each claim has room for one run,
        and the task with fewest in flight gets it, not always the one with the oldest run."""
        busy = busy or {}
        order = sorted(wants, key=lambda party: (busy.get(party, 0), min(wants[party][2], default=LAST)))
        granted: dict[T, tuple[int, str | None]] = {party: (0, None) for party in wants}
        active = [party for party in order if wants[party][2]]
        turn = 0
        while active:
            still = []
            for party in active:
                source, names, moments = wants[party]
                stopped = self.admit(source, names)
                if stopped is not None:
                    granted[party] = (turn, stopped)
                    continue
                granted[party] = (turn + 1, None)
                if turn + 1 < len(moments):
                    still.append(party)
            active, turn = still, turn + 1
        return granted

    def changes(self) -> list[Taken]:
        """What the claim took from its limits and counted, to be written back (none: nothing changed)."""
        return [
            Taken(key, bucket.tokens, bucket.at, bucket.delayed, bucket.missed)
            for key, bucket in self.buckets.items()
            if bucket.changed
        ]

    @property
    def rated(self) -> set[Key]:
        """The limits with a rate: a run counted against one takes a token per request."""
        return {key for key, bucket in self.buckets.items() if bucket.rate is not None}


async def retry_token(conn: Any, keys: Sequence[Key]) -> float:
    """Before a retry of a run counted against limits with a rate (its slot in flight is its lease's already): take
    a token from each, in one transaction on `conn`. 0 when taken; else the seconds until each may have one."""
    gate = Gate(await limit_queries.limits_locked(conn, keys=keys, at=None))
    rated = [bucket for bucket in gate.buckets.values() if bucket.rate is not None]
    short = [(1 - bucket.tokens) / bucket.rate for bucket in rated if bucket.rate is not None and bucket.tokens < 1]
    if short:
        return max(short)
    for bucket in rated:
        bucket.take()
    statement = taken_statement(gate.changes())
    if statement is not None:
        await execute(conn, statement)
    return 0.0
