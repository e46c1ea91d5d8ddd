"""The claim's decision, pure: given what one claim read under its locks, what it records, starts, advances and
takes. Values in, values out; `engine/claim.py` only makes the round trips around it.

Per due task: its due occurrences (computed, not walked: catch-up), those a pause holds (recorded skipped),
then misfire grace, coalesce and max_running_instances (`decide`). Queued runs (manual, backfill) start when
their task has a free slot, and stay queued otherwise; a backfill run stays queued too while another run of its
occurrence is in flight (both would send the occurrence's Idempotency-Key: one key is never in flight twice). Then
the claim's limits share their room between the runs that would start (`share`): a due occurrence that gets none
stays due, a queued run stays queued.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from reconciler.clock import utc_text
from reconciler.db.queries import DueRow, LimitRow, QueuedRow
from reconciler.engine.limits import Gate, Key, Taken, names_of
from reconciler.engine.specs import Compiling, Invalid
from reconciler.errors import one_line
from reconciler.notify.events import Event, claim_events
from reconciler.schedule.catchup import ON_TIME_SECONDS, due_occurrences
from reconciler.spec.notifier import subscriptions
from reconciler.spec.task import Policy, TaskSpec

Status = Literal["running", "missed", "skipped", "failed"]  # what a claim records an occurrence as


@dataclass(frozen=True)
class Decision:
    """What a claim does with one occurrence."""

    scheduled_for: datetime
    kind: str  # scheduled | catchup
    status: Status
    error: str | None = None
    limit: str | None = None  # missed: the limit the occurrence waited for past its grace


def decide(
    occurrences: list[datetime], now: datetime, policy: Policy, free_slots: int, waiting: str | None = None
) -> list[Decision]:
    """Misfire grace, coalesce and max_running_instances for one task's due occurrences. `waiting`: the limit the
    task's due occurrence has waited for (a claim found it full): one past its grace is missed for it."""
    if not occurrences:
        return []
    latest = occurrences[-1]
    grace = policy.misfire_grace_seconds
    decisions: list[Decision] = []
    candidates = occurrences
    if policy.coalesce:
        for moment in occurrences[:-1]:
            late = (now - moment).total_seconds()
            note = f"coalesced into the run for {utc_text(latest)} (late by {late:.0f} s)"
            if waiting is not None:  # it waited for the limit until a later occurrence came due
                note = f"missed: waited for limit {waiting}; {note}"
            decisions.append(Decision(moment, "catchup", "missed", note, waiting))
        candidates = [latest]
    for moment in candidates:  # oldest first: catch-up runs count against the instance limit too
        kind = "scheduled" if moment == latest else "catchup"
        late = (now - moment).total_seconds()
        if late > max(grace, ON_TIME_SECONDS) and waiting is not None:
            note = f"missed: waited for limit {waiting} for {late:.0f} s, more than misfire_grace_seconds = {grace}"
            decisions.append(Decision(moment, kind, "missed", note, waiting))
        elif late > max(grace, ON_TIME_SECONDS):
            note = f"missed: claimed late by {late:.0f} s, more than misfire_grace_seconds = {grace}"
            decisions.append(Decision(moment, kind, "missed", note))
        elif free_slots > 0:
            decisions.append(Decision(moment, kind, "running"))
            free_slots -= 1
        else:
            note = f"skipped: max_running_instances = {policy.max_running_instances} already running"
            decisions.append(Decision(moment, kind, "skipped", note))
    return sorted(decisions, key=lambda d: d.scheduled_for)


@dataclass(frozen=True)
class Pause:
    """A task's pause (`reconciler pause`) as the claim reads it with the task's row."""

    by: str
    reason: str
    until: datetime | None

    @classmethod
    def of(cls, row: DueRow) -> Pause | None:
        if row["paused_by"] is None:
            return None
        return cls(row["paused_by"], row["paused_reason"] or "", row["paused_until"])

    def holds(self, moment: datetime, now: datetime) -> bool:
        """Whether the occurrence at `moment` is paused: every one while the pause is in force, and after
        it has ended (paused_until) those due before its end, so no paused time is caught up."""
        return self.until is None or now < self.until or moment < self.until

    @property
    def note(self) -> str:
        return f"paused by {self.by}: {self.reason}"


def decide_paused(
    occurrences: list[datetime], now: datetime, pause: Pause | None
) -> tuple[list[Decision], list[datetime]]:
    """The occurrences a pause holds, recorded skipped with who paused the task and why; and the others, which
    `decide` takes as usual (an ended pause: the occurrences from its end on)."""
    if pause is None:
        return [], occurrences
    held = [moment for moment in occurrences if pause.holds(moment, now)]
    rest = [moment for moment in occurrences if not pause.holds(moment, now)]
    latest = occurrences[-1] if occurrences else None
    skipped = [Decision(m, "scheduled" if m == latest else "catchup", "skipped", pause.note) for m in held]
    return skipped, rest


