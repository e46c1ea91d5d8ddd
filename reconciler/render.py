"""Renderings for people and machines: `next` listings and plans (text, markdown, json)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.loader import Task
from reconciler.models import TaskSpec
from reconciler.triggers import Fire


def describe_trigger(spec: TaskSpec) -> str:
    """A plain-English description of a task's schedule."""
    trigger = spec.trigger
    if trigger.kind == "cron":
        try:
            from cron_descriptor import get_description

            text = str(get_description(" ".join(trigger.fields)))
        except Exception:  # cron-descriptor rejects some valid croniter syntax; fall back to the raw text
            text = f"cron {trigger.expr}"
        return f"{text} ({spec.timezone})"
    if trigger.kind == "interval":
        return f"every {trigger.period_seconds} seconds of elapsed time"
    if trigger.kind == "calendar":
        times = ", ".join(t.strftime("%H:%M") for t in trigger.times)
        unit = trigger.unit if trigger.every > 1 else trigger.unit.rstrip("s")
        every = f"every {trigger.every} {unit}" if trigger.every > 1 else f"every {unit}"
        return f"{every} at {times} from {trigger.start_at} ({spec.timezone})"
    return f"once at {trigger.at} ({spec.timezone})"


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
        out.append(f"{task.id}  — {describe_trigger(task.spec)}{state}")
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


def json_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Database rows for `--format json`: datetimes as ISO text (UTC)."""
    return [{k: iso(v) if isinstance(v, datetime) else v for k, v in row.items()} for row in rows]


# ---------------------------------------------------------------- safe text

# C0 and C1 controls, DEL, and the bidi overrides that reorder what a terminal or browser shows.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe(text: str) -> str:
    """`text` with every control character as a visible escape (\\x1b, \\n): no raw ESC reaches a terminal."""
    return _UNSAFE.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def history_line(row: dict[str, Any]) -> str:
    """One apply for `reconciler history`."""
    counts = row["counts"] if isinstance(row["counts"], dict) else {}
    done = (
        ", ".join(f"{counts[k]} {k}d" if k != "drift" else f"{counts[k]} drifted" for k in counts if counts[k])
        or "no changes"
    )
    rev = row["revision"] or "(no revision)"
    who = f" by {row['author']}" if row["author"] else ""
    ref = f" [{row['reference']}]" if row["reference"] else ""
    msg = f": {row['message']}" if row["message"] else ""
    op = f" ({row['op']})" if row.get("op") else ""
    return safe(f"#{row['id']} {iso(row['applied_at'])} {row['source']} {rev}{who}{ref}{msg} — {done}{op}")
