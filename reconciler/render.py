"""Renderings for people and machines: `next` listings (plans are added by the reconciler)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from reconciler.loader import Task
from reconciler.triggers import Fire


def describe_trigger(task: Task) -> str:
    """A plain-English description of a task's schedule."""
    trigger = task.spec.trigger
    if trigger.kind == "cron":
        try:
            from cron_descriptor import get_description

            text = str(get_description(" ".join(trigger.fields)))
        except Exception:  # cron-descriptor rejects some valid croniter syntax; fall back to the raw text
            text = f"cron {trigger.expr}"
        return f"{text} ({task.spec.timezone})"
    if trigger.kind == "interval":
        return f"every {trigger.period_seconds} seconds of elapsed time"
    if trigger.kind == "calendar":
        times = ", ".join(t.strftime("%H:%M") for t in trigger.times)
        unit = trigger.unit if trigger.every > 1 else trigger.unit.rstrip("s")
        every = f"every {trigger.every} {unit}" if trigger.every > 1 else f"every {unit}"
        return f"{every} at {times} from {trigger.start_at} ({task.spec.timezone})"
    return f"once at {trigger.at} ({task.spec.timezone})"


def fire_line(fire: Fire, zone: ZoneInfo) -> str:
    """`2026-12-03 02:30:00 CET (+01:00)  2026-12-03T01:30:00Z  [DST: …]`."""
    local = fire.at.astimezone(zone)
    utc = fire.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = f"{local.strftime('%Y-%m-%d %H:%M:%S %Z')} ({local.strftime('%z')[:3]}:{local.strftime('%z')[3:]})  {utc}"
    return f"{text}  [DST: {fire.note}]" if fire.note else text


def next_text(rows: list[tuple[Task, list[Fire]]]) -> str:
    out: list[str] = []
    for task, fires in rows:
        zone = ZoneInfo(task.spec.timezone)
        state = "" if task.spec.enabled else "  (disabled)"
        out.append(f"{task.id}  — {describe_trigger(task)}{state}")
        if not fires:
            out.append("  no further occurrences")
        out.extend(f"  {fire_line(fire, zone)}" for fire in fires)
    return "\n".join(out)


def next_json(rows: list[tuple[Task, list[Fire]]]) -> str:
    data = [
        {
            "id": task.id,
            "fire_times": [f.at.astimezone(ZoneInfo(task.spec.timezone)).isoformat() for f in fires],
            "dst": [f"{f.at.astimezone(UTC).isoformat()}: {f.note}" for f in fires if f.note],
        }
        for task, fires in rows
    ]
    return json.dumps(data, indent=2)


def iso(moment: datetime | None) -> str | None:
    """ISO text of an aware datetime (UTC), or None."""
    return moment.astimezone(UTC).isoformat() if moment else None
