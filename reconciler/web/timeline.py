"""The timeline: every task's occurrences in a 24-hour span, by hour, with the zones' DST transitions (pure).

Hours are real (UTC) hours, labelled in the reader's zone: the repeated hour of a fall-back night
is two rows with two offsets (01:00 CEST, then 01:00 CET), the skipped hour of a spring-forward
night is no row, and every occurrence is in exactly one of them. The occurrences are the
schedule's own (`schedule.preview.fires_between`, the engine's next_fire), so the timeline,
`next` and the engine agree by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.clock import utc_iso
from reconciler.schedule.base import Schedule
from reconciler.schedule.preview import fires_between, transitions

SPAN = timedelta(hours=24)
MARKS_PER_TASK = 48  # beyond this many occurrences in the span, a task shows its first ones and "more"


@dataclass(frozen=True)
class Planned:
    """One task for the timeline: its id, zone name and compiled schedule."""

    id: str
    timezone: str
    schedule: Schedule


def _label(moment: datetime, zone: ZoneInfo) -> str:
    local = moment.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def timeline(tasks: Sequence[Planned], start: datetime, zone: ZoneInfo) -> dict[str, Any]:
    """The hours of (start, start + SPAN] with their occurrences, the DST transitions of the zones in
    play (the tasks' and the reader's) and the tasks cut at MARKS_PER_TASK; JSON-ready."""
    start = start.astimezone(UTC)
    end = start + SPAN
    first_hour = start.replace(minute=0, second=0, microsecond=0)
    hours: list[dict[str, Any]] = []
    index: dict[datetime, list[dict[str, Any]]] = {}
    moment = first_hour
    while moment <= end:
        fires: list[dict[str, Any]] = []
        index[moment] = fires
        hours.append({"start": utc_iso(moment), "label": _label(moment, zone), "fires": fires})
        moment += timedelta(hours=1)
    cut: list[dict[str, Any]] = []
    for task in tasks:
        task_zone = ZoneInfo(task.timezone)
        found, more = fires_between(task.schedule, start, end, MARKS_PER_TASK)
        for fire in found:
            local = fire.at.astimezone(task_zone)
            index[fire.at.replace(minute=0, second=0, microsecond=0)].append(
                {
                    "id": task.id,
                    "at": utc_iso(fire.at),
                    "local": f"{local:%H:%M:%S} {local.tzname()}",
                    "note": fire.note,
                }
            )
        if more:
            cut.append({"id": task.id, "shown": len(found)})
    for fires in index.values():
        fires.sort(key=lambda fire: (fire["at"], fire["id"]))
    zones = sorted({task.timezone for task in tasks} | {zone.key})
    changes = [
        {"zone": name, "at": utc_iso(at), "text": _transition_text(at, ZoneInfo(name))}
        for name in zones
        for at in transitions(ZoneInfo(name), first_hour - timedelta(hours=1), 2)
        if start < at <= end
    ]
    changes.sort(key=lambda change: (change["at"], change["zone"]))
    return {
        "from": utc_iso(start),
        "to": utc_iso(end),
        "zone": zone.key,
        "hours": hours,
        "transitions": changes,
        "cut": cut,
    }


def _transition_text(at: datetime, zone: ZoneInfo) -> str:
    """`clocks go back: 03:00 CEST becomes 02:00 CET`."""
    before, after = (at - timedelta(microseconds=1)).astimezone(zone), at.astimezone(zone)
    direction = "back" if (after.utcoffset() or timedelta()) < (before.utcoffset() or timedelta()) else "forward"
    shown_before = (before + timedelta(microseconds=1)).strftime("%H:%M")  # the instant of the change, old offset
    return f"clocks go {direction}: {shown_before} {before.tzname()} becomes {after:%H:%M} {after.tzname()}"
