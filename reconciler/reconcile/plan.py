"""Pure diff: (desired tasks, database rows) → changes with field-level diffs. No I/O."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from reconciler.db.operator_queries import PauseRow
from reconciler.db.rows import TaskRow
from reconciler.files.kinds import Named, NamedKind, spec_hash
from reconciler.files.problems import FileError
from reconciler.files.tasks import Task
from reconciler.reconcile.diff import FieldDiff, ItemChange, Op, StoredRow, diff_declared, diff_fields
from reconciler.reconcile.retime import Retimed, retimed, stored_schedule
from reconciler.reconcile.revision import LiveRevision
from reconciler.schedule.excluded import Excluded, excluded_between
from reconciler.schedule.preview import dst_warnings, never_fires, upcoming

FORMAT_VERSION = 2
# Keys whose change moves the schedule: next_run_at is recomputed from now.
RETIMING = (
    "trigger",
    "timezone",
    "policy.dst_gap",
    "policy.dst_overlap",
    "policy.blackouts",
    "policy.on_blackout",
    "calendars",  # a calendar the task names changed (see calendar_fields)
)


@dataclass(frozen=True)
class Preview:
    """What a created or retimed task does from now on: its next fire times, warnings, schedule in words."""

    next_fire_times: list[datetime]
    warnings: list[str]
    description: str | None
    excluded: list[Excluded] = field(default_factory=list)  # what its calendars take away until the last one
    retimed: Retimed | None = None  # a changed task's occurrences gained and lost in the coming days


NO_PREVIEW = Preview([], [], None)


@dataclass(frozen=True)
class KindChanges:
    """What a plan does to one declared kind stored whole: its changes (unchanged items left out)."""

    kind: NamedKind[Any]
    changes: list[ItemChange[Any]]


@dataclass
class Change:
    op: Op
    id: str
    moved_from: str | None = None
    fields: list[FieldDiff] = field(default_factory=list)
    drift: bool = False
    drift_fields: list[FieldDiff] = field(default_factory=list)  # columns that disagree with the stored spec
    retime: bool = False
    task: Task | None = None
    row: TaskRow | None = None
    # The plan's `now` for a created or retimed task. Its preview is computed when shown, not when
    # planned: an apply of 10,000 new files would otherwise spend most of its locked time on it.
    preview_from: datetime | None = None

    @property
    def writes(self) -> bool:
        return self.op != "noop"

    @cached_property
    def preview(self) -> Preview:
        if self.preview_from is None or self.task is None:
            return NO_PREVIEW
        found = schedule_preview(self.task, self.preview_from)
        row = self.row
        if row is None or self.op not in ("update", "move"):
            return found
        old = stored_schedule(row.spec, row.calendars, row.enabled)
        moved = retimed(old, self.task.schedule if self.task.enabled else None, self.preview_from)
        return replace(found, retimed=moved)

    @property
    def next_fire_times(self) -> list[datetime]:
        return self.preview.next_fire_times

    @property
    def warnings(self) -> list[str]:
        return self.preview.warnings

    @property
    def description(self) -> str | None:
        return self.preview.description


@dataclass
class Plan:
    source: str
    changes: list[Change]
    conflicts: list[FileError]
    state_fingerprint: str
    files_fingerprint: str
    pruned: bool = True
    refused: list[str] = field(default_factory=list)  # why `apply` with the same options would refuse
    warnings: list[str] = field(default_factory=list)
    live: LiveRevision | None = None
    schema_missing: bool = False
    # What the plan does to each declared kind it was given (attach_declared), in the registry's order.
    declared: list[KindChanges] = field(default_factory=list)
    # The source's tasks paused at runtime (`reconciler pause`): shown, never changed by an apply.
    paused: list[PauseRow] = field(default_factory=list)
    planned_at: datetime | None = None  # the plan's `now`: what "from now" was (make_plan)

    def count(self, op: str) -> int:
        return sum(1 for c in self.changes if c.op == op)

    @property
    def summary(self) -> dict[str, int]:
        counts = {op: self.count(op) for op in ("create", "update", "delete", "move", "noop")}
        counts["drift"] = sum(1 for c in self.changes if c.drift)
        return counts

    @property
    def has_changes(self) -> bool:
        return any(c.writes for c in self.changes) or any(kind.changes for kind in self.declared)

    def changes_of(self, kind: NamedKind[Any]) -> list[ItemChange[Any]]:
        """What the plan does to `kind` (nothing when it was not given)."""
        return next((found.changes for found in self.declared if found.kind.name == kind.name), [])

    @property
    def changed_kinds(self) -> list[KindChanges]:
        """The declared kinds the plan changes, in the registry's order."""
        return [found for found in self.declared if found.changes]

    @property
    def digest(self) -> str:
        """What this plan does, as a hash: the same for a pull request's plan and the apply that carries it out."""
        shown = [
            [c.op, c.id, c.moved_from, c.drift, [[f.path, f.old, f.new] for f in c.fields]]
            for c in self.changes
            if c.writes
        ]
        described: list[Any] = [self.source, shown]
        for found in self.changed_kinds:  # absent otherwise: a plan of tasks alone keeps its digest
            changes = [[c.op, c.name, c.after, [[f.path, f.old, f.new] for f in c.fields]] for c in found.changes]
            described.append([found.kind.name, changes])
        text = json.dumps(described, sort_keys=True, default=str, ensure_ascii=True)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def state_fingerprint(rows: list[TaskRow]) -> str:
    """What a plan read: every row's id, owner, stored hash and row version (xmin: any write changes it).

    next_run_at is left out on purpose: the engine advances it all the time, and a saved
    plan must stay valid across fires.
    """
    digest = hashlib.sha256()
    for row in sorted(rows, key=lambda r: r.id):
        digest.update(f"{row.id}\0{row.source}\0{row.spec_hash}\0{row.enabled}\0{row.timezone}\n".encode())
        digest.update(row.version.encode())
    return "sha256:" + digest.hexdigest()


