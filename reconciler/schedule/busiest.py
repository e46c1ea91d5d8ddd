"""The busiest minute of a group of schedules: how many occurrences fall in each minute (UTC) of a span, and the
minute with most. What a limit's rate is measured against (reconcile/limit_rates.py).

No I/O and no clock: every function takes the span it counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from reconciler.schedule.base import Schedule
from reconciler.schedule.preview import fires_between


@dataclass(frozen=True)
class Busiest:
    """The minute (UTC, its first instant) with most occurrences, how many, and how many were counted in all. A
    schedule not counted whole (its cap, or the budget, was reached) may make the true busiest minute hold more,
    never fewer."""

    minute: datetime | None
    count: int
    counted: int


def busiest_minute(
    schedules: Iterable[tuple[Schedule, int]], start: datetime, end: datetime, per_schedule: int, budget: int
) -> Busiest:
    """The busiest minute of the occurrences in (start, end] of `schedules`, each (schedule, how many tasks share
    it): at most `per_schedule` occurrences of one schedule are counted, and at most `budget` in all."""
    minutes: Counter[datetime] = Counter()
    counted = 0
    for schedule, weight in schedules:
        if counted >= budget:
            break
        fires, _ = fires_between(schedule, start, end, min(per_schedule, budget - counted))
        counted += len(fires)
        for fire in fires:
            minutes[fire.at.replace(second=0, microsecond=0)] += weight
    if not minutes:
        return Busiest(None, 0, counted)
    minute, count = min(minutes.items(), key=lambda item: (-item[1], item[0]))  # the earliest of the busiest
    return Busiest(minute, count, counted)
