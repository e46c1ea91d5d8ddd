"""Renderings for people and machines: `next` listings and plans (text, markdown, json)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from reconciler.loader import Task
from reconciler.models import TaskSpec
from reconciler.triggers import Fire

if TYPE_CHECKING:
    from reconciler.plan import Change, Plan


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


# ---------------------------------------------------------------- plans

SYMBOLS = {"create": "+", "update": "~", "delete": "-", "move": ">", "noop": " "}
COLOURS = {"create": "32", "update": "33", "delete": "31", "move": "36", "drift": "35"}


def _value(value: object) -> str:
    return "(absent)" if value is None else json.dumps(value, ensure_ascii=False)


def _change_lines(change: Change, zone_of: dict[str, str]) -> list[str]:
    head = f"{SYMBOLS[change.op]} {change.op} {change.id}"
    if change.op == "move":
        head = f"> move {change.moved_from} → {change.id}"
    lines = [head]
    if change.drift:
        lines.append(f"! drift {change.id}: the row was changed outside the reconciler; this apply restores it")
    lines.extend(f"    {f.path}: {_value(f.old)} → {_value(f.new)}" for f in change.fields)
    if change.description:
        lines.append(f"    schedule: {change.description}")
    zone = ZoneInfo(zone_of.get(change.id, "UTC"))
    for moment in change.next_fire_times:
        local = moment.astimezone(zone)
        lines.append(f"    next: {local.strftime('%Y-%m-%d %H:%M:%S %Z')}  ({iso(moment)})")
    lines.extend(f"    warning: {w}" for w in change.warnings)
    return lines


def _zones(plan: Plan) -> dict[str, str]:
    return {c.id: c.task.spec.timezone for c in plan.changes if c.task is not None}


def summary_line(plan: Plan) -> str:
    s = plan.summary
    text = (
        f"Plan: {s['create']} to create, {s['update']} to update, {s['move']} to move, "
        f"{s['delete']} to delete, {s['noop']} unchanged"
    )
    return text + (f", {s['drift']} drifted." if s["drift"] else ".")


def plan_text(plan: Plan, colour: bool = False) -> str:
    """Terraform-like text: one block per change, a summary line last."""
    zones = _zones(plan)
    out: list[str] = []
    for change in plan.changes:
        if not change.writes and not change.drift:
            continue
        block = _change_lines(change, zones)
        if colour:
            code = (
                COLOURS["drift"]
                if change.drift and change.op == "update" and not change.fields
                else COLOURS.get(change.op, "0")
            )
            block[0] = f"\x1b[{code}m{block[0]}\x1b[0m"
        out.extend(block)
    if not plan.has_changes:
        out.append("No changes. The database matches the task files.")
    out.append(summary_line(plan))
    return "\n".join(out)


def plan_markdown(plan: Plan) -> str:
    """The same content for a pull-request comment."""
    zones = _zones(plan)
    out = [f"### reconciler plan (source `{plan.source}`)", "", f"**{summary_line(plan)}**", ""]
    body: list[str] = []
    for change in plan.changes:
        if change.writes or change.drift:
            body.extend(_change_lines(change, zones))
    if body:
        out.extend(["```diff", *body, "```"])
    else:
        out.append("No changes. The database matches the task files.")
    out.append("")
    out.append(f"<sub>state fingerprint `{plan.state_fingerprint}`</sub>")
    return "\n".join(out)


def plan_dict(plan: Plan) -> dict[str, object]:
    """The SPEC's json plan, format_version 1."""
    return {
        "format_version": 1,
        "source": plan.source,
        "changes": [
            {
                "op": c.op,
                "id": c.id,
                "moved_from": c.moved_from,
                "fields": [{"path": f.path, "old": f.old, "new": f.new} for f in c.fields],
                "next_fire_times": [iso(t) for t in c.next_fire_times],
                "warnings": c.warnings,
                "drift": c.drift,
            }
            for c in plan.changes
        ],
        "summary": plan.summary,
        "state_fingerprint": plan.state_fingerprint,
        "files_fingerprint": plan.files_fingerprint,
    }


def plan_json(plan: Plan) -> str:
    return json.dumps(plan_dict(plan), indent=2, ensure_ascii=False)
