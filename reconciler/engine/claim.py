"""The claim: one transaction that decides what this engine fires now.

Lock due task rows (SKIP LOCKED), decide each due occurrence (fire, missed, skipped: the
pure `decide`), insert the run rows (ON CONFLICT DO NOTHING), start queued (manual, backfill) runs that
have a free slot, take leases, advance next_run_at, commit. Only then are requests sent
(by `runner.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from reconciler.clock import utc_text
from reconciler.db import queries
from reconciler.db.queries import DueRow, InsertedRow, LostRow, QueuedRow
from reconciler.db.statements import Statement, send
from reconciler.db.store import Store
from reconciler.engine.limits import Gate, Key, keys_of, names_of
from reconciler.errors import one_line
from reconciler.notify.events import Ended, Event, claim_events, ended_of, outbox_insert, record_ended
from reconciler.runs import RECORDED
from reconciler.schedule.base import Schedule
from reconciler.schedule.catchup import ON_TIME_SECONDS, SharedSchedule, due_occurrences
from reconciler.schedule.triggers import compile_schedule, schedule_key
from reconciler.spec.notifier import subscriptions
from reconciler.spec.task import Policy, TaskSpec
from reconciler.targets.http import idempotency_key, parsed_url

log = logging.getLogger("reconciler.engine")

MAX_COMPILED = 50_000  # validated specs kept per engine (tasks' specs, not runs: a bound on memory)
WARM_LIMIT = 20_000  # soon-due tasks looked at per idle moment

Status = Literal["running", "missed", "skipped", "failed"]


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
    """Misfire grace, coalesce and max_running_instances for one task's due occurrences (pure). `waiting`: the
    limit the task's due occurrence has waited for (a claim found it full): one past its grace is missed for it."""
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
    """The occurrences a pause holds, recorded skipped with who paused the task and why (pure); and the
    others, which `decide` takes as usual (an ended pause: the occurrences from its end on)."""
    if pause is None:
        return [], occurrences
    held = [moment for moment in occurrences if pause.holds(moment, now)]
    rest = [moment for moment in occurrences if not pause.holds(moment, now)]
    latest = occurrences[-1] if occurrences else None
    skipped = [Decision(m, "scheduled" if m == latest else "catchup", "skipped", pause.note) for m in held]
    return skipped, rest


@dataclass
class Claimed:
    """A run this engine must fire."""

    run_id: int
    task_id: str
    scheduled_for: datetime
    kind: str
    spec: TaskSpec
    deadline: float | None = None  # time.monotonic() by which the run must be done: its lease ends soon after
    rated: tuple[Key, ...] = ()  # the limits with a rate it counts against: each retry takes a token of each
    # Whether its first request leaves on a token its claim took (an adopted run's claim is long past: its first
    # request takes a token of its own, as a retry does)
    first_token: bool = False

    @property
    def key(self) -> str:
        """The Idempotency-Key: the occurrence's, or the manual run's own."""
        return idempotency_key(self.task_id, self.scheduled_for, self.run_id if self.kind == "manual" else None)


@dataclass
class Report:
    """What one claim (and, for run_once, its firing) did."""

    claimed_tasks: int = 0
    fired: int = 0
    succeeded: int = 0
    failed: int = 0
    missed: int = 0
    skipped: int = 0
    lost: int = 0
    duplicates: int = 0  # occurrences already recorded (the ON CONFLICT guard)
    seconds: float = 0.0  # how long the claim transaction took
    runs: list[Claimed] = field(default_factory=list)
    recorded: list[Recorded] = field(default_factory=list)  # rows the claim finished itself

    def record(self, task_id: str, scheduled_for: datetime, status: str, error: str | None) -> None:
        """A run row that ended in the claim (missed, skipped, failed, lost)."""
        self.recorded.append(Recorded(task_id, scheduled_for, status, error))
        if status in RECORDED:
            setattr(self, status, getattr(self, status) + 1)


@dataclass(frozen=True)
class Recorded:
    """A run the claim recorded as terminal without firing it."""

    task_id: str
    scheduled_for: datetime
    status: str
    error: str | None


