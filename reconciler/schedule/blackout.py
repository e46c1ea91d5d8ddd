"""Blackout windows (SPEC §6), pure: a stored blackout calendar as elapsed intervals, the blocked span
around an instant (overlapping or touching windows of every named calendar merged), and a schedule whose
occurrences in a blocked span are skipped or deferred to its end.

A window that opens at a cron occurrence lasts `duration` of real time, whatever DST does meanwhile; a
fixed window is [from, until) of local times in the calendar's zone.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.schedule.base import FLOOR, HORIZON, QUIET, Fire, Schedule, TriggerError
from reconciler.schedule.cron import CronSchedule, cron_overlap
from reconciler.schedule.walltime import resolve_window_time
from reconciler.spec.calendar import duration_seconds
from reconciler.spec.trigger import CronTrigger

TICK = timedelta(microseconds=1)
# Windows merged into one blocked span before it is taken as never ending (each step moves at least the
# time between two openings of a window's cron: a minute's cron blocked 1,000 minutes in a row, a daily one
# for 1,000 days).
MAX_CHAIN = 1000
# Blocked spans, each holding an occurrence, walked in a row before a schedule is taken as never firing again.
MAX_BLOCKED = 10_000


class Repeating:
    """Windows opening at each occurrence of a cron (in the calendar's zone), each `length` long.

    The openings around the instants asked about are computed once and kept (`CACHED` days on each side, at
    most `MAX_CACHED` of them): the engine asks about one occurrence after another, each a bisection then. A
    cron with more openings than that is asked directly (two steps of croniter per question)."""

    CACHED = timedelta(days=7)
    MAX_CACHED = 2000

    def __init__(self, opens: Schedule, length: timedelta) -> None:
        self.opens = opens
        self.length = length
        self._low: datetime | None = None  # every opening in [_low, _high] is in _known
        self._high: datetime | None = None
        self._known: list[datetime] = []
        self._dense = False

    def _within(self, low: datetime, high: datetime) -> list[datetime] | None:
        """The openings in (low, high], ascending; None when there are more than MAX_CACHED around them."""
        if self._low is None or self._high is None or not (self._low < low and high <= self._high):
            if self._dense:
                return None
            start, stop = low - self.CACHED, high + self.CACHED
            found: list[datetime] = []
            cursor = self.opens.next_fire_time(start)
            while cursor is not None and cursor <= stop:
                if len(found) >= self.MAX_CACHED:  # a cron this dense is asked directly from now on
                    self._dense = True
                    return None
                found.append(cursor)
                cursor = self.opens.next_fire_time(cursor)
            self._low, self._high, self._known = start, stop, found
        return self._known[bisect_right(self._known, low) : bisect_right(self._known, high)]

    def end(self, moment: datetime) -> datetime | None:
        """The latest end of this rule's windows that contain `moment`, or None when none does."""
        within = self._within(moment - self.length, moment)
        if within is None:  # too many openings to keep: ask the cron
            latest = self.opens.previous_fire_time(moment + TICK)
            return latest + self.length if latest is not None and moment < latest + self.length else None
        return within[-1] + self.length if within else None

    def start(self, moment: datetime) -> datetime | None:
        """The earliest start of this rule's windows that contain `moment`, or None when none does."""
        within = self._within(moment - self.length, moment)
        if within is None:
            earliest = self.opens.next_fire_time(moment - self.length)
            return earliest if earliest is not None and earliest <= moment else None
        return within[0] if within else None


@dataclass(frozen=True)
class Blackout:
    """One blackout calendar: fixed ranges and repeating windows, as instants."""

    name: str
    fixed: tuple[tuple[datetime, datetime], ...]
    repeating: tuple[Repeating, ...]

    @classmethod
    def stored(cls, name: str, data: Mapping[str, Any]) -> Blackout:
        """From a calendar's normalized spec (raises TriggerError for a local time DST makes ambiguous)."""
        zone = ZoneInfo(data.get("timezone", "UTC"))
        fixed: list[tuple[datetime, datetime]] = []
        repeating: list[Repeating] = []
        for index, window in enumerate(data["window"]):
            if "cron" in window:
                trigger = CronTrigger(kind="cron", expr=window["cron"])
                overlap = cron_overlap(trigger.fields)  # the rules of a task's cron, so a window opens where it would
                opens = CronSchedule(trigger.fields, zone=zone, gap="shift", overlap=overlap, start=None, end=None)
                repeating.append(Repeating(opens, timedelta(seconds=duration_seconds(window["duration"]))))
            else:
                key = f"window.{index}"
                start = resolve_window_time(_when(window["from"]), zone, f"{key}.from")
                end = resolve_window_time(_when(window["until"]), zone, f"{key}.until")
                if end <= start:  # offsets can put an until written later than from at an earlier instant
                    instants = f"{end.isoformat()} is not after {start.isoformat()}"
                    raise TriggerError(f"{key}.until", f"until must be after from ({instants}); move it later")
                fixed.append((start, end))
        return cls(name, tuple(fixed), tuple(repeating))

    def end(self, moment: datetime) -> datetime | None:
        """The latest end of this calendar's windows that contain `moment`, or None when none does."""
        ends = [end for start, end in self.fixed if start <= moment < end]
        ends += [end for rule in self.repeating if (end := rule.end(moment)) is not None]
        return max(ends, default=None)

    def start(self, moment: datetime) -> datetime | None:
        """The earliest start of this calendar's windows that contain `moment`, or None when none does."""
        starts = [start for start, end in self.fixed if start <= moment < end]
        starts += [start for rule in self.repeating if (start := rule.start(moment)) is not None]
        return min(starts, default=None)


def _when(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value if "T" in text else datetime(value.year, value.month, value.day)


@dataclass(frozen=True)
class Span:
    """A blocked span [start, end): windows merged where they overlap or touch; `name` is a calendar whose
    window holds the instant it was asked about."""

    start: datetime
    end: datetime
    name: str


@dataclass(frozen=True)
class Blackouts:
    """The blackout calendars a task names."""

    calendars: tuple[Blackout, ...]

    def touches_fixed(self, span: Span) -> bool:
        """Whether a fixed window overlaps `span`."""
        return any(start < span.end and span.start < end for c in self.calendars for start, end in c.fixed)

    def _end(self, moment: datetime) -> datetime | None:
        return max((end for c in self.calendars if (end := c.end(moment)) is not None), default=None)

    def _start(self, moment: datetime) -> datetime | None:
        return min((start for c in self.calendars if (start := c.start(moment)) is not None), default=None)

    def span(self, moment: datetime) -> Span | None:
        """The blocked span holding `moment`, or None when no window does. One longer than MAX_CHAIN windows
        in a row reaches FLOOR or HORIZON (it never ends)."""
        ends = [(end, c.name) for c in self.calendars if (end := c.end(moment)) is not None]
        if not ends:
            return None
        end, name = max(ends)
        for _ in range(MAX_CHAIN):  # a window holding the end (it touches or overlaps) carries the span on
            further = self._end(end) if end < HORIZON else None
            if further is None:
                break
            end = further
        else:
            end = HORIZON
        start = self._start(moment)
        assert start is not None
        for _ in range(MAX_CHAIN):
            earlier = self._start(start - TICK) if start > FLOOR else None
            if earlier is None:
                break
            start = earlier
        else:
            start = FLOOR
        return Span(max(start, FLOOR), min(end, HORIZON), name)


class Blocked:
    """A walk over blocked occurrences, one span after another. Past MAX_BLOCKED spans in a row, or QUIET of
    time since the first of a row in which no fixed window took part, the repeating windows (which repeat with
    their crons) are taken to block every later occurrence too."""

    def __init__(self, blackouts: Blackouts) -> None:
        self.blackouts = blackouts
        self.count = 0
        self.since: datetime | None = None

    def endless(self, at: datetime, span: Span) -> bool:
        """Count the blocked occurrence `at` (in `span`): whether to give up."""
        self.count += 1
        if self.blackouts.touches_fixed(span):
            self.since = None
        elif self.since is None:
            self.since = at
        return self.count > MAX_BLOCKED or (self.since is not None and abs(at - self.since) > QUIET)


class WithBlackouts:
    """A schedule whose occurrences in a blocked span do not fire: skipped, or (`defer`) one run at the span's
    end for all of them. A deferred run that lands where the schedule fires anyway is that occurrence."""

    def __init__(self, inner: Schedule, blackouts: Blackouts, defer: bool) -> None:
        self.inner = inner
        self.blackouts = blackouts
        self.defer = defer

    def _has_occurrence(self, span: Span) -> bool:
        found = self.inner.next_fire_time(span.start - TICK)
        return found is not None and found < span.end

    def _deferred(self, span: Span) -> Fire | None:
        if span.end >= HORIZON:
            return None
        return Fire(span.end, rule=f"deferred: blackout {span.name} ended")

    def next_fire(self, after: datetime) -> Fire | None:
        cursor = after
        around = self.blackouts.span(after)
        if around is not None:
            if self.defer and self._has_occurrence(around):
                return self._deferred(around)
            cursor = max(cursor, around.end - TICK)
        blocked = Blocked(self.blackouts)
        while True:
            fire = self.inner.next_fire(cursor)
            if fire is None:
                return None
            span = self.blackouts.span(fire.at)
            if span is None:
                return fire
            if self.defer:
                return self._deferred(span)
            if blocked.endless(fire.at, span):
                return None
            cursor = span.end - TICK

    def next_fire_time(self, after: datetime) -> datetime | None:
        fire = self.next_fire(after)
        return fire.at if fire else None

    def previous_fire_time(self, before: datetime) -> datetime | None:
        cursor = before
        blocked = Blocked(self.blackouts)
        while True:
            found = self.inner.previous_fire_time(cursor)
            if found is None:
                return None
            span = self.blackouts.span(found)
            if span is None:
                return found
            if self.defer and span.end < before:
                return span.end
            if span.start <= FLOOR or blocked.endless(found, span):
                return None
            cursor = span.start


def blackouts_of(stored: Sequence[tuple[str, Mapping[str, Any]]]) -> Blackouts:
    """The named blackout calendars from their stored specs, in the task's order."""
    return Blackouts(tuple(Blackout.stored(name, data) for name, data in stored))
