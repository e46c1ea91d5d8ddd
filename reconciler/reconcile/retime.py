"""What a retimed task's change does to its occurrences: the ones it gains and loses within a horizon (30 days
from the plan's `now`), walking the schedule as applied and the files' side by side. Pure: schedules in, counts out.

The walk is bounded: a task that fires every minute has 43,200 occurrences in 30 days, and a calendar change can
retime hundreds of tasks. Each schedule is walked for at most WALKED occurrences; past them the span counted ends
where both walks still agree on what they saw, and the result says so (`complete` False, `until` earlier).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from reconciler.schedule.base import Schedule
from reconciler.schedule.preview import fires_between
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.task import TaskSpec

HORIZON_DAYS = 30
WALKED = 2_000  # occurrences walked per schedule: 0.06 s for a minute's cron, 0.14 s on business days
SHOWN = 3  # occurrences listed of each side; the rest are counted


@dataclass(frozen=True)
class Retimed:
    """The occurrences in (since, until] that the new schedule adds and the old one loses: how many, and the first
    SHOWN of each; `before` and `after`, each schedule's count in that span. `complete` False: the span was cut
    short of the horizon to bound the walk."""

    since: datetime
    until: datetime
    added: int
    removed: int
    before: int
    after: int
    first_added: list[datetime] = field(default_factory=list)
    first_removed: list[datetime] = field(default_factory=list)
    complete: bool = True

    @property
    def days(self) -> int:
        """The span in whole days (the horizon's when complete)."""
        return max(1, round((self.until - self.since) / timedelta(days=1)))


def stored_schedule(spec: Mapping[str, Any], calendars: Mapping[str, Any] | None, enabled: bool) -> Schedule | None:
    """The schedule a task row holds (its stored spec with the calendars bound at its apply); None when it does not
    fire (disabled) or no longer validates (a hand edit: the engines fail its runs)."""
    if not enabled:
        return None
    try:
        return compile_schedule(TaskSpec.model_validate(spec), calendars or None)
    except ValueError:  # pydantic's ValidationError and TriggerError are both ValueErrors
        return None


def _walk(schedule: Schedule | None, since: datetime, until: datetime) -> tuple[list[datetime], datetime | None]:
    """The occurrences in (since, until], at most WALKED, and where the walk stopped short (None: it did not)."""
    if schedule is None:
        return [], None
    fires, more = fires_between(schedule, since, until, WALKED)
    return [fire.at for fire in fires], (fires[-1].at if more else None)


def retimed(old: Schedule | None, new: Schedule | None, now: datetime, days: int = HORIZON_DAYS) -> Retimed:
    """The occurrences `new` adds and `old` loses in the `days` after `now` (None: a schedule that does not fire)."""
    until = now + timedelta(days=days)
    before, cut_before = _walk(old, now, until)
    after, cut_after = _walk(new, now, until)
    cuts = [cut for cut in (cut_before, cut_after) if cut is not None]
    if cuts:  # both walks saw everything up to the earlier stop
        until = min(cuts)
        before = [at for at in before if at <= until]
        after = [at for at in after if at <= until]
    old_set, new_set = set(before), set(after)
    added = [at for at in after if at not in old_set]
    removed = [at for at in before if at not in new_set]
    return Retimed(
        now,
        until,
        len(added),
        len(removed),
        len(before),
        len(after),
        added[:SHOWN],
        removed[:SHOWN],
        complete=not cuts,
    )
