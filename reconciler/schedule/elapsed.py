"""The kinds that DST does not touch: an interval of elapsed time, and a single instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reconciler.schedule.base import EPOCH, HORIZON, Fire, end_from, require_aware, start_from, within_horizon


class IntervalSchedule:
    """Elapsed time: anchor + k·every; DST does not shift it."""

    def __init__(self, period: timedelta, anchor: datetime | None, end: datetime | None) -> None:
        self.period = period
        self.anchor = anchor
        self.end = end

    def next_fire(self, after: datetime) -> Fire | None:
        bounded = start_from(after)
        if bounded is None:
            return None
        anchor = self.anchor or EPOCH
        at = anchor if bounded < anchor else anchor + ((bounded - anchor) // self.period + 1) * self.period
        if self.end is not None and at >= self.end:
            return None
        return within_horizon(Fire(at.astimezone(UTC)))

    def next_fire_time(self, after: datetime) -> datetime | None:
        fire = self.next_fire(after)
        return fire.at if fire else None

    def previous_fire_time(self, before: datetime) -> datetime | None:
        """anchor + k·every for the largest k with that instant strictly before `before` (arithmetic)."""
        bounded = end_from(before, self.end)
        anchor = self.anchor or EPOCH
        if bounded is None or bounded <= anchor:
            return None
        steps = -((anchor - bounded) // self.period)  # ceil((before - anchor) / every)
        return (anchor + (steps - 1) * self.period).astimezone(UTC)


class OnceSchedule:
    """A single instant."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def next_fire(self, after: datetime) -> Fire | None:
        require_aware(after)
        return within_horizon(Fire(self.at)) if self.at > after else None

    def next_fire_time(self, after: datetime) -> datetime | None:
        fire = self.next_fire(after)
        return fire.at if fire else None

    def previous_fire_time(self, before: datetime) -> datetime | None:
        require_aware(before)
        return self.at if self.at < before and self.at < HORIZON else None