def log_recorded(recorded: list[Recorded]) -> None:
    """One WARNING per task and status for runs a claim ended without firing (lost, missed,
    failed), INFO for skipped ones (the policy at work): a catch-up of 100 misses is one line."""
    groups: dict[tuple[str, str], list[Recorded]] = {}
    for item in recorded:
        groups.setdefault((item.task_id, item.status), []).append(item)
    for (task_id, status), items in groups.items():
        newest = items[-1]
        when = utc_text(newest.scheduled_for)
        log.log(
            logging.INFO if status == "skipped" else logging.WARNING,
            "task %s: %d run(s) %s (newest scheduled for %s): %s",
            task_id,
            len(items),
            status,
            when,
            newest.error or "-",
            extra={
                "fields": {
                    "task_id": task_id,
                    "status": status,
                    "count": len(items),
                    "scheduled_for": newest.scheduled_for.astimezone(UTC).isoformat(),
                    "error": newest.error,
                }
            },
        )


def lease_seconds(spec: TaskSpec, margin: float = 30.0) -> float:
    """How long a run may hold its slot: every attempt's timeout, every backoff, jitter, a margin."""
    return spec.run_seconds + margin


class Claimer:
    """Runs the claim transaction for one engine; caches each task's compiled spec by its stored text."""

    def __init__(
        self, store: Store, engine_id: str, batch: int, sources: tuple[str, ...] = (), lease_margin: float = 30.0
    ) -> None:
        self.store = store
        self.engine_id = engine_id
        self.batch = batch
        self.sources = sources
        self.lease_margin = lease_margin
        # task id → (64-bit hash of the stored spec text, spec, schedule): the text's hash, not
        # spec_hash, decides whether the cached spec is the row's (a hand edit of `spec` alone changes
        # no spec_hash). The claim reads the hash of every due row and the text of only those not
        # compiled yet: a burst's claim result is a tenth of the bytes, which a busy event loop reads
        # in as many fewer turns.
        self._compiled: dict[str, tuple[int, TaskSpec, Schedule]] = {}
        self._schedules: dict[str, SharedSchedule] = {}  # schedule_key → the schedule its tasks share

    def _cold(self, rows: Sequence[DueRow | queries.SpecKeyRow]) -> list[str]:
        """The ids of rows (id, spec_key) whose stored spec is not the one compiled."""
        return [r["id"] for r in rows if self._compiled.get(r["id"], (None,))[0] != r["spec_key"]]

    def _compile(self, task_id: str, spec_key: int, texts: Mapping[str, str]) -> tuple[TaskSpec, Schedule]:
        """The task's spec and schedule, validated once per stored text (a changed task replaces its
        entry); `texts` holds the stored text of every task `_cold` named."""
        cached = self._compiled.get(task_id)
        if cached is None or cached[0] != spec_key:
            spec = TaskSpec.model_validate_json(texts[task_id])
            with contextlib.suppress(ValueError):  # one the client refuses fails its run when fired
                parsed_url(spec.target.url)  # parsed here, in idle time when warming, not per request
            if cached is None and len(self._compiled) >= MAX_COMPILED:
                for old in list(self._compiled)[: MAX_COMPILED // 2]:  # the oldest half: recompiled when due
                    del self._compiled[old]
            key = schedule_key(spec)
            shared = self._schedules.get(key)
            if shared is None:
                if len(self._schedules) >= MAX_COMPILED:
                    self._schedules.clear()
                shared = self._schedules[key] = SharedSchedule(compile_schedule(spec))
            cached = self._compiled[task_id] = (spec_key, spec, shared)
        return cached[1], cached[2]

    async def warm(self, until: datetime, budget: float) -> int:
        """Validate ahead, in idle time, the specs of tasks due before `until` that are not compiled yet,
        so that a burst's claim only decides; at most `budget` seconds. The number compiled."""
        deadline = time.monotonic() + budget
        async with self.store.connection() as conn:
            due = await queries.tasks_due_before(conn, until=until, limit=WARM_LIMIT, sources=self.sources)
            cold = self._cold(due)
            rows = await queries.tasks_specs(conn, ids=cold) if cold else []
        for count, row in enumerate(rows, 1):
            with contextlib.suppress(Exception):  # a spec that does not validate fails its run in the claim
                self._compile(row["id"], row["spec_key"], {row["id"]: row["spec_text"]})
            if count % 50 == 0:
                if time.monotonic() >= deadline:
                    return count
                await asyncio.sleep(0)  # runs in flight go on meanwhile
        return len(rows)

    async def claim(self, at: datetime | None, limit: int | None = None, finished: Sequence[int] = ()) -> Report:
        """One transaction: record the due occurrences, start queued manual and backfill runs, take leases, advance.

        `at` is None but in tests: what is due, which leases have expired and how late each occurrence
        is are judged by the database's clock (the transaction's now()), never by this engine's.

        Its statements go in four round trips (pipelined): BEGIN and what is due; the task
        locks, their leases and the specs not compiled yet; the run rows; the leases, the next run
        times and COMMIT.
        `finished`: runs of this engine that ended but whose results are not written yet (their
        leases are not counted against their tasks' max_running_instances)."""
        started = time.perf_counter()
        # The leases start at the transaction's start (by the database's clock); a run's deadline counts from
        # no later than that here, however long the claim then waits for its locks.
        leased_at = time.monotonic()
        report = Report()
        async with self.store.pipelined_transaction() as conn:
            clock, lost, due, queued = await queries.claim_first(
                conn, now=at, batch=limit or self.batch, sources=self.sources
            )
            now: datetime = clock[0]["now"]  # the statements after these are given the same instant
            for gone in lost:
                report.record(gone["task_id"], gone["scheduled_for"], "lost", gone["error"])
            await record_ended(conn, lost_ends(lost), now)
            ids = sorted({r["id"] for r in due} | {q["task_id"] for q in queued})
            limits_by_task: dict[str, Mapping[str, Any]] = {
                **{q["task_id"]: q for q in queued},
                **{r["id"]: r for r in due},
            }
            held: dict[str, int] = {}
            busy: dict[str, int] = {}
            texts: dict[str, str] = {}  # the stored text of due tasks not compiled yet, read under their locks
            gate = Gate()  # the limits the tasks name, locked (none: the claim costs what it did without limits)
            if ids:
                leases, fetched, limited = await queries.claim_locks(
                    conn,
                    ids=ids,
                    now=now,
                    finished=finished,
                    cold=self._cold(due),
                    limits=keys_of([*due, *queued]),
                    at=at,
                )
                held = {r["task_id"]: r["held"] for r in leases}
                busy = dict(held)  # runs in flight before this claim: the fair share's first order
                texts.update((r["id"], r["spec_text"]) for r in fetched)
                gate = Gate(limited)
            report.claimed_tasks = len(due)
            inserts: list[tuple[str, Decision]] = []
            decided: dict[str, list[Decision]] = {}
            advance: dict[str, datetime | None] = {}
            specs: dict[str, TaskSpec] = {}
            events: list[Event] = []
            for row in due:
                task_id = row["id"]
                try:
                    spec, schedule = self._compile(task_id, row["spec_key"], texts)
                    free = spec.policy.max_running_instances - held.get(task_id, 0)
                    occurrences, following = due_occurrences(schedule, row["next_run_at"], now, spec.policy)
                    # a paused task fires nothing: its occurrences are recorded skipped, and raise no event
                    paused, occurrences = decide_paused(occurrences, now, Pause.of(row))
                    decided_now = decide(occurrences, now, spec.policy, free, row["limit_wait"])
                    decisions = sorted(paused + decided_now, key=lambda d: d.scheduled_for)
                except Exception as exc:  # one task's stored spec must not stop the claim of the others
                    reason = f"invalid stored spec: {one_line(exc)}"
                    inserts.append((task_id, Decision(row["next_run_at"], "scheduled", "failed", reason)))
                    advance[task_id] = None
                    continue
                specs[task_id] = spec
                if spec.notify is not None:
                    missed = [d.scheduled_for for d in decisions if d.status == "missed"]
                    events += claim_events(spec, task_id, occurrences, missed, now)
                held[task_id] = held.get(task_id, 0) + sum(1 for d in decisions if d.status == "running")
                decided[task_id] = decisions
                advance[task_id] = following
            wanted = self._queued_wanted(queued, held)
            waits = share(gate, {row["id"]: row for row in due}, decided, advance, wanted, busy)
            for task_id, decisions in decided.items():
                inserts.extend((task_id, d) for d in decisions)
            begun, starts = self._start_queued(wanted, now, report)
            specs.update((run.task_id, run.spec) for run in begun)
            lease_for = {task_id: lease_seconds(spec, self.lease_margin) for task_id, spec in specs.items()}
            statements = [*self._insert_runs(inserts, lease_for, now), *starts]
            statements += self._take_leases(begun, lease_for, now)
            moved = moved_on(due, advance, waits)
            if moved:
                statements.append(
                    queries.tasks_advance(
                        ids=moved, nexts=[advance[i] for i in moved], waits=[waits.get(i) for i in moved]
                    )
                )
            if (taken := gate.statement()) is not None:
                statements.append(taken)
            if events:  # last: the first statement's rows are the runs inserted (see below)
                subs_of = {e.task_id: subscriptions(specs[e.task_id].normalized()) for e in events}
                statements.append(outbox_insert(events, subs_of, now))
            sent = await send(conn, statements)
        # Committed: the inserted rows came back with the COMMIT, in the same round trip.
        report.runs.extend(
            self._claimed(inserts, await queries.inserted_rows(sent[0]) if inserts else [], specs, report)
        )
        report.runs.extend(begun)
        rated = gate.rated
        for run in report.runs:
            run.first_token = True
            run.rated = tuple(key for key in keys_of([limits_by_task[run.task_id]]) if key in rated) if rated else ()
            # Done half a margin before the lease ends, so the result is written before anyone calls it lost.
            run.deadline = leased_at + lease_for[run.task_id] - self.lease_margin / 2
        report.fired = len(report.runs)
        report.seconds = time.perf_counter() - started
        log_recorded(report.recorded)
        return report

    async def adopt(self, since: datetime, known: Sequence[int]) -> list[Claimed]:
        """The runs of claims this engine never saw commit (since `since`, none of `known`): to fire now,
        each by its lease's end. A stored spec that does not validate any more leaves its run to its lease."""
        async with self.store.connection() as conn:
            rows = await queries.runs_in_doubt(conn, engine_id=self.engine_id, since=since, known=known)
        adopted, leased_at = [], time.monotonic()
        for row in rows:
            try:
                spec, _ = self._compile(row["task_id"], row["spec_key"], {row["task_id"]: row["spec_text"]})
            except Exception:  # recorded lost when its lease expires, as a run cut off is
                continue
            run = Claimed(row["run_id"], row["task_id"], row["scheduled_for"], row["kind"], spec)
            run.deadline = leased_at + max(0.0, row["lease_left"] - self.lease_margin / 2)
            # Which of its limits have a rate is not known here: each request asks all of them for a token (one
            # without a rate always has one), the first too (its claim's token is long past).
            run.rated = tuple((row["source"], name) for name in spec.policy.limits or ())
            adopted.append(run)
        return adopted

    def _insert_runs(
        self, inserts: list[tuple[str, Decision]], leases: Mapping[str, float], now: datetime
    ) -> list[Statement]:
        """The run rows of the decisions, and the leases of those that run, in one statement (none
        for no decisions): the claim's last round trip carries its COMMIT too."""
        if not inserts:
            return []
        statement = queries.runs_insert(
            engine_id=self.engine_id,
            now=now,
            task_ids=[t for t, _ in inserts],
            scheduled=[d.scheduled_for for _, d in inserts],
            kinds=[d.kind for _, d in inserts],
            statuses=[d.status for _, d in inserts],
            errors=[d.error for _, d in inserts],
            lease_ids=list(leases),
            lease_seconds=list(leases.values()),
        )
        return [statement]

    @staticmethod
    def _claimed(
        inserts: list[tuple[str, Decision]], rows: list[InsertedRow], specs: dict[str, TaskSpec], report: Report
    ) -> list[Claimed]:
        """The inserted rows to fire; the others were recorded finished (missed, skipped, failed)."""
        report.duplicates += len(inserts) - len(rows)
        claimed: list[Claimed] = []
        for row in rows:
            task_id, decision = inserts[row["n"] - 1]
            if decision.status == "running":
                claimed.append(Claimed(row["id"], task_id, decision.scheduled_for, decision.kind, specs[task_id]))
            else:
                report.record(task_id, decision.scheduled_for, decision.status, decision.error)
        return claimed

    def _queued_wanted(
        self, queued: list[QueuedRow], held: dict[str, int]
    ) -> list[tuple[QueuedRow, TaskSpec | None, str | None]]:
        """The queued runs (manual, backfill) whose tasks have a free slot, each with its task's spec; or None and
        why the stored spec does not validate (that run fails). A run without a slot stays queued."""
        wanted: list[tuple[QueuedRow, TaskSpec | None, str | None]] = []
        for row in queued:
            task_id = row["task_id"]
            try:
                spec, _ = self._compile(task_id, row["spec_key"], {task_id: row["spec_text"]})
            except Exception as exc:  # as in the scheduled claim: this run fails, the others go on
                wanted.append((row, None, f"invalid stored spec: {one_line(exc)}"))
                continue
            if held.get(task_id, 0) >= spec.policy.max_running_instances:
                continue  # a queued run is never skipped: it stays queued until a slot is free
            held[task_id] = held.get(task_id, 0) + 1
            wanted.append((row, spec, None))
        return wanted

    def _start_queued(
        self, wanted: list[tuple[QueuedRow, TaskSpec | None, str | None]], now: datetime, report: Report
    ) -> tuple[list[Claimed], list[Statement]]:
        """The queued runs that start now (or fail: a spec that does not validate), and their statements."""
        claimed: list[Claimed] = []
        statements: list[Statement] = []
        for row, spec, error in wanted:
            status = "running" if spec is not None else "failed"
            statements.append(
                queries.runs_start_queued(
                    run_id=row["run_id"], status=status, engine_id=self.engine_id, now=now, error=error
                )
            )
            if spec is not None:
                claimed.append(Claimed(row["run_id"], row["task_id"], row["scheduled_for"], row["kind"], spec))
            else:
                report.record(row["task_id"], row["scheduled_for"], status, error)
        return claimed, statements

    def _take_leases(self, runs: list[Claimed], leases: Mapping[str, float], now: datetime) -> list[Statement]:
        """The statement taking the leases of started queued runs (none for none)."""
        if not runs:
            return []
        statement = queries.leases_insert(
            engine_id=self.engine_id,
            now=now,
            task_ids=[c.task_id for c in runs],
            run_ids=[c.run_id for c in runs],
            seconds=[leases[run.task_id] for run in runs],
        )
        return [statement]


def share(
    gate: Gate,
    due: Mapping[str, DueRow],
    decided: dict[str, list[Decision]],
    advance: dict[str, datetime | None],
    wanted: list[tuple[QueuedRow, TaskSpec | None, str | None]],
    busy: Mapping[str, int],
) -> dict[str, str | None]:
    """The room of the claim's limits shared between the runs that would start (see limits.py): a due occurrence
    that gets none stays due (its task's decisions end before it, next_run_at stays on it), a queued run stays
    queued. `decided`, `advance` and `wanted` are changed in place. The limit each due task waits for (None: none)."""
    waits: dict[str, str | None] = {task_id: None for task_id in decided}
    if not gate.buckets:
        return waits
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
    for place, (row, spec, _) in enumerate(wanted):
        names = names_of(row["limits"])
        if spec is not None and names:
            moments = parties.setdefault(row["task_id"], (row["source"], names, []))[2]
            moments.append(row["scheduled_for"])
            queued_of.setdefault(row["task_id"], []).append(place)
    granted = gate.share(parties, busy)
    dropped: set[int] = set()
    for task_id, (count, stopped) in granted.items():
        if stopped is None:
            continue
        scheduled = [d for d in decided.get(task_id, []) if d.status == "running"]
        if count < len(scheduled):  # a due occurrence waits: it and what comes after it stay due
            moment = scheduled[count].scheduled_for
            decided[task_id] = [d for d in decided[task_id] if d.scheduled_for < moment]
            advance[task_id] = moment
            waits[task_id] = stopped
            if due[task_id]["limit_wait"] is None:
                gate.count(due[task_id]["source"], stopped, delayed=1)
        dropped.update(queued_of.get(task_id, [])[max(0, count - len(scheduled)) :])
    wanted[:] = [item for place, item in enumerate(wanted) if place not in dropped]
    return waits


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


def lost_ends(lost: Sequence[LostRow]) -> list[Ended]:
    """The runs a claim found lost whose tasks hear of it (`lost`, and `recovery` after)."""
    ends = []
    for row in lost:
        found = ended_of(None, row["notify"])
        if found is not None:
            detail = {"error": row["error"]}
            ends.append(Ended(row["task_id"], row["id"], row["scheduled_for"], "lost", *found, detail=detail))
    return ends
