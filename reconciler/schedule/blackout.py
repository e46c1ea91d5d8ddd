"""Blackout windows (SPEC §6), pure: a stored blackout calendar as elapsed intervals, the blocked span
around an instant (overlapping or touching windows of every named calendar merged), and a schedule whose
occurrences in a blocked span are skipped or deferred to its end.

A window that opens at a cron occurrence lasts `duration` of real time, whatever DST does meanwhile; a
fixed window is [from, until) of local times in the calendar's zone.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property, lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.schedule.base import FLOOR, HORIZON, QUIET, Fire, Schedule, TriggerError
from reconciler.schedule.cron import CronSchedule, cron_overlap
from reconciler.schedule.periodic import WEEK_MINUTES, Cron, blocks_for_ever, period_minutes
from reconciler.schedule.walltime import resolve_window_time
from reconciler.spec.trigger import CronTrigger, duration_seconds

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

    def __init__(self, opens: Schedule, length: timedelta, cron: Cron | None = None) -> None:
        self.opens = opens
        self.length = length
        self.cron = cron  # its fields and zone: what tells whether the windows repeat weekly
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

    def holds(self, moment: datetime) -> bool:
        """Whether a window of this rule holds `moment`, asked of the cron directly (nothing cached)."""
        latest = self.opens.previous_fire_time(moment + TICK)
        return latest is not None and moment < latest + self.length

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
        """From a calendar's normalized spec (raises TriggerError for a local time DST makes ambiguous). One
        calendar that many tasks name is compiled once and shared (its windows' memo with it)."""
        return _stored(name, json.dumps(data, sort_keys=True, default=str))

    @classmethod
    def compiled(cls, name: str, data: Mapping[str, Any]) -> Blackout:
        """From a calendar's normalized spec, compiled anew."""
        zone = ZoneInfo(data.get("timezone", "UTC"))
        fixed: list[tuple[datetime, datetime]] = []
        repeating: list[Repeating] = []
        for index, window in enumerate(data["window"]):
            if "cron" in window:
                fields = CronTrigger(kind="cron", expr=window["cron"]).fields
                overlap = cron_overlap(fields)  # the rules of a task's cron, so a window opens where it would
                opens = CronSchedule(fields, zone=zone, gap="shift", overlap=overlap, start=None, end=None)
                length = timedelta(seconds=duration_seconds(window["duration"]))
                repeating.append(Repeating(opens, length, Cron(tuple(fields), zone)))
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


@lru_cache(maxsize=256)
def _stored(name: str, text: str) -> Blackout:
    return Blackout.compiled(name, json.loads(text))


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
    # The calendar and rule that last held an instant asked about (holder): asked first next time, since
    # the occurrences listed one after another mostly fall in the same window.
    recent: list[tuple[str, Repeating]] = field(default_factory=list, compare=False, repr=False)

    @cached_property
    def endless(self) -> bool:
        """Whether the repeating windows alone hold every instant for ever (decided from their crons' period:
        no walk, whatever their number)."""
        rules = [rule for c in self.calendars for rule in c.repeating]
        return blocks_for_ever((rule.cron, int(rule.length.total_seconds())) for rule in rules if rule.cron)

    @cached_property
    def period(self) -> timedelta | None:
        """The period after which every repeating window opens again at the same instant (a day or a week),
        or None when one does not repeat so (a day of month, a zone with DST)."""
        periods = [period_minutes(rule.cron) if rule.cron else None for c in self.calendars for rule in c.repeating]
        if None in periods:
            return None
        return timedelta(minutes=max((p for p in periods if p is not None), default=WEEK_MINUTES))

    @cached_property
    def fixed_end(self) -> datetime:
        """The end of the last fixed window (FLOOR when there is none): the windows repeat purely after it."""
        return max((end for c in self.calendars for _, end in c.fixed), default=FLOOR)

    def holder(self, moment: datetime) -> str | None:
        """The calendar whose window holding `moment` ends last (the span's name), or None when none holds it;
        when the windows block for ever, the first calendar that holds it (a few questions, not one per window)."""
        if self.endless:
            if self.recent and self.recent[0][1].holds(moment):
                return self.recent[0][0]
            for c in self.calendars:
                if any(start <= moment < end for start, end in c.fixed):
                    return c.name
                for rule in c.repeating:
                    if rule.holds(moment):
                        self.recent[:] = [(c.name, rule)]
                        return c.name
            return None
        last = self._last(moment)
        return None if last is None else last[1]

    def touches_fixed(self, span: Span) -> bool:
        """Whether a fixed window overlaps `span`."""
        return any(start < span.end and span.start < end for c in self.calendars for start, end in c.fixed)

    def _last(self, moment: datetime) -> tuple[datetime, str] | None:
        """The end of the window holding `moment` that ends last, and its calendar's name; None when none holds it."""
        return max(((end, c.name) for c in self.calendars if (end := c.end(moment)) is not None), default=None)

    def _end(self, moment: datetime) -> datetime | None:
        return max((end for c in self.calendars if (end := c.end(moment)) is not None), default=None)

    def _start(self, moment: datetime) -> datetime | None:
        return min((start for c in self.calendars if (start := c.start(moment)) is not None), default=None)

    def span(self, moment: datetime) -> Span | None:
        """The blocked span holding `moment`, or None when no window does. One longer than MAX_CHAIN windows
        in a row reaches FLOOR or HORIZON (it never ends)."""
        if self.endless:
            holder = self.holder(moment)
            return None if holder is None else Span(FLOOR, HORIZON, holder)
        last = self._last(moment)
        if last is None:
            return None
        end, name = last
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
    """A walk over blocked occurrences, one span after another. When the task's occurrences and the windows
    repeat with a period (`period`: a cron of a day or a week in a zone without DST), a forward walk that found
    every occurrence blocked for one whole period after the last fixed window knows that all later ones are.
    Otherwise, past MAX_BLOCKED spans in a row, or QUIET of time since the first of a row in which no fixed
    window took part, the repeating windows (which repeat with their crons) are taken to block every later
    occurrence too."""

    def __init__(self, blackouts: Blackouts, period: timedelta | None = None) -> None:
        self.blackouts = blackouts
        self.period = period
        self.count = 0
        self.since: datetime | None = None
        self.first: datetime | None = None  # the first blocked occurrence after every fixed window

    def endless(self, at: datetime, span: Span) -> bool:
        """Count the blocked occurrence `at` (in `span`): whether to give up."""
        self.count += 1
        if self.blackouts.touches_fixed(span):
            self.since = None
        elif self.since is None:
            self.since = at
        if self.period is not None and at >= self.blackouts.fixed_end:
            self.first = self.first or at
            if at - self.first >= self.period:  # a whole period of occurrences blocked: so is every later one
                return True
        return self.count > MAX_BLOCKED or (self.since is not None and abs(at - self.since) > QUIET)


class WithBlackouts:
    """A schedule whose occurrences in a blocked span do not fire: skipped, or (`defer`) one run at the span's
    end for all of them. A deferred run that lands where the schedule fires anyway is that occurrence."""

    def __init__(self, inner: Schedule, blackouts: Blackouts, defer: bool) -> None:
        self.inner = inner
        self.blackouts = blackouts
        self.defer = defer

    @cached_property
    def period(self) -> timedelta | None:
        """The period after which both the occurrences and the windows repeat, or None (see Blocked)."""
        inner = self.inner
        if not isinstance(inner, CronSchedule) or self.blackouts.period is None:
            return None
        own = period_minutes(Cron(tuple(inner.expr.split()), inner.zone))
        return None if own is None else max(self.blackouts.period, timedelta(minutes=own))

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
        blocked = Blocked(self.blackouts, self.period)
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
