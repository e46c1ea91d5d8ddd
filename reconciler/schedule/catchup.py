"""Catch-up: which due occurrences a claim at `now` decides, computed rather than walked (pure time).

After any downtime the claim costs the same few steps: with coalesce, the newest CATCHUP_CAP up to
`now`; without, the newest CATCHUP_CAP older than the misfire grace (recorded missed) and the oldest
CATCHUP_CAP within it. A schedule shared by many tasks (`SharedSchedule`) answers their common
questions once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from reconciler.schedule.base import Fire, Schedule
from reconciler.spec.task import Policy

CATCHUP_CAP = 100  # occurrences recorded per task per claim
TICK = timedelta(microseconds=1)  # `before` just after an instant: "at or before" it
# A claim is never exactly on time: this much late is on time whatever the grace (a grace of 0 would
# otherwise miss every occurrence, and page `missed` for each).
ON_TIME_SECONDS = 1.0


def due_occurrences(
    schedule: Schedule, first: datetime, now: datetime, policy: Policy, cap: int = CATCHUP_CAP
) -> tuple[list[datetime], datetime | None]:
    """The due occurrences a claim at `now` decides, oldest first, and the next occurrence to keep due.

    `first` is the task's due next_run_at. Computed, not walked, so after any downtime it costs the
    same few steps: with coalesce, the newest `cap` up to `now` (the latest fires, the others are
    coalesced into it); without, the newest `cap` older than the misfire grace (recorded missed) and
    the oldest `cap` within it (fired oldest first; the next one within the grace stays due for the
    next claim)."""
    following = schedule.next_fire_time(first)
    if following is None or following > now:
        return [first], following  # the usual claim: one occurrence due
    if policy.coalesce:
        return _newest(schedule, first, now + TICK, cap), schedule.next_fire_time(now)
    floor = now - timedelta(seconds=max(policy.misfire_grace_seconds, ON_TIME_SECONDS))
    missed: list[datetime] = []
    moment: datetime | None = first
    if first < floor:
        missed = _newest(schedule, first, floor, cap)
        moment = schedule.next_fire_time(floor - TICK)  # the oldest within the grace
    fired: list[datetime] = []
    while moment is not None and moment <= now and len(fired) < cap:
        fired.append(moment)
        moment = schedule.next_fire_time(moment)
    return missed + fired, moment


def _newest(schedule: Schedule, first: datetime, before: datetime, cap: int) -> list[datetime]:
    """The newest `cap` of `first` and the occurrences after it strictly before `before`, oldest first."""
    found: list[datetime] = []
    moment = schedule.previous_fire_time(before)
    while moment is not None and moment > first and len(found) < cap:
        found.append(moment)
        moment = schedule.previous_fire_time(moment)
    if len(found) < cap and first < before:
        found.append(first)
    return found[::-1]


class SharedSchedule:
    """One compiled schedule for every task with the same trigger, zone and DST rules, remembering its
    latest answers: a top-of-the-hour burst asks thousands of tasks' schedules the same two questions."""

    ANSWERS = CATCHUP_CAP + 2  # a catch-up's steps forward within the grace, for every task sharing it

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self._answers: dict[datetime, Fire | None] = {}
        self._before: dict[datetime, datetime | None] = {}

    def next_fire(self, after: datetime) -> Fire | None:
        if after in self._answers:
            return self._answers[after]
        if len(self._answers) >= self.ANSWERS:
            self._answers.clear()
        fire = self._answers[after] = self.schedule.next_fire(after)
        return fire

    def next_fire_time(self, after: datetime) -> datetime | None:
        fire = self.next_fire(after)
        return fire.at if fire else None

    def previous_fire_time(self, before: datetime) -> datetime | None:
        if before in self._before:
            return self._before[before]
        if len(self._before) >= CATCHUP_CAP + 2:  # one catch-up's steps back, for every task sharing it
            self._before.clear()
        found = self._before[before] = self.schedule.previous_fire_time(before)
        return found