@dataclass(frozen=True)
class Insert:
    """A run row the claim inserts: a due occurrence and what became of it."""

    task_id: str
    decision: Decision


@dataclass(frozen=True)
class Start:
    """A queued run (manual, backfill) the claim starts; or fails, when its task's stored spec does not validate
    (`spec` None, `error` why)."""

    row: QueuedRow
    spec: TaskSpec | None
    error: str | None = None


@dataclass(frozen=True)
class Advance:
    """A claimed task whose row changes: its next occurrence to keep due, and the limit that occurrence waits for."""

    task_id: str
    next_run_at: datetime | None
    wait: str | None = None


@dataclass
class ClaimPlan:
    """Everything one claim writes, as values: the claim's last round trip sends them with its COMMIT."""

    inserts: list[Insert] = field(default_factory=list)
    starts: list[Start] = field(default_factory=list)
    advances: list[Advance] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    subscriptions: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # of the tasks with events
    taken: list[Taken] = field(default_factory=list)  # the limits' buckets written back
    specs: dict[str, TaskSpec] = field(default_factory=dict)  # every task the claim decided or starts a run of
    rated: frozenset[Key] = frozenset()  # the limits with a rate: each retry of a run counted there takes a token

    @property
    def begun(self) -> list[Start]:
        """The queued runs that start (not those that fail)."""
        return [start for start in self.starts if start.spec is not None]


class Unschedulable(Exception):
    """A due task whose stored spec does not validate: its occurrence is recorded failed with this reason."""


def plan_claim(
    now: datetime,
    due: Sequence[DueRow],
    queued: Sequence[QueuedRow],
    held: Mapping[str, int],
    compiled: Mapping[str, Compiling],
    limits: Sequence[LimitRow] = (),
    in_flight: Collection[tuple[str, datetime]] = (),
) -> ClaimPlan:
    """One claim's decision. `held`: each task's runs in flight (leases) before the claim; `compiled`: the spec of
    every task of `due` and `queued`; `limits`: the limits their tasks name, read under their locks; `in_flight`:
    the occurrences (task, scheduled_for) of queued backfill runs that have a run in flight, read under the locks."""
    plan = ClaimPlan()
    slots = dict(held)  # runs in flight, and those this claim starts
    decided: dict[str, list[Decision]] = {}
    advance: dict[str, datetime | None] = {}
    for row in due:
        task_id, found = row["id"], compiled[row["id"]]
        try:
            if isinstance(found, Invalid):
                raise Unschedulable(found.reason)
            spec = found.spec
            free = spec.policy.max_running_instances - slots.get(task_id, 0)
            occurrences, following = due_occurrences(found.schedule, row["next_run_at"], now, spec.policy)
            # a paused task fires nothing: its occurrences are recorded skipped, and raise no event
            paused, occurrences = decide_paused(occurrences, now, Pause.of(row))
            decisions = sorted(
                paused + decide(occurrences, now, spec.policy, free, row["limit_wait"]), key=lambda d: d.scheduled_for
            )
        except Exception as exc:  # one task's stored spec (or schedule) must not stop the claim of the others
            reason = str(exc) if isinstance(exc, Unschedulable) else f"invalid stored spec: {one_line(exc)}"
            plan.inserts.append(Insert(task_id, Decision(row["next_run_at"], "scheduled", "failed", reason)))
            advance[task_id] = None
            continue
        plan.specs[task_id] = spec
        if spec.notify is not None:
            missed = [d.scheduled_for for d in decisions if d.status == "missed"]
            plan.events += claim_events(spec, task_id, occurrences, missed, now)
        slots[task_id] = slots.get(task_id, 0) + sum(1 for d in decisions if d.status == "running")
        decided[task_id] = decisions
        advance[task_id] = following
    # the occurrences this claim fires are in flight too, for a backfill run of the same occurrence
    busy = {*in_flight, *((t, d.scheduled_for) for t, ds in decided.items() for d in ds if d.status == "running")}
    gate = Gate(limits)
    shared = share(gate, {row["id"]: row for row in due}, decided, advance, wanted(queued, compiled, slots, busy), held)
    plan.inserts += [Insert(task_id, d) for task_id, decisions in shared.decided.items() for d in decisions]
    plan.starts = shared.wanted
    plan.specs.update((start.row["task_id"], start.spec) for start in plan.begun if start.spec is not None)
    plan.advances = [
        Advance(task_id, shared.advance[task_id], shared.waits.get(task_id))
        for task_id in moved_on(due, shared.advance, shared.waits)
    ]
    plan.subscriptions = {e.task_id: subscriptions(plan.specs[e.task_id].normalized()) for e in plan.events}
    plan.taken = gate.changes()
    plan.rated = frozenset(gate.rated)
    return plan


