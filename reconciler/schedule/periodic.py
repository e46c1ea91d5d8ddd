"""What a cron's own period tells, pure: whether repeating blackout windows block every instant for ever, and
the period (a day, a week) after which a cron's occurrences and windows repeat.

A cron whose day of month and month are `*` (its day of week plain, or `*`) repeats every week of local wall
time, every day when its day of week is `*` too. Its windows' union is then a set of minutes of that week, and
if that set is the whole week, every instant is blocked, in every week to come: decided from at most a week of
minutes as bits of one integer, whatever the number of windows and however often they open.

In a zone with DST, a window's local length differs from its elapsed `duration` by at most the shifts it
spans, and an opening in a gap fires later: a window is taken as `DST_MARGIN` shorter at each end, so the
answer "blocked for ever" stays true (it may miss a union that is, and the walk then decides). No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import croniter

from reconciler.schedule.base import DST_MARGIN

DAY_MINUTES = 24 * 60
WEEK_MINUTES = 7 * DAY_MINUTES
MARGIN_MINUTES = int(DST_MARGIN.total_seconds()) // 60


@dataclass(frozen=True)
class Cron:
    """A cron's fields in a zone: what the period reasoning needs of a window's opening or a task's trigger."""

    fields: tuple[str, ...]
    zone: ZoneInfo


def fixed_offset(zone: ZoneInfo) -> bool:
    """Whether `zone` keeps one UTC offset for ever (UTC and the `Etc/` zones): its local time is UTC shifted."""
    return zone.key == "UTC" or zone.key.startswith("Etc/")


@lru_cache(maxsize=4096)
def _parsed(fields: tuple[str, ...]) -> tuple[int, frozenset[int] | None] | None:
    """(the day's opening minutes as bits, the weekdays it opens on with 0 = Monday, None = every day), or None
    when the cron does not repeat weekly (a day of month or a month named; `L`, `W`, `#`, `?`)."""
    _, _, day, month, weekday = fields
    if day != "*" or month != "*" or any(mark in weekday.upper() for mark in "LW#?"):
        return None
    walker = croniter(" ".join(fields), day_or=True)
    if walker.nth_weekday_of_month:
        return None
    minutes, hours, _, _, weekdays = walker.expanded
    per_hour = 0
    for value in range(60) if minutes == ["*"] else minutes:
        per_hour |= 1 << int(value)
    bits = 0
    for value in range(24) if hours == ["*"] else hours:
        bits |= per_hour << (60 * int(value))
    days = None if weekdays == ["*"] else frozenset((int(value) - 1) % 7 for value in weekdays)
    return bits, days


def period_minutes(cron: Cron) -> int | None:
    """The period, in minutes of UTC, after which the cron's occurrences repeat (a day or a week), or None when
    they do not repeat so (a day of month or month named, or a zone with DST)."""
    parsed = _parsed(cron.fields)
    if parsed is None or not fixed_offset(cron.zone):
        return None
    return DAY_MINUTES if parsed[1] is None else WEEK_MINUTES


def _dilated(bits: int, length: int) -> int:
    """`bits` with every set bit i widened to [i, i + length): O(log length) operations on one integer."""
    found, width, offset = 0, 1, 0
    while length:
        if length & 1:
            found |= bits << offset
            offset += width
        bits |= bits << width
        width *= 2
        length >>= 1
    return found


def _folded(bits: int, period: int) -> int:
    """`bits` wrapped onto [0, period): a minute past the period is that minute of the next one."""
    mask = (1 << period) - 1
    while bits >> period:
        bits = (bits & mask) | (bits >> period)
    return bits


def blocks_for_ever(windows: Iterable[tuple[Cron, int]]) -> bool:
    """Whether repeating windows (a cron opening each, lasting that many seconds) hold every instant for ever:
    those of one zone that repeat weekly, taken alone, cover every minute of the week (a sufficient test)."""
    by_zone: dict[ZoneInfo, list[tuple[int, frozenset[int] | None, int]]] = {}
    for cron, seconds in windows:
        parsed = _parsed(cron.fields)
        if parsed is None:
            continue
        length = seconds // 60 - (0 if fixed_offset(cron.zone) else 2 * MARGIN_MINUTES)
        if length > 0:
            by_zone.setdefault(cron.zone, []).append((*parsed, length))
    return any(_covers(rules) for rules in by_zone.values())


def _covers(rules: list[tuple[int, frozenset[int] | None, int]]) -> bool:
    period = DAY_MINUTES if all(days is None for _, days, _ in rules) else WEEK_MINUTES
    if any(length >= period for _, _, length in rules):
        return True
    week = 0
    for bits, days, length in rules:
        footprint = _dilated(bits, length)  # one day's windows, past its midnight when they last
        for index in range(period // DAY_MINUTES):
            if days is None or index in days:
                week |= footprint << (index * DAY_MINUTES)
        week = _folded(week, period)
    return week == (1 << period) - 1
