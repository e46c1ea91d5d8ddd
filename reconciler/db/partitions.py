"""Tables partitioned by time (schemata.toml `partition`): which partitions a table needs, which retention may
drop, and the DDL for each (pure; db/partition_store.py reads the catalog and runs it).

A partitioned table has no DEFAULT partition: its partitions cover every time from MINVALUE on, without a hole,
to at least `ahead` intervals past now. The lowest one is bounded by MINVALUE (`<table>_before_<day>`): an
occurrence older than every dated partition (a backfill of last year, a catch-up after a long outage, the rows of
a table converted from an unpartitioned one) still has a home. The others are named by their lower bound
(`<table>_p<day>`), one interval each from the day they start; a hole (engines down for a week) is covered by
one partition. Bounds are UTC midnights (for a `days` interval, counted from 1970-01-01).

A partition is created as a table of its own (`LIKE` the parent) and then attached: ATTACH takes SHARE UPDATE
EXCLUSIVE on the parent, which no claim's ROW EXCLUSIVE waits for, where CREATE TABLE … PARTITION OF takes
ACCESS EXCLUSIVE. Retention detaches CONCURRENTLY (two transactions of its own, never with a creation) and drops
the detached table.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from psycopg import sql

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
AHEAD = 3  # intervals past now the partitions cover after a maintenance pass (at least two)


@dataclass(frozen=True)
class Partitioning:
    """schemata.toml's `partition = { column = …, days = … }` of a table."""

    column: str
    days: int = 1

    @property
    def interval(self) -> timedelta:
        return timedelta(days=self.days)

    def floor(self, at: datetime) -> datetime:
        """The lower bound of the interval holding `at`."""
        return at - (at - EPOCH) % self.interval


@dataclass(frozen=True)
class Partition:
    """One partition as the catalog holds it: [lower, upper); lower None is MINVALUE."""

    name: str
    lower: datetime | None
    upper: datetime
    detaching: bool = False  # a DETACH … CONCURRENTLY of it was interrupted


@dataclass(frozen=True)
class Bound:
    """A partition to create: [lower, upper)."""

    table: str
    lower: datetime | None
    upper: datetime

    @property
    def name(self) -> str:
        if self.lower is None:
            return f"{self.table}_before_{self.upper:%Y%m%d}"
        return f"{self.table}_p{self.lower:%Y%m%d}"


def missing(table: str, parts: list[Partition], spec: Partitioning, now: datetime, ahead: int = AHEAD) -> list[Bound]:
    """The partitions to create so that `parts` cover MINVALUE to `ahead` intervals past `now` without a hole."""
    today = spec.floor(now)
    until = today + (ahead + 1) * spec.interval
    ordered = sorted(parts, key=lambda p: p.upper)
    if not ordered:
        return [Bound(table, None, today), *_every(table, spec, today, until)]
    out: list[Bound] = []
    if ordered[0].lower is not None:
        out.append(Bound(table, None, ordered[0].lower))
    for below, above in itertools.pairwise(ordered):
        if above.lower is not None and below.upper < above.lower:
            out.append(Bound(table, below.upper, above.lower))
    top = ordered[-1].upper
    if top < today:
        out.append(Bound(table, top, today))
        top = today
    return out + _every(table, spec, top, until)


def _every(table: str, spec: Partitioning, start: datetime, until: datetime) -> list[Bound]:
    """Partitions of one interval each from `start` (the first perhaps shorter, to align) to `until`."""
    out: list[Bound] = []
    while start < until:
        upper = spec.floor(start) + spec.interval
        out.append(Bound(table, start, upper))
        start = upper
    return out


def expired(parts: list[Partition], cutoff: datetime) -> list[Partition]:
    """The partitions wholly older than `cutoff`, oldest first: retention's candidates (each still checked for
    a run in flight or one that finished since the cut-off)."""
    return sorted((p for p in parts if p.upper <= cutoff), key=lambda p: p.upper)


def retirable(old: list[Partition], verdicts: dict[str, str]) -> list[Partition]:
    """Of `old` (expired's, oldest first), those retention drops, given each one's verdict: "keep" (a run in
    flight, or finished since the cut-off), "full" or "empty". A full one goes; an empty one only with the run of
    partitions from the bottom it belongs to, when that run holds more than one empty MINVALUE partition: the
    pass then covers the bottom again with one MINVALUE partition up to the first kept one, where dropping an
    empty partition in the middle would only have it made again to fill the hole."""
    out: list[Partition] = []
    bottom: list[Partition] = []  # the droppable run from the bottom, while unbroken
    broken = False
    for part in old:
        verdict = verdicts.get(part.name, "keep")
        if verdict == "keep":
            broken = True
        elif verdict == "full":
            (out if broken else bottom).append(part)
        elif not broken:
            bottom.append(part)
    if len(bottom) > 1 or any(verdicts.get(p.name) == "full" for p in bottom):
        out = bottom + out
    return out


def create(schema: str, parent: str, bound: Bound, indexes: list[sql.Composed]) -> list[sql.Composed]:
    """A partition made as a table of its own with `indexes` (the parent's, named after the partition: instant on
    an empty table, and ATTACH takes them for the parent's), then attached (see the module's docstring)."""
    return [
        sql.SQL("CREATE TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(
            sql.Identifier(schema, bound.name), sql.Identifier(schema, parent)
        ),
        *indexes,
        attach(schema, parent, Partition(bound.name, bound.lower, bound.upper)),
    ]


def index_name(parent: str, partition: str, index: str) -> str:
    """A partition's copy of the parent's index `index`: `runs_task_recent_idx` of runs_p20261207 is
    runs_p20261207_task_recent_idx (a plan names the index it reads)."""
    return f"{partition}_{index.removeprefix(parent + '_')}"


def attach(schema: str, parent: str, part: Partition) -> sql.Composed:
    """A table made a partition of `parent` (a new one, a converted table, or one retention put back)."""
    lower = sql.SQL("MINVALUE") if part.lower is None else sql.Literal(part.lower)
    return sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
        sql.Identifier(schema, parent), sql.Identifier(schema, part.name), lower, sql.Literal(part.upper)
    )


def detach(schema: str, parent: str, name: str, *, finalize: bool = False) -> sql.Composed:
    """DETACH … CONCURRENTLY (outside a transaction block), or FINALIZE of one that was interrupted."""
    how = "FINALIZE" if finalize else "CONCURRENTLY"
    return sql.SQL("ALTER TABLE {} DETACH PARTITION {} " + how).format(
        sql.Identifier(schema, parent), sql.Identifier(schema, name)
    )


def drop(schema: str, name: str) -> sql.Composed:
    return sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name))