def wanted(
    queued: Sequence[QueuedRow],
    compiled: Mapping[str, Compiling],
    slots: dict[str, int],
    in_flight: Collection[tuple[str, datetime]] = (),
) -> list[Start]:
    """The queued runs (manual, backfill) whose tasks have a free slot, oldest first, each with its task's spec; or
    failing, with why the stored spec does not validate. A run without a slot stays queued, and so does a backfill
    run whose occurrence is `in_flight` (task, scheduled_for): its Idempotency-Key is that run's, and a target
    that deduplicates by key must never see the two requests at once. `slots` counts them."""
    busy = set(in_flight)
    found: list[Start] = []
    for row in queued:
        task_id, spec = row["task_id"], compiled[row["task_id"]]
        if isinstance(spec, Invalid):  # as in the scheduled claim: this run fails, the others go on
            found.append(Start(row, None, spec.reason))
            continue
        occurrence = (task_id, row["scheduled_for"])
        if row["kind"] == "backfill" and occurrence in busy:
            continue  # it waits for that run to end (a manual run's key is its own)
        if slots.get(task_id, 0) >= spec.spec.policy.max_running_instances:
            continue  # a queued run is never skipped: it stays queued until a slot is free
        slots[task_id] = slots.get(task_id, 0) + 1
        if row["kind"] == "backfill":
            busy.add(occurrence)
        found.append(Start(row, spec.spec))
    return found


@dataclass(frozen=True)
class Shared:
    """The claim's runs after its limits shared their room: the decisions of each due task (a due occurrence that
    got no room and those after it left out), the next occurrence to keep due of each, the queued runs that start,
    and the limit each due task waits for (None: none)."""

    decided: dict[str, list[Decision]]
    advance: dict[str, datetime | None]
    wanted: list[Start]
    waits: dict[str, str | None]


def share(
    gate: Gate,
    due: Mapping[str, DueRow],
    decided: Mapping[str, list[Decision]],
    advance: Mapping[str, datetime | None],
    wanted: list[Start],
    busy: Mapping[str, int],
) -> Shared:
    """The room of the claim's limits shared between the runs that would start (see limits.py): a due occurrence
    that gets none stays due (its task's decisions end before it, next_run_at stays on it), a queued run stays
    queued. `busy`: each task's runs in flight before the claim (the fair share's first order)."""
    shared = Shared(dict(decided), dict(advance), list(wanted), {task_id: None for task_id in decided})
    if not gate.buckets:
        return shared
    parties: dict[str, tuple[str, tuple[str, ...], list[datetime]]] = {}
    queued_of: dict[str, list[int]] = {}
    for task_id, decisions in decided.items():
        names = names_of(due[task_id]["limits"])
        if names:
            moments = [d.scheduled_for for d in decisions if d.status == "running"]
            parties[task_id] = (due[task_id]["source"], names, moments)
            for decision in decisions:
                if decision.limit is not None:
                    gate.count(due[task_id]["source"], decision.limit, missed=1)
    for place, start in enumerate(wanted):
        names = names_of(start.row["limits"])
        if start.spec is not None and names:
            parties.setdefault(start.row["task_id"], (start.row["source"], names, []))[2].append(
                start.row["scheduled_for"]
            )
            queued_of.setdefault(start.row["task_id"], []).append(place)
    dropped: set[int] = set()
    for task_id, (count, stopped) in gate.share(parties, busy).items():
        if stopped is None:
            continue
        scheduled = [d for d in decided.get(task_id, []) if d.status == "running"]
        if count < len(scheduled):  # a due occurrence waits: it and what comes after it stay due
            moment = scheduled[count].scheduled_for
            shared.decided[task_id] = [d for d in decided[task_id] if d.scheduled_for < moment]
            shared.advance[task_id] = moment
            shared.waits[task_id] = stopped
            if due[task_id]["limit_wait"] is None:
                gate.count(due[task_id]["source"], stopped, delayed=1)
        dropped.update(queued_of.get(task_id, [])[max(0, count - len(scheduled)) :])
    shared.wanted[:] = [start for place, start in enumerate(wanted) if place not in dropped]
    return shared


def moved_on(
    due: Sequence[DueRow], advance: Mapping[str, datetime | None], waits: Mapping[str, str | None]
) -> list[str]:
    """The claimed tasks whose row changes (a task still waiting for the same limit at the same occurrence does
    not: a claim that finds a thousand tasks still waiting does not rewrite them)."""
    rows = {row["id"]: row for row in due}
    return [
        task_id
        for task_id, following in advance.items()
        if task_id not in rows
        or following != rows[task_id]["next_run_at"]
        or waits.get(task_id) != rows[task_id]["limit_wait"]
    ]
