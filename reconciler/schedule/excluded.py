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
from reconciler.schedule.preview import fires_between

MAX_EXCLUDED = 100  # listed per task and span


@dataclass(frozen=True, order=True)
class Excluded:
    """An occurrence the calendars took away (or moved): when the trigger had it, and why."""

    at: datetime
    reason: str


MOVED = {"next": "moved to the next business day", "previous": "moved to the previous business day"}
NOWHERE = "skipped: no business day within 365 days to move to"


def excluded_between(schedule: Schedule, after: datetime, until: datetime, limit: int = MAX_EXCLUDED) -> list[Excluded]:
    """The trigger's occurrences in (after, until] that do not fire as such, oldest first, at most `limit`:
    on a day that is not a business day (`holiday: Labor Day (us)`, `weekend (us)`; moved ones say where
    to) and in a blackout (`blackout: year-end-freeze`)."""
    found: list[Excluded] = []
    blackouts = schedule if isinstance(schedule, WithBlackouts) else None
    days = blackouts.inner if blackouts is not None else schedule
    if isinstance(days, OnBusinessDays):
        for fire in fires_between(days.inner, after, until, limit)[0]:
            day = fire.at.astimezone(days.zone).date()
            reason = days.days.reason(day)
            if reason is not None:
                if days.move in MOVED:
                    reason += f"; {MOVED[days.move] if days.target(day) is not None else NOWHERE}"
                found.append(Excluded(fire.at, reason))
    if blackouts is not None:
        for fire in fires_between(days, after, until, limit)[0]:
            span = blackouts.blackouts.span(fire.at)
            if span is not None:
                found.append(Excluded(fire.at, f"blackout: {span.name}"))
    return sorted(found)[:limit]


def blackout_now(schedule: Schedule, at: datetime) -> tuple[str, datetime] | None:
    """The blackout holding `at`: a calendar's name and when the blocked span ends; None when none does."""
    if not isinstance(schedule, WithBlackouts):
        return None
    span = schedule.blackouts.span(at)
    return None if span is None else (span.name, span.end)
