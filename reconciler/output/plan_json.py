"""A plan as JSON (format_version 2, docs/reconcile.md "Plan json"): what `plan --format json` prints and
`plan --out` saves for `apply PLANFILE`. Every value from a file or the database is masked."""

from __future__ import annotations

import json
from typing import Any

from reconciler.clock import utc_iso
from reconciler.output.masking import mask_path, mask_spec, mask_text
from reconciler.reconcile.plan import FORMAT_VERSION, Change, Plan
from reconciler.reconcile.retime import Retimed


def _masked(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    return mask_spec(spec) if spec is not None else None


def change_dict(change: Change) -> dict[str, object]:
    writes = change.writes or change.drift
    row = change.row
    live = {**row.spec, "enabled": row.enabled, "timezone": row.timezone} if writes and row is not None else None
    before = _masked(live)
    after = _masked(change.task.normalized) if writes and change.task is not None and change.op != "delete" else None
    excluded = change.preview.excluded
    return {
        "op": change.op,
        "id": change.id,
        "moved_from": change.moved_from,
        "fields": [
            {"path": f.path, "old": mask_path(f.path, f.old), "new": mask_path(f.path, f.new)} for f in change.fields
        ],
        "before": before,
        "after": after,
        "drift": change.drift,
        "drift_fields": [{"path": f.path, "live": f.old, "desired": f.new} for f in change.drift_fields],
        "next_fire_times": [utc_iso(t) for t in change.next_fire_times],
        "warnings": change.warnings,
        **({"excluded": [{"at": utc_iso(e.at), "reason": e.reason} for e in excluded]} if excluded else {}),
        **({"occurrences": retimed_dict(change.preview.retimed)} if change.preview.retimed else {}),
    }


def retimed_dict(found: Retimed) -> dict[str, object]:
    """A retimed task's occurrences gained and lost in (since, until]: counts, and the first few of each."""
    return {
        "since": utc_iso(found.since),
        "until": utc_iso(found.until),
        "complete": found.complete,
        "before": found.before,
        "after": found.after,
        "added": found.added,
        "removed": found.removed,
        "first_added": [utc_iso(at) for at in found.first_added],
        "first_removed": [utc_iso(at) for at in found.first_removed],
    }


def plan_dict(plan: Plan) -> dict[str, object]:
    """The json plan, format_version 2 (docs/reconcile.md, "Plan json")."""
    live = plan.live
    out: dict[str, object] = {
        "format_version": FORMAT_VERSION,
        "source": plan.source,
        "refused": plan.refused,
        "warnings": plan.warnings,
        "schema_missing": plan.schema_missing,
        "live_revision": {"revision": live.revision, "applied_at": utc_iso(live.applied_at)} if live else None,
        "changes": [change_dict(c) for c in plan.changes],
        "summary": plan.summary,
        "plan_digest": plan.digest,
        "state_fingerprint": plan.state_fingerprint,
        "files_fingerprint": plan.files_fingerprint,
    }
    if plan.paused:  # only then, as notifiers: a plan of tasks none of which is paused reads as before
        out["paused"] = [
            {
                "id": p["task_id"],
                "paused_by": p["paused_by"],
                "reason": p["reason"],
                "paused_at": utc_iso(p["paused_at"]),
                "paused_until": utc_iso(p["paused_until"]) if p["paused_until"] else None,
            }
            for p in plan.paused
        ]
    for found in plan.changed_kinds:  # only then: a plan of tasks alone reads as before
        out[f"{found.kind.name}s"] = [
            {
                "op": c.op,
                "name": c.name,
                "fields": [
                    {"path": f.path, "old": mask_path(f.path, f.old), "new": mask_path(f.path, f.new)} for f in c.fields
                ],
                "before": _masked(c.before),
                "after": _masked(c.after),
                "summary": mask_text(found.kind.summary(c.after or c.before or {})),
            }
            for c in found.changes
        ]
    return out


def plan_json(plan: Plan) -> str:
    return json.dumps(plan_dict(plan), indent=2, ensure_ascii=False)