def files_fingerprint(tasks: list[Task]) -> str:
    """What a plan was made from: every file's id and spec hash (and the calendars bound to it, if any)."""
    found = sorted((t.id, t.spec_hash, *([version(t.calendars)] if t.calendars else [])) for t in tasks)
    digest = hashlib.sha256(json.dumps(found).encode())
    return "sha256:" + digest.hexdigest()


def is_drifted(row: TaskRow) -> bool:
    """The row was changed outside the reconciler: its spec no longer matches its hash or columns."""
    edited = row.tampered if row.tampered is not None else spec_hash(row.spec) != row.spec_hash
    return edited or bool(column_drift(row))


def column_drift(row: TaskRow, desired: dict[str, Any] | None = None) -> list[FieldDiff]:
    """Columns that disagree with a spec (the stored one by default): live value → the spec's value."""
    spec = row.spec if desired is None else desired
    wanted = {"enabled": spec.get("enabled", True), "timezone": spec.get("timezone", "UTC")}
    live = {"enabled": row.enabled, "timezone": row.timezone}
    return [FieldDiff(f"{name} (column)", live[name], wanted[name]) for name in wanted if live[name] != wanted[name]]


def _unchanged(row: TaskRow, task: Task) -> bool:
    """The common no-op, decided without hashing the row (or parsing an unchanged file): same stored hash,
    same content, same columns."""
    return (
        row.tampered is False
        and row.spec_hash == task.spec_hash
        and row.enabled == task.enabled
        and row.timezone == task.timezone
        and row.calendars == task.calendars
    )


def schedule_preview(task: Task, now: datetime) -> Preview:
    """The next three fire times after `now`, the DST and never-fires warnings, and the schedule in words."""
    from reconciler.schedule.describe import describe_trigger

    warnings = dst_warnings(task.schedule, task.spec.timezone, now)
    never = never_fires(task.spec, task.schedule, now)
    if never:  # a warning, not a refusal: a once in the past may be kept on purpose
        warnings.append(f"{never[0]}: {never[1]}")
    fires = upcoming(task.schedule, now, 3)
    excluded = excluded_between(task.schedule, now, fires[-1].at) if task.spec.calendars and fires else []
    return Preview([f.at for f in fires], warnings, describe_trigger(task.spec), excluded)


def _retimes(fields: list[FieldDiff]) -> bool:
    return any(f.path == key or f.path.startswith(key + ".") for f in fields for key in RETIMING)


