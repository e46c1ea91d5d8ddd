"""Occurrences a task's calendars take away, with the reason (SPEC §6): the trigger's occurrences on days that
are not business days, and those in a blackout. Excluded occurrences are not runs; `next`, `explain`, the plan
and the dashboard list them so that nobody has to wonder where a run went.

No I/O and no clock: every function takes the span it reasons about.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reconciler.schedule.base import Schedule
from reconciler.schedule.blackout import WithBlackouts
from reconciler.schedule.business import OnBusinessDays

MAX_EXCLUDED = 100  # listed per task and span
# Occurrences of the trigger counted per span before the count stops (then a lower bound: `exact` is False);
# each costs a step of the trigger (~40 µs), so this bounds a count to a few seconds whatever the span.
MAX_COUNTED = 100_000


@dataclass(frozen=True, order=True)
class Excluded:
    """An occurrence the calendars took away (or moved): when the trigger had it, and why."""

    at: datetime
    reason: str


@dataclass(frozen=True)
class ExcludedSpan:
    """What the calendars take away in a span: the first `limit` of them, oldest first (`listed`), and how many
    there are in the whole span (`total`; at least that many when `exact` is False: the count stopped at
    MAX_COUNTED occurrences)."""

    listed: list[Excluded]
    total: int
    exact: bool = True

    @property
    def unlisted(self) -> int:
        """How many of them `listed` leaves out."""
        return self.total - len(self.listed)


MOVED = {"next": "moved to the next business day", "previous": "moved to the previous business day"}
NOWHERE = "skipped: no business day within 365 days to move to"


def excluded_between(schedule: Schedule, after: datetime, until: datetime, limit: int = MAX_EXCLUDED) -> list[Excluded]:
    """The trigger's occurrences in (after, until] that do not fire as such, oldest first, at most `limit`: on
    a day that is not a business day (`holiday: Labor Day (us)`, `weekend (us)`; moved ones say where to) and in
    a blackout (`blackout: year-end-freeze`). The first `limit` of the whole span, found without counting the
    rest (see excluded_span)."""
    return excluded_span(schedule, after, until, limit, counted=0).listed


def excluded_span(
    schedule: Schedule, after: datetime, until: datetime, limit: int = MAX_EXCLUDED, counted: int = MAX_COUNTED
) -> ExcludedSpan:
    """The occurrences in (after, until] that the calendars take away: the first `limit` listed with their
    reasons, all of them counted (up to `counted` occurrences of the trigger looked at per calendar kind; 0:
    none past the listed ones)."""
    blackouts = schedule if isinstance(schedule, WithBlackouts) else None
    days = blackouts.inner if blackouts is not None else schedule
    found: list[Excluded] = []
    total, exact = 0, True
    if isinstance(days, OnBusinessDays):
        listed, count, whole = _off_days(days, after, until, limit, counted)
        found, total, exact = listed, count, whole
    if blackouts is not None:
        listed, count, whole = _blocked(blackouts, days, after, until, limit, counted)
        found, total, exact = found + listed, total + count, exact and whole
    return ExcludedSpan(sorted(found)[:limit], total, exact)


def _off_days(
    days: OnBusinessDays, after: datetime, until: datetime, limit: int, counted: int
) -> tuple[list[Excluded], int, bool]:
    """The trigger's occurrences on days that are not business days: the first `limit`, the count, whether whole."""
    found: list[Excluded] = []
    total = looked = 0
    cursor = after
    while (fire := days.inner.next_fire(cursor)) is not None and fire.at <= until:
        looked += 1
        if looked > counted and (counted or len(found) >= limit):
            return found, total, False
        day = fire.at.astimezone(days.zone).date()
        reason = days.days.reason(day)
        if reason is not None:
            total += 1
            if len(found) < limit:
                if days.move in MOVED:
                    reason += f"; {MOVED[days.move] if days.target(day) is not None else NOWHERE}"
                found.append(Excluded(fire.at, reason))
        cursor = fire.at
    return found, total, True


def _blocked(
    blackouts: WithBlackouts, days: Schedule, after: datetime, until: datetime, limit: int, counted: int
) -> tuple[list[Excluded], int, bool]:
    """The occurrences in a blackout: one span computed per blocked span (not per occurrence); past `limit`
    listed, those of a span are only counted."""
    found: list[Excluded] = []
    total = looked = 0
    cursor = after
    span = None
    while (fire := days.next_fire(cursor)) is not None and fire.at <= until:
        looked += 1
        if looked > counted and (counted or len(found) >= limit):
            return found, total, False
        cursor = fire.at
        if span is None or not span.start <= fire.at < span.end:
            span = blackouts.blackouts.span(fire.at)
            if span is None:
                continue
        total += 1
        if len(found) < limit:
            found.append(Excluded(fire.at, f"blackout: {blackouts.blackouts.holder(fire.at) or span.name}"))
    return found, total, True


def blackout_now(schedule: Schedule, at: datetime) -> tuple[str, datetime] | None:
    """The blackout holding `at`: a calendar's name and when the blocked span ends; None when none does."""
    if not isinstance(schedule, WithBlackouts):
        return None
    span = schedule.blackouts.span(at)
    return None if span is None else (span.name, span.end)
