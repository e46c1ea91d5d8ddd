"""What every schedule shares: an occurrence (`Fire`), the `Schedule` protocol, the years occurrences
may fall in ([FLOOR, HORIZON)) and the bounds helpers that keep every computation inside them.

No I/O and no clock: every function takes the instant it reasons from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from reconciler.spec.values import MAX_YEAR, MIN_YEAR

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Occurrences exist only in [FLOOR, HORIZON): the years a task file may name (models.MIN_YEAR to
# MAX_YEAR), widened by two days for zone offsets, so no computation nears datetime's limits.
FLOOR = datetime(MIN_YEAR, 1, 1, tzinfo=UTC) - timedelta(days=2)
HORIZON = datetime(MAX_YEAR + 1, 1, 1, tzinfo=UTC) + timedelta(days=2)
HORIZON_WALL = HORIZON.replace(tzinfo=None) + timedelta(days=2)  # a wall time past it fires past HORIZON
FLOOR_WALL = FLOOR.replace(tzinfo=None) - timedelta(days=2)  # a wall time before it fires before FLOOR
# Wider than any DST shift in the tz database (2 h), so a walk started this far back
# sees the second pass of every repeated wall time.
DST_MARGIN = timedelta(hours=3)
# A schedule with no occurrence in this many local candidates is treated as exhausted
# (e.g. "0 0 30 2 *" never matches).
MAX_CANDIDATES = 200_000
# Past the last date a calendar lists, business days repeat week by week and blackout windows with their
# crons; a schedule that finds no occurrence free of them for this long after that (any weekday pattern of a
# cron repeats within 28 years) never will.
QUIET = timedelta(days=29 * 366)

Overlap = Literal["first", "last", "both"]
Gap = Literal["shift", "skip"]


@dataclass(frozen=True, slots=True)
class Fire:
    """One occurrence: the instant (UTC) and, when a DST rule moved or chose it, why (`note`); when a calendar
    put it there (a run deferred to the end of a blackout), why (`rule`)."""

    at: datetime
    note: str | None = None
    rule: str | None = None


class Schedule(Protocol):
    """A compiled trigger: the occurrence after an instant, and the one before it, each computed directly."""

    def next_fire(self, after: datetime) -> Fire | None: ...

    def next_fire_time(self, after: datetime) -> datetime | None: ...

    def previous_fire_time(self, before: datetime) -> datetime | None: ...


class TriggerError(ValueError):
    """A trigger that cannot be compiled; `key` is the dotted path in the task file."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def require_aware(after: datetime) -> None:
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("next_fire_time needs an aware datetime")


def start_from(after: datetime) -> datetime | None:
    """`after` in UTC and at least FLOOR; None when it is past HORIZON (nothing can follow)."""
    require_aware(after)
    if after >= HORIZON:  # compared before converting: astimezone could overflow out there
        return None
    return max(after, FLOOR).astimezone(UTC)


def within_horizon(fire: Fire | None) -> Fire | None:
    return fire if fire is not None and fire.at < HORIZON else None


def end_from(before: datetime, end: datetime | None) -> datetime | None:
    """`before` in UTC, at most HORIZON and the window's (exclusive) end; None when it is at or before
    FLOOR (nothing can precede it)."""
    require_aware(before)
    if before <= FLOOR:  # compared before converting: astimezone could overflow out there
        return None
    bounded = min(before, HORIZON).astimezone(UTC)
    return bounded if end is None else min(bounded, end)
