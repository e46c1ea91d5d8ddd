"""Wall time and instants, with the DST rules of SPEC §1: how a local time maps to instants (none in a
gap, two in an overlap), and the walker the wall-clock kinds (cron, calendar) share.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, timezone
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo

from reconciler.schedule.base import (
    DST_MARGIN,
    FLOOR,
    FLOOR_WALL,
    HORIZON_WALL,
    MAX_CANDIDATES,
    Fire,
    Gap,
    Overlap,
    TriggerError,
    end_from,
    start_from,
    within_horizon,
)
from reconciler.spec.values import WhenValue

# ---------------------------------------------------------------- local ↔ instant


@dataclass(frozen=True, slots=True)
class Resolved:
    """How a local wall time maps to instants: one, none (gap) or two (overlap)."""

    kind: Literal["normal", "gap", "overlap"]
    instants: tuple[datetime, ...]  # normal: 1; overlap: (first pass, second pass); gap: (instant after gap,)


def resolve_local(local: datetime, zone: ZoneInfo) -> Resolved:
    """Classify the naive wall time `local` in `zone`."""
    first = local.replace(tzinfo=zone, fold=0)
    second = local.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return Resolved("normal", (first.astimezone(UTC),))
    first_utc = first.astimezone(UTC)
    second_utc = second.astimezone(UTC)
    if first_utc.astimezone(zone).replace(tzinfo=None) == local:
        return Resolved("overlap", (min(first_utc, second_utc), max(first_utc, second_utc)))
    return Resolved("gap", (transition_between(min(first_utc, second_utc), max(first_utc, second_utc), zone),))


@lru_cache(maxsize=4096)
def transition_between(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """The first instant in (low, high] whose offset differs from low's (bisection to the second)."""
    before = low.astimezone(zone).utcoffset()
    lo, hi = low, high
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        mid = mid.replace(microsecond=0)
        if mid <= lo:
            mid = lo + timedelta(seconds=1)
        if mid.astimezone(zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi


def resolve_window_time(value: WhenValue, zone: ZoneInfo, key: str) -> datetime:
    """A task-file date-time (naive = local to the task's zone) as an aware instant.

    A nonexistent or ambiguous local time without an explicit offset is an error
    naming both candidate instants.
    """
    if not isinstance(value, datetime):
        value = datetime.combine(value, time())
    if value.tzinfo is not None:
        return value.astimezone(UTC)
    resolved = resolve_local(value, zone)
    if resolved.kind == "normal":
        return resolved.instants[0]
    options = []
    for fold in (0, 1):
        offset = value.replace(tzinfo=zone, fold=fold).utcoffset()
        assert offset is not None
        aware = value.replace(tzinfo=timezone(offset))
        options.append(f"{aware.isoformat()} ({aware.astimezone(UTC).strftime('%H:%M')} UTC)")
    shown = " or ".join(sorted(set(options)))
    what = "happens twice (DST overlap)" if resolved.kind == "overlap" else "does not exist (DST gap)"
    return_hint = f"write one of them with its offset, e.g. {options[0].split(' ')[0]}"
    raise TriggerError(key, f"{value.isoformat()} in {zone.key} {what}: it could mean {shown}; {return_hint}")


# ---------------------------------------------------------------- wall-clock walker


class WallClockSchedule:
    """Shared machinery of the wall-clock kinds (cron, calendar): DST gap/overlap rules."""

    def __init__(
        self,
        zone: ZoneInfo,
        gap: Gap,
        overlap: Overlap,
        start: datetime | None,
        end: datetime | None,
    ) -> None:
        self.zone = zone
        self.gap = gap
        self.overlap = overlap
        self.start = start
        self.end = end

    def local_candidates(self, after_local: datetime) -> Iterator[datetime]:
        """Naive local wall times matching the schedule, ascending, strictly after `after_local`."""
        raise NotImplementedError

    def local_candidates_before(self, before_local: datetime) -> Iterator[datetime]:
        """Naive local wall times matching the schedule, descending, strictly before `before_local`."""
        raise NotImplementedError

    def day_times(self) -> frozenset[time] | None:
        """Every wall time of day the schedule can have, when each day it fires has all of them (None: unknown)."""
        return None

    def _fires(self, local: datetime) -> list[Fire]:
        resolved = resolve_local(local, self.zone)
        if resolved.kind == "normal":
            return [Fire(resolved.instants[0])]
        wall = local.strftime("%Y-%m-%d %H:%M")
        if resolved.kind == "gap":
            if self.gap == "skip":
                return []
            shifted = resolved.instants[0].astimezone(self.zone)
            return [
                Fire(resolved.instants[0], f"{wall} does not exist (DST gap); fires at {shifted.strftime('%H:%M %Z')}")
            ]
        first, second = resolved.instants
        if self.overlap == "first":
            return [Fire(first, f"{wall} happens twice (DST overlap); fires on the first pass only")]
        if self.overlap == "last":
            return [Fire(second, f"{wall} happens twice (DST overlap); fires on the second pass only")]
        return [
            Fire(first, f"{wall} happens twice (DST overlap); fires on both passes, this is the first"),
            Fire(second, f"{wall} happens twice (DST overlap); fires on both passes, this is the second"),
        ]

    def _offsets(self, moment: datetime) -> tuple[timedelta, timedelta]:
        """The smallest and largest UTC offset of the zone within DST_MARGIN of `moment`."""
        before = (moment - DST_MARGIN).astimezone(self.zone).utcoffset()
        after = (moment + DST_MARGIN).astimezone(self.zone).utcoffset()
        assert before is not None and after is not None
        return (before, after) if before <= after else (after, before)

    def next_fire(self, after: datetime) -> Fire | None:
        """The first occurrence strictly after `after`, within the window."""
        bounded = start_from(after)
        if bounded is None:
            return None
        after = bounded
        if self.start is not None and after < self.start:
            after = self.start - timedelta(microseconds=1)
        # A wall time L fires at L - offset (or, in a gap, at the transition, which lies between
        # its two readings), so only L > after + the smallest nearby offset can fire after `after`.
        low, _ = self._offsets(after)
        origin = after.replace(tzinfo=None) + low
        best: Fire | None = None
        best_wall_bound: datetime | None = None
        for count, local in enumerate(self.local_candidates(origin)):
            if best_wall_bound is not None and local > best_wall_bound:
                break  # this and every later wall time fires after `best`
            if local > HORIZON_WALL:
                break  # fires past HORIZON; mapping it to an instant could overflow
            for fire in self._fires(local):
                if fire.at > after and (best is None or fire.at < best.at):
                    best = fire
            if best is not None and best_wall_bound is None:
                low, high = self._offsets(best.at)
                if low == high:
                    break  # no DST shift nearby: wall order is instant order
                # Later wall times can map earlier than this one by at most the DST shift.
                best_wall_bound = best.at.replace(tzinfo=None) + high
            if self.end is not None and local.replace(tzinfo=self.zone).astimezone(UTC) > self.end + DST_MARGIN:
                break
            if count >= MAX_CANDIDATES:
                break
        if best is None or (self.end is not None and best.at >= self.end):
            return None
        return within_horizon(best)

    def next_fire_time(self, after: datetime) -> datetime | None:
        """The first fire instant strictly after `after` (UTC), or None when exhausted."""
        fire = self.next_fire(after)
        return fire.at if fire else None

    def previous_fire(self, before: datetime) -> Fire | None:
        """The last occurrence strictly before `before`, within the window: next_fire's mirror, stepping
        back over matching wall times (a catch-up after any downtime costs a few steps, not one per
        missed occurrence)."""
        bounded = end_from(before, self.end)
        if bounded is None or (self.start is not None and bounded <= self.start):
            return None
        before = bounded
        # A wall time L fires at L - offset (or, in a gap, at the transition, which lies between its
        # two readings), so only L < before + the largest nearby offset can fire before `before`.
        _, high = self._offsets(before)
        origin = before.replace(tzinfo=None) + high
        best: Fire | None = None
        best_wall_bound: datetime | None = None
        for count, local in enumerate(self.local_candidates_before(origin)):
            if best_wall_bound is not None and local < best_wall_bound:
                break  # this and every earlier wall time fires before `best`
            if local < FLOOR_WALL:
                break
            for fire in self._fires(local):
                if fire.at < before and (best is None or fire.at > best.at):
                    best = fire
            if best is not None and best_wall_bound is None:
                low, high = self._offsets(best.at)
                if low == high:
                    break  # no DST shift nearby: wall order is instant order
                # Earlier wall times can map later than this one by at most the DST shift.
                best_wall_bound = best.at.replace(tzinfo=None) + low
            if self.start is not None and local.replace(tzinfo=self.zone).astimezone(UTC) < self.start - DST_MARGIN:
                break
            if count >= MAX_CANDIDATES:
                break
        if best is None or (self.start is not None and best.at < self.start) or best.at < FLOOR:
            return None
        return best

    def previous_fire_time(self, before: datetime) -> datetime | None:
        """The last fire instant strictly before `before` (UTC), or None."""
        fire = self.previous_fire(before)
        return fire.at if fire else None