def make_plan(desired: list[Task], rows: list[TaskRow], source: str, now: datetime, prune: bool = True) -> Plan:
    """Diff the files against the rows of the database for one ownership `source`."""
    if now.tzinfo is None:
        raise ValueError("make_plan needs an aware `now`")
    now = now.astimezone(UTC)
    by_id = {row.id: row for row in rows}
    changes: list[Change] = []
    conflicts: list[FileError] = []
    consumed: set[str] = set()
    for task in desired:
        row = by_id.get(task.id)
        old_id = None
        if row is None and task.moved_from and task.moved_from in by_id:
            row = by_id[task.moved_from]
            old_id = row.id
        if row is not None and row.source != source:
            key = "moved_from" if old_id else "id"
            line = task.line_of("moved_from") if old_id else 0
            conflicts.append(
                FileError(
                    task.path,
                    line,
                    key,
                    f"task {row.id!r} is owned by source {row.source!r}, not {source!r}; "
                    "rename the file or apply it with that --source",
                ),
            )
            continue
        if row is None:
            changes.append(Change("create", task.id, task=task, retime=True, preview_from=now))
            continue
        consumed.add(row.id)
        if not old_id and _unchanged(row, task):
            changes.append(Change("noop", task.id, task=task, row=row))
            continue
        # After a finished move, moved_from is a leftover pointer, not content: dropping it changes nothing.
        fields = [f for f in diff_fields(row.spec, task.normalized) if old_id or f.path != "moved_from"]
        fields += calendar_fields(row.calendars, task.calendars)
        drift = is_drifted(row)
        retime = _retimes(fields) or (not row.enabled and task.enabled)
        op: Op = "move" if old_id else ("update" if fields or drift else "noop")
        change = Change(op, task.id, moved_from=old_id, fields=fields, drift=drift, retime=retime, task=task, row=row)
        change.drift_fields = column_drift(row, task.normalized) if drift else []
        change.preview_from = now if retime else None
        changes.append(change)
    if prune:
        wanted = {t.id for t in desired}
        for row in rows:
            if row.source == source and row.id not in consumed and row.id not in wanted:
                changes.append(Change("delete", row.id, row=row, drift=is_drifted(row)))
    changes.sort(key=lambda c: c.id)
    plan = Plan(source, changes, conflicts, state_fingerprint(rows), files_fingerprint(desired), prune, planned_at=now)
    plan.warnings += job_warnings(changes)
    return plan


def job_warnings(changes: list[Change]) -> list[str]:
    """A warning while the files hold tasks that complete by callback: every engine needs its public URL (a plan
    cannot see the engines' options, so it says so every time, as terraform repeats a warning its config causes)."""
    jobs = [c.id for c in changes if c.task is not None and c.task.spec.target.callback]
    if not jobs:
        return []
    named = ", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")
    return [
        f'{named}: completion = "callback": every engine needs --public-url URL (or RECONCILER_PUBLIC_URL), the '
        "address these jobs report to, and --metrics-addr; without it their runs fail (docs/jobs.md)"
    ]


def folded(fingerprint: str, lines: list[str]) -> str:
    """A fingerprint that also covers `lines` (none: the fingerprint as it was)."""
    if not lines:
        return fingerprint
    digest = hashlib.sha256(fingerprint.encode())
    for line in lines:
        digest.update(line.encode())
    return "sha256:" + digest.hexdigest()


def stored_lines(what: str, stored: list[StoredRow]) -> list[str]:
    """What a plan read of a kind stored whole (`what`: its name), as lines of its state fingerprint."""
    return [f"{what}\0{r.source}\0{r.name}\0{r.spec_hash}\n" for r in sorted(stored, key=lambda r: (r.source, r.name))]


def attach_declared(
    plan: Plan, loaded: Named[Any], stored: list[StoredRow], tasks: list[Task], rows: list[TaskRow]
) -> Plan:
    """Add one declared kind to `plan`: its changes; its files' errors and those of the tasks naming what it lacks
    to the plan's conflicts (a task standing on its row is checked on the row's spec; a file with errors is no
    reason to delete its row: its errors refuse the plan); a warning per file no task names; and its files and rows
    to the plan's fingerprints (a saved plan is stale once either changes). The tasks a calendar change retimes are
    in the plan's changes already (make_plan)."""
    kind = loaded.kind
    plan.declared.append(KindChanges(kind, diff_declared(loaded.by_name, stored, plan.source)))
    stored_specs = {row.id: row.spec for row in rows}
    plan.conflicts += loaded.errors + kind.references(tasks, loaded, stored_specs)
    plan.warnings += [f"{found.path}: {found.message}" for found in kind.unused(tasks, loaded, stored_specs)]
    files = [f"{kind.name}\0{name}\0{item.spec_hash}\n" for name, item in sorted(loaded.by_name.items())]
    plan.files_fingerprint = folded(plan.files_fingerprint, files)
    plan.state_fingerprint = folded(plan.state_fingerprint, stored_lines(kind.name, stored))
    return plan


def version(calendar: Mapping[str, Any] | None) -> str | None:
    """A short digest of a calendar as a task stores it: the same calendar, the same text."""
    if calendar is None:
        return None
    text = json.dumps(calendar, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:12]


def calendar_fields(stored: Mapping[str, Any] | None, desired: Mapping[str, Any] | None) -> list[FieldDiff]:
    """The calendars a task names whose applied version differs from the files': `calendars.NAME` old → new
    (a digest of each; the calendar's own change shows what changed in it)."""
    stored, desired = stored or {}, desired or {}
    return [
        FieldDiff(f"calendars.{name}", version(stored.get(name)), version(desired.get(name)))
        for name in sorted({*stored, *desired})
        if stored.get(name) != desired.get(name)
    ]
