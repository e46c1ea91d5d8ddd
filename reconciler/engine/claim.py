"""The claim: one transaction that decides what this engine fires now, in three round trips.

Lock due task rows (SKIP LOCKED) and read the queued runs; lock their leases and limits and read the specs not
compiled yet and which queued backfill runs' occurrences have a run in flight; decide (the pure
`claim_plan.plan_claim`); insert the run rows (ON CONFLICT DO NOTHING), start the queued runs that have a slot,
take leases, advance next_run_at, write the limits' buckets and the outbox, commit.
Only then are requests sent (by `runner.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from reconciler.clock import utc_text
from reconciler.db import queries
from reconciler.db.queries import InsertedRow, LimitRow, LostRow
from reconciler.db.statements import Statement, send
from reconciler.db.store import Store
from reconciler.engine.claim_plan import ClaimPlan, plan_claim
from reconciler.engine.limits import Key, keys_of, taken_statement
from reconciler.engine.specs import Invalid, SpecCache
from reconciler.notify.events import Ended, ended_of, outbox_insert, record_ended
from reconciler.runs import RECORDED
from reconciler.spec.task import TaskSpec
from reconciler.targets.http import idempotency_key
from reconciler.tracing import RunTrace, new_trace_ids

log = logging.getLogger("reconciler.engine")

WARM_LIMIT = 20_000  # soon-due tasks looked at per idle moment


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
    first_attempt: int = 1  # a job's retry (queued again by jobs.py) goes on from the attempts made
    trace_id: Any = None  # its row's (a UUID); None: a row written before traces were (a trace of its own, not stored)
    traceparent: str | None = None  # a manual run's caller's (`trigger --traceparent`)

    def trace(self) -> RunTrace:
        """Its place in its trace (tracing.py)."""
        return RunTrace.of(self.run_id, self.trace_id, self.traceparent)

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
    """Runs the claim transaction for one engine: the round trips around `plan_claim`."""

    def __init__(
        self, store: Store, engine_id: str, batch: int, sources: tuple[str, ...] = (), lease_margin: float = 30.0
    ) -> None:
        self.store = store
        self.engine_id = engine_id
        self.batch = batch
        self.sources = sources
        self.lease_margin = lease_margin
        self.specs = SpecCache()

    async def warm(self, until: datetime, budget: float) -> int:
        """Validate ahead, in idle time, the specs of tasks due before `until` that are not compiled yet,
        so that a burst's claim only decides; at most `budget` seconds. The number compiled."""
        deadline = time.monotonic() + budget
        async with self.store.connection() as conn:
            due = await queries.tasks_due_before(conn, until=until, limit=WARM_LIMIT, sources=self.sources)
            cold = self.specs.cold(due)
            rows = await queries.tasks_specs(conn, ids=cold) if cold else []
        for count, row in enumerate(rows, 1):
            # one that does not validate fails its run in the claim
            self.specs.attempt(row["id"], row["spec_key"], {row["id"]: row["spec_text"]})
            if count % 50 == 0:
                if time.monotonic() >= deadline:
                    return count
                await asyncio.sleep(0)  # runs in flight go on meanwhile
        return len(rows)

    async def claim(self, at: datetime | None, limit: int | None = None, finished: Sequence[int] = ()) -> Report:
        """One transaction: record the due occurrences, start queued manual and backfill runs, take leases, advance.

        `at` is None but in tests: what is due, which leases have expired and how late each occurrence
        is are judged by the database's clock (the transaction's now()), never by this engine's.

        Its statements go in three round trips (pipelined): BEGIN and what is due; the task locks, their leases,
        their limits and the specs not compiled yet; what `plan_claim` decided and COMMIT.
        `finished`: runs of this engine that ended but whose results are not written yet (their
        leases are not counted against their tasks' max_running_instances)."""
        started = time.perf_counter()
        # The leases start at the transaction's start (by the database's clock); a run's deadline counts from
        # no later than that here, however long the claim then waits for its locks.
        leased_at = time.monotonic()
        report = Report()
        async with self.store.pipelined_transaction() as conn:
            clock, expired, due, queued = await queries.claim_first(
                conn, now=at, batch=limit or self.batch, sources=self.sources
            )
            now: datetime = clock[0]["now"]  # the statements after these are given the same instant
            lost = await queries.mark_lost(conn, expired=expired, now=at) if expired else []
            for gone in lost:
                report.record(gone["task_id"], gone["scheduled_for"], "lost", gone["error"])
            await record_ended(conn, lost_ends(lost), now)
            ids = sorted({r["id"] for r in due} | {q["task_id"] for q in queued})
            held: dict[str, int] = {}
            texts: dict[str, str] = {q["task_id"]: q["spec_text"] for q in queued}
            limited: Sequence[LimitRow] = ()  # none: the claim costs what it did without limits
            in_flight: set[tuple[str, datetime]] = set()  # occurrences of queued backfill runs with a run in flight
            if ids:
                leases, fetched, limited, busy = await queries.claim_locks(
                    conn,
                    ids=ids,
                    now=now,
                    finished=finished,
                    cold=self.specs.cold(due),
                    limits=keys_of([*due, *queued]),
                    at=at,
                    occurrences=[(q["task_id"], q["scheduled_for"]) for q in queued if q["kind"] == "backfill"],
                )
                held = {r["task_id"]: r["held"] for r in leases}
                texts.update((r["id"], r["spec_text"]) for r in fetched)  # read under their locks
                in_flight = {(r["task_id"], r["scheduled_for"]) for r in busy}
            compiled = {row["id"]: self.specs.attempt(row["id"], row["spec_key"], texts) for row in due}
            compiled.update((q["task_id"], self.specs.attempt(q["task_id"], q["spec_key"], texts)) for q in queued)
            plan = plan_claim(now, due, queued, held, compiled, limited, in_flight)
            report.claimed_tasks = len(due)
            lease_for = {task_id: lease_seconds(spec, self.lease_margin) for task_id, spec in plan.specs.items()}
            traces = new_trace_ids(len(plan.inserts))
            sent = await send(conn, self._statements(plan, lease_for, now, report, traces))
        # Committed: the inserted rows came back with the COMMIT, in the same round trip.
        inserted = await queries.inserted_rows(sent[0]) if plan.inserts else []
        report.runs.extend(self._claimed(plan, inserted, report, traces))
        report.runs.extend(
            Claimed(
                s.row["run_id"],
                s.row["task_id"],
                s.row["scheduled_for"],
                s.row["kind"],
                s.spec,
                first_attempt=s.row["attempt"] + 1,
                trace_id=s.row["trace_id"],
                traceparent=s.row["traceparent"],
            )
            for s in plan.begun
            if s.spec is not None
        )
        # Which rated limits each run counts against (a claim of tasks without limits looks no further).
        limits_of = {**{q["task_id"]: q for q in queued}, **{r["id"]: r for r in due}} if plan.rated else {}
        for run in report.runs:
            run.first_token = True
            if plan.rated:
                run.rated = tuple(key for key in keys_of([limits_of[run.task_id]]) if key in plan.rated)
            # Done half a margin before the lease ends, so the result is written before anyone calls it lost.
            run.deadline = leased_at + lease_for[run.task_id] - self.lease_margin / 2
        report.fired = len(report.runs)
        report.seconds = time.perf_counter() - started
        log_recorded(report.recorded)
        return report

    def _statements(
        self, plan: ClaimPlan, leases: Mapping[str, float], now: datetime, report: Report, traces: list[str]
    ) -> list[Statement]:
        """The plan's writes, in the order the claim's last round trip sends them: the run rows (`traces`: their
        trace ids) and their leases first (the first statement's rows are the runs inserted), then the queued runs
        started, their leases, the tasks that move on, the limits' buckets and the outbox."""
        statements: list[Statement] = []
        if plan.inserts:
            statements.append(
                queries.runs_insert(
                    engine_id=self.engine_id,
                    now=now,
                    task_ids=[i.task_id for i in plan.inserts],
                    scheduled=[i.decision.scheduled_for for i in plan.inserts],
                    kinds=[i.decision.kind for i in plan.inserts],
                    statuses=[i.decision.status for i in plan.inserts],
                    errors=[i.decision.error for i in plan.inserts],
                    lease_ids=list(leases),
                    lease_seconds=list(leases.values()),
                    trace_ids=traces,
                )
            )
        for start in plan.starts:
            status = "running" if start.spec is not None else "failed"
            statements.append(
                queries.runs_start_queued(
                    run_id=start.row["run_id"], status=status, engine_id=self.engine_id, now=now, error=start.error
                )
            )
            if start.spec is None:
                report.record(start.row["task_id"], start.row["scheduled_for"], status, start.error)
        if begun := plan.begun:
            statements.append(
                queries.leases_insert(
                    engine_id=self.engine_id,
                    now=now,
                    task_ids=[s.row["task_id"] for s in begun],
                    run_ids=[s.row["run_id"] for s in begun],
                    seconds=[leases[s.row["task_id"]] for s in begun],
                    scheduled=[s.row["scheduled_for"] for s in begun],
                )
            )
        if plan.advances:
            statements.append(
                queries.tasks_advance(
                    ids=[a.task_id for a in plan.advances],
                    nexts=[a.next_run_at for a in plan.advances],
                    waits=[a.wait for a in plan.advances],
                )
            )
        if (taken := taken_statement(plan.taken)) is not None:
            statements.append(taken)
        if plan.events:
            statements.append(outbox_insert(plan.events, plan.subscriptions, now))
        return statements

    async def adopt(self, since: datetime, known: Sequence[int]) -> list[Claimed]:
        """The runs of claims this engine never saw commit (since `since`, none of `known`): to fire now,
        each by its lease's end. A stored spec that does not validate any more leaves its run to its lease."""
        async with self.store.connection() as conn:
            rows = await queries.runs_in_doubt(conn, engine_id=self.engine_id, since=since, known=known)
        adopted, leased_at = [], time.monotonic()
        for row in rows:
            found = self.specs.attempt(row["task_id"], row["spec_key"], {row["task_id"]: row["spec_text"]})
            if isinstance(found, Invalid):  # recorded lost when its lease expires, as a run cut off is
                continue
            run = Claimed(row["run_id"], row["task_id"], row["scheduled_for"], row["kind"], found.spec)
            run.first_attempt = row["attempt"] + 1
            run.trace_id, run.traceparent = row["trace_id"], row["traceparent"]
            run.deadline = leased_at + max(0.0, row["lease_left"] - self.lease_margin / 2)
            # Which of its limits have a rate is not known here: each request asks all of them for a token (one
            # without a rate always has one), the first too (its claim's token is long past).
            run.rated = tuple((row["source"], name) for name in found.spec.policy.limits or ())
            adopted.append(run)
        return adopted

    @staticmethod
    def _claimed(plan: ClaimPlan, rows: list[InsertedRow], report: Report, traces: list[str]) -> list[Claimed]:
        """The inserted rows to fire (`traces`: the trace ids of plan.inserts); the others were recorded finished
        (missed, skipped, failed)."""
        report.duplicates += len(plan.inserts) - len(rows)
        claimed: list[Claimed] = []
        for row in rows:
            insert = plan.inserts[row["n"] - 1]
            decision = insert.decision
            if decision.status == "running":
                run = Claimed(
                    row["id"],
                    insert.task_id,
                    decision.scheduled_for,
                    decision.kind,
                    plan.specs[insert.task_id],
                    trace_id=traces[row["n"] - 1],
                )
                claimed.append(run)
            else:
                report.record(insert.task_id, decision.scheduled_for, decision.status, decision.error)
        return claimed


def lost_ends(lost: Sequence[LostRow]) -> list[Ended]:
    """The runs a claim found lost whose tasks hear of it (`lost`, and `recovery` after)."""
    ends = []
    for row in lost:
        found = ended_of(None, row["notify"])
        if found is not None:
            detail = {"error": row["error"]}
            ends.append(Ended(row["task_id"], row["id"], row["scheduled_for"], "lost", *found, detail=detail))
    return ends
