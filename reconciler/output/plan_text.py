"""A plan for a terminal: terraform-like symbols, one block per change, the verdict and a summary line last."""

from __future__ import annotations

from reconciler.output.plan_lines import (
    COLOURS,
    SYMBOLS,
    change_head,
    details,
    diffs,
    drift_head,
    kind_lines,
    marked_as,
    shown,
    summary_line,
    value_text,
    zone_of,
)
from reconciler.output.text import pause_line, safe
from reconciler.reconcile.plan import Change, Plan


def change_text(change: Change) -> list[str]:
    """One change for a terminal: terraform-like symbols, `path: live → desired`."""
    lines = [f"{SYMBOLS[change.op]} {change_head(change)}"]
    if change.drift:
        lines.append(f"! {drift_head(change)}")
    lines += [f"    {f.path}: {value_text(f.path, f.old)} → {value_text(f.path, f.new)}" for f in diffs(change)]
    lines += [f"    {line}" for line in details(change, zone_of(change))]
    return [safe(line) for line in lines]


def plan_text(plan: Plan, colour: bool = False) -> str:
    """Terraform-like text: one block per change, the verdict and a summary line last."""
    out: list[str] = []
    for change in shown(plan):
        block = change_text(change)
        if colour:
            code = COLOURS.get(marked_as(change), "0")
            block[0] = f"\x1b[{code}m{block[0]}\x1b[0m"
        out.extend(block)
    out += [line for found in plan.changed_kinds for line in kind_lines(found, SYMBOLS)]
    out += [f"\x1b[34m{line}\x1b[0m" if colour else line for line in map(pause_line, plan.paused)]
    if not plan.has_changes:
        out.append("No changes. The database matches the task files.")
    out += [safe(f"warning: {w}") for w in plan.warnings]
    out.append(summary_line(plan))
    out += [safe(f"refused: {r}") for r in plan.refused]
    if plan.refused:
        out.append("apply with these options would refuse this plan; nothing would be written.")
    return "\n".join(out)
