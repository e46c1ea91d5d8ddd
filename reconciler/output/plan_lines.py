"""What a plan's renderings share (plan_text, plan_markdown, plan_json): the marks of each operation, what a change
of a task does (its target, policy, next fire times and warnings), a declared kind's changes as lines (each kind
saying its own summary and the lines it words its own way), and the summary line.

Every value taken from a file or the database is masked (masking.py) and escaped for its medium: control
characters become visible escapes.
"""

from __future__ import annotations

import json
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.clock import utc_text, when_text
from reconciler.output.masking import mask_path, mask_text
from reconciler.output.text import excluded_lines, safe
from reconciler.reconcile.diff import FieldDiff, ItemChange
from reconciler.reconcile.plan import Change, KindChanges, Plan
from reconciler.reconcile.retime import Retimed
from reconciler.spec.target import target_line
from reconciler.spec.task import Policy

SYMBOLS = {"create": "+", "update": "~", "delete": "-", "move": ">", "noop": " "}
COLOURS = {"create": "32", "update": "33", "delete": "31", "move": "36", "drift": "35"}
# In a ```diff block GitHub colours lines that start with + (green), - (red) and ! (orange).
DIFF_MARKS = {"create": "+", "delete": "-", "update": "!", "move": "!"}
EMOJI = {"create": "🟢", "update": "🟡", "move": "🔵", "delete": "🔴", "drift": "🟣", "noop": "⚪"}
POLICY_DEFAULTS = Policy().model_dump(mode="json")


def value_text(path: str, value: object) -> str:
    """A field's value in a plan: masked, as JSON, `(absent)` when it has none."""
    return "(absent)" if value is None else json.dumps(mask_path(path, value), ensure_ascii=False)


def target_summary(spec: dict[str, Any]) -> str:
    """A task's target in one line, masked: `POST https://host/path (auth bearer; headers A, B; …)`."""
    found = spec.get("target")
    return mask_text(target_line(found if isinstance(found, dict) else {}))


def policy_summary(spec: dict[str, Any]) -> str | None:
    """The policy values that differ from the defaults, or None."""
    policy = spec.get("policy")
    if not isinstance(policy, dict):
        return None
    changed = [f"{k} = {json.dumps(v)}" for k, v in sorted(policy.items()) if POLICY_DEFAULTS.get(k) != v]
    return ", ".join(changed) or None


def _spec_lines(spec: dict[str, Any]) -> list[str]:
    lines = [f"target: {target_summary(spec)}"]
    policy = policy_summary(spec)
    if policy:
        lines.append(f"policy: {policy}")
    if spec.get("enabled") is False:
        lines.append("enabled: false")
    return lines


def item_lines(found: KindChanges, change: ItemChange[Any], marks: dict[str, str]) -> list[str]:
    """One change of a declared kind: its head, then each changed field (`path: live → desired`, unless the kind
    words it its own way), and what the item is when created or deleted (the kind's summary)."""
    kind, mark = found.kind, marks[change.op]
    lines = [f"{mark} {kind.name} {change.name}"]
    for f in change.fields:
        own = kind.field_line(f.path, f.old, f.new)
        lines.append(
            f"{mark}     {own}"
            if own is not None
            else f"{mark}     {f.path}: {value_text(f.path, f.old)} → {value_text(f.path, f.new)}"
        )
    spec = change.after if change.op == "create" else change.before if change.op == "delete" else None
    if spec is not None:
        lines.append(f"{mark}     {mask_text(kind.summary(spec))}")
    return [safe(line) for line in lines]


def kind_lines(found: KindChanges, marks: dict[str, str]) -> list[str]:
    """Every change of one declared kind, as lines."""
    return [line for change in found.changes for line in item_lines(found, change, marks)]


def details(change: Change, zone: ZoneInfo) -> list[str]:
    """Lines about a change other than its field diffs: what it calls, when it fires, warnings."""
    lines: list[str] = []
    if change.op == "create" and change.task is not None:
        lines += _spec_lines(change.task.normalized)
    if change.op == "delete" and change.row is not None:
        lines += _spec_lines(change.row.spec)
    if change.description:
        lines.append(f"schedule: {change.description}")
    for moment in change.next_fire_times:
        lines.append(f"next: {when_text(moment, zone)}")
    lines += excluded_lines(change.preview.excluded, zone)
    lines += retimed_lines(change.preview.retimed, zone)
    lines += [f"warning: {w}" for w in change.warnings]
    return lines


def retimed_lines(found: Retimed | None, zone: ZoneInfo) -> list[str]:
    """`occurrences in the next 30 days: 2 added, 5 removed (22 → 19)`, then the first few of each."""
    if found is None:
        return []
    span = (
        f"the next {found.days} days"
        if found.complete
        else f"the {found.days} day(s) until {when_text(found.until, zone)} (a busy schedule: counted so far)"
    )
    if not found.added and not found.removed:
        return [f"occurrences in {span}: none added or removed ({found.before:,})"]
    if found.before and found.after and (found.added, found.removed) == (found.after, found.before):
        # every occurrence moved: the `next:` lines show the new ones
        return [f"occurrences in {span}: all {found.before:,} replaced by {found.after:,} new ones"]
    lines = [
        f"occurrences in {span}: {found.added:,} added, {found.removed:,} removed ({found.before:,} → {found.after:,})"
    ]
    for word, count, first in (
        ("added", found.added, found.first_added),
        ("removed", found.removed, found.first_removed),
    ):
        lines += [f"{word}: {when_text(at, zone)}" for at in first]
        lines += [f"{word}: … and {count - len(first):,} more"] if count > len(first) else []
    return lines


def drift_head(change: Change) -> str:
    verb = "removes" if change.op == "delete" else "restores"
    return f"drift {change.id}: the row was changed outside the reconciler; this apply {verb} it (live → desired)"


def diffs(change: Change) -> list[FieldDiff]:
    return [*change.drift_fields, *change.fields]


def change_head(change: Change) -> str:
    if change.op == "move":
        return f"move {change.moved_from} → {change.id}"
    return f"{change.op} {change.id}"


def zone_of(change: Change) -> ZoneInfo:
    return ZoneInfo(change.task.timezone if change.task is not None else "UTC")


def marked_as(change: Change) -> str:
    """How a change is marked: "drift" for an update that only restores a drifted row, else its op."""
    return "drift" if change.drift and change.op == "update" and not change.fields else change.op


def shown(plan: Plan) -> list[Change]:
    """The changes a plan shows: every write, and drift."""
    return [c for c in plan.changes if c.writes or c.drift]


def summary_line(plan: Plan) -> str:
    s = plan.summary
    text = (
        f"Plan: {s['create']} to create, {s['update']} to update, {s['move']} to move, "
        f"{s['delete']} to delete, {s['noop']} unchanged"
    )
    text += f", {s['drift']} drifted" if s["drift"] else ""
    text += f", {len(plan.paused)} paused" if plan.paused else ""  # a runtime state, not a change
    # Each kind only when it changes: the line of a plan of tasks alone is what it always was.
    for found in plan.changed_kinds:
        ops = [change.op for change in found.changes]
        text += f"; {found.kind.name}s: " + ", ".join(
            f"{ops.count(op)} to {op}" for op in ("create", "update", "delete")
        )
    return text + "."


def footer(plan: Plan) -> list[str]:
    out = []
    if plan.live is not None:
        out.append(f"live revision {plan.live.revision or '(none)'} (applied {utc_text(plan.live.applied_at)})")
    out.append(f"plan digest {plan.digest}")
    return out
