"""The engine: `run_once(now)` claims, records and fires; `serve()` loops around it. Nothing else schedules.

A claim is one transaction: lock due task rows (SKIP LOCKED), decide each due
occurrence (fire, missed, skipped), insert the run rows (ON CONFLICT DO NOTHING),
take leases, advance next_run_at, commit. Only then are requests sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import psycopg

from reconciler.clock import SYSTEM, Clock, utc_text
from reconciler.environment import EnvPolicy, storable
from reconciler.errors import DatabaseUnavailable, one_line
from reconciler.models import Policy, TaskSpec
from reconciler.store import Conn, Store
from reconciler.targets import Attempt, Firer, Outcome, idempotency_key, lease_seconds
from reconciler.triggers import Schedule, compile_schedule

log = logging.getLogger("reconciler.engine")

CATCHUP_CAP = 100  # occurrences recorded per task per claim
MAX_WALK = 200_000  # occurrences walked to reach `now` after a long outage
DB_FAULTS = (DatabaseUnavailable, psycopg.OperationalError)

Status = Literal["running", "missed", "skipped", "failed"]


@dataclass(frozen=True)
class Decision:
    """What a claim does with one occurrence."""

    scheduled_for: datetime
    kind: str  # scheduled | catchup | manual
    status: Status
    error: str | None = None


def due_occurrences(schedule: Schedule, first: datetime, now: datetime, cap: int = CATCHUP_CAP) -> list[datetime]:
    """The occurrences from `first` up to `now` (inclusive), the newest `cap` of them."""
    found: deque[datetime] = deque(maxlen=cap)
    moment: datetime | None = first
    steps = 0
    while moment is not None and moment <= now and steps < MAX_WALK:
        found.append(moment)
        moment = schedule.next_fire_time(moment)
        steps += 1
    return list(found)


def decide(occurrences: list[datetime], now: datetime, policy: Policy, free_slots: int) -> list[Decision]:
    """Misfire grace, coalesce and max_running_instances for one task's due occurrences (pure)."""
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
            decisions.append(Decision(moment, "catchup", "missed", note))
        candidates = [latest]
    for moment in candidates:  # oldest first: catch-up runs count against the instance limit too
        kind = "scheduled" if moment == latest else "catchup"
        late = (now - moment).total_seconds()
        if late > grace:
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
class EngineConfig:
    engine_id: str
    batch: int = 100
    concurrency: int = 100
    max_sleep: float = 30.0
    drain_seconds: float = 30.0
    lease_margin: float = 30.0
    heartbeat_seconds: float = 10.0
    keep_runs_days: float | None = None  # global retention of finished runs; policy.keep_runs caps per task
    prune_seconds: float = 60.0  # how often serve() prunes run history
    prune_batch: int = 500  # rows deleted per statement: short transactions, no long locks
    allow_env: tuple[str, ...] = ()  # globs of variables tasks may read; empty: all but the engine's own
    sources: tuple[str, ...] = ()  # claim only these sources' tasks (`engine --source`); empty: every source


async def back_off(stop: asyncio.Event, seconds: float) -> float:
    """Wait `seconds` (less if `stop` is set); the next, doubled wait, at most 10 s."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return min(seconds * 2, 10.0)


def default_engine_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class Claimed:
    """A run this engine must fire."""

    run_id: int
    task_id: str
    scheduled_for: datetime
    kind: str
    spec: TaskSpec
    deadline: float | None = None  # time.monotonic() by which the run must be done: its lease ends soon after

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
    runs: list[Claimed] = field(default_factory=list)
    recorded: list[Recorded] = field(default_factory=list)  # rows the claim finished itself

    def record(self, task_id: str, scheduled_for: datetime, status: str, error: str | None) -> None:
        """A run row that ended in the claim (missed, skipped, failed, lost)."""
        self.recorded.append(Recorded(task_id, scheduled_for, status, error))
        if status in ("missed", "skipped", "failed", "lost"):
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


@dataclass
class _Pending:
    """A finished run's result, queued until flush_pending writes it (kept while the database is away)."""

    params: dict[str, Any]


class Engine:
    def __init__(self, store: Store, config: EngineConfig, firer: Firer | None = None, clock: Clock = SYSTEM) -> None:
        self.store = store
        self.config = config
        self.firer = firer or Firer(concurrency=config.concurrency, policy=EnvPolicy(config.allow_env))
        self.clock = clock
        self.pending: list[_Pending] = []
        self._pending_event = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._compiled: dict[tuple[str, str], tuple[TaskSpec, Schedule]] = {}
        self.inflight: set[asyncio.Task[Outcome | None]] = set()
        self.ready = False  # a claim has succeeded (for /readyz)
        self.hurry = asyncio.Event()  # a second Ctrl-C: stop draining, leave in-flight runs to their leases
        self.observers: list[Any] = []  # metrics hooks: .claimed(report, seconds), .finished(claimed, outcome)

    # ------------------------------------------------------------ compile

    def _compile(self, task_id: str, spec_hash: str, spec_text: str) -> tuple[TaskSpec, Schedule]:
        key = (task_id, spec_hash)
        if key not in self._compiled:
            spec = TaskSpec.model_validate(json.loads(spec_text))
            self._compiled[key] = (spec, compile_schedule(spec))
        return self._compiled[key]

    # ------------------------------------------------------------ claim

    async def claim(self, now: datetime) -> Report:
        """One transaction: record the due occurrences and queued manual runs, take leases, advance."""
        started = time.perf_counter()
        report = Report()
        async with self.store.transaction() as conn:
            lost = await Store.fetch(conn, "runs_mark_lost", {"now": now})
            for row in lost:
                report.record(row["task_id"], row["scheduled_for"], "lost", row["error"])
            scope = {"now": now, "batch": self.config.batch, "sources": list(self.config.sources)}
            due = await Store.fetch(conn, "claim_due", scope)
            queued = await Store.fetch(conn, "claim_queued", scope)
            ids = sorted({r["id"] for r in due} | {q["task_id"] for q in queued})
            held: dict[str, int] = {}
            if ids:
                await Store.fetch(conn, "lock_tasks", {"ids": ids})
                held = {
                    r["task_id"]: r["held"] for r in await Store.fetch(conn, "leases_held", {"ids": ids, "now": now})
                }
            report.claimed_tasks = len(due)
            inserts: list[tuple[str, Decision]] = []
            advance: dict[str, datetime | None] = {}
            specs: dict[str, TaskSpec] = {}
            for row in due:
                task_id = row["id"]
                try:
                    spec, schedule = self._compile(task_id, row["spec_hash"], row["spec_text"])
                    free = spec.policy.max_running_instances - held.get(task_id, 0)
                    decisions = decide(due_occurrences(schedule, row["next_run_at"], now), now, spec.policy, free)
                    following = schedule.next_fire_time(now)
                except Exception as exc:  # one task's stored spec must not stop the claim of the others
                    reason = f"invalid stored spec: {one_line(exc)}"
                    inserts.append((task_id, Decision(row["next_run_at"], "scheduled", "failed", reason)))
                    advance[task_id] = None
                    continue
                specs[task_id] = spec
                held[task_id] = held.get(task_id, 0) + sum(1 for d in decisions if d.status == "running")
                inserts.extend((task_id, d) for d in decisions)
                advance[task_id] = following
            report.runs.extend(await self._insert_runs(conn, inserts, specs, now, report))
            report.runs.extend(await self._start_manual(conn, queued, held, now, report))
            await self._take_leases(conn, report.runs, now)
            if advance:
                await Store.execute(conn, "tasks_advance", {"ids": list(advance), "nexts": list(advance.values())})
        report.fired = len(report.runs)
        self.ready = True
        log_recorded(report.recorded)
        for observer in self.observers:
            observer.claimed(report, time.perf_counter() - started)
        return report

    async def _insert_runs(
        self, conn: Conn, inserts: list[tuple[str, Decision]], specs: dict[str, TaskSpec], now: datetime, report: Report
    ) -> list[Claimed]:
        if not inserts:
            return []
        terminal = [d.status != "running" for _, d in inserts]
        params = {
            "task_ids": [t for t, _ in inserts],
            "scheduled": [d.scheduled_for for _, d in inserts],
            "kinds": [d.kind for _, d in inserts],
            "statuses": [d.status for _, d in inserts],
            "attempts": [0] * len(inserts),
            "engines": [self.config.engine_id] * len(inserts),
            "claimed": [now] * len(inserts),
            "finished": [now if done else None for done in terminal],
            "errors": [d.error for _, d in inserts],
        }
        rows = await Store.fetch(conn, "runs_insert", params)
        report.duplicates += len(inserts) - len(rows)
        kinds = {(t, d.scheduled_for): d.kind for t, d in inserts}
        claimed: list[Claimed] = []
        for row in rows:
            if row["status"] == "running":
                key = (row["task_id"], row["scheduled_for"])
                claimed.append(
                    Claimed(row["id"], row["task_id"], row["scheduled_for"], kinds[key], specs[row["task_id"]])
                )
            else:
                report.record(row["task_id"], row["scheduled_for"], row["status"], row["error"])
        return claimed

    async def _start_manual(
        self, conn: Conn, queued: list[dict[str, Any]], held: dict[str, int], now: datetime, report: Report
    ) -> list[Claimed]:
        claimed: list[Claimed] = []
        for row in queued:
            task_id = row["task_id"]
            status, error = "running", None
            try:
                spec, _ = self._compile(task_id, row["spec_hash"], row["spec_text"])
            except Exception as exc:  # as in the scheduled claim: this run fails, the others go on
                status, error = "failed", f"invalid stored spec: {one_line(exc)}"
            else:
                if held.get(task_id, 0) >= spec.policy.max_running_instances:
                    continue  # a manual run is never skipped: it stays queued until a slot is free
            params = {"status": status, "engine_id": self.config.engine_id, "now": now, "error": error}
            await Store.execute(conn, "runs_start_manual", {**params, "run_id": row["run_id"]})
            if status == "running":
                held[task_id] = held.get(task_id, 0) + 1
                claimed.append(Claimed(row["run_id"], task_id, row["scheduled_for"], "manual", spec))
            else:
                report.record(task_id, row["scheduled_for"], status, error)
        return claimed

    async def _take_leases(self, conn: Conn, runs: list[Claimed], now: datetime) -> None:
        if not runs:
            return
        margin = self.config.lease_margin
        started = time.monotonic()
        for run in runs:
            # Done half a margin before the lease ends, so the result is written before anyone calls it lost.
            run.deadline = started + lease_seconds(run.spec, margin) - margin / 2
        await Store.execute(
            conn,
            "leases_insert",
            {
                "task_ids": [c.task_id for c in runs],
                "run_ids": [c.run_id for c in runs],
                "engines": [self.config.engine_id] * len(runs),
                "expires": [now + timedelta(seconds=lease_seconds(c.spec, margin)) for c in runs],
            },
        )

    # ------------------------------------------------------------ fire

    async def execute(self, claimed: Claimed) -> Outcome:
        """Fire one claimed run and record its result; whatever goes wrong is this run's `failed` result."""

        async def on_attempt(attempt: Attempt) -> None:
            if attempt.attempt > 1 or claimed.spec.policy.retries:
                with contextlib.suppress(Exception):  # progress only; the final result is written anyway
                    async with self.store.connection() as conn:
                        await Store.execute(conn, "run_attempt", self._attempt_params(claimed, attempt))

        try:
            outcome = await self.firer.fire(
                claimed.task_id, claimed.spec, claimed.scheduled_for, on_attempt, claimed.deadline, claimed.key
            )
        except Exception as exc:  # a bug in firing: recorded on this run, the engine goes on
            log.error("run %s failed inside the engine: %s", claimed.task_id, type(exc).__name__)
            outcome = Outcome("failed", [Attempt(1, error=f"engine error while firing: {type(exc).__name__}")])
        params = {
            **self._attempt_params(claimed, outcome.last),
            "status": outcome.status,
            "finished_at": self.clock.now(),
        }
        self._finish(params)
        last = outcome.last
        log.log(
            logging.INFO if outcome.status == "succeeded" else logging.WARNING,
            "run %s (%s %s, run %d) %s: %s, attempt %d, %d ms",
            claimed.task_id,
            claimed.kind,
            utc_text(claimed.scheduled_for),
            claimed.run_id,
            outcome.status,
            last.error or f"HTTP {last.http_status}",
            last.attempt,
            last.duration_ms or 0,
            extra={
                "fields": {
                    "task_id": claimed.task_id,
                    "scheduled_for": claimed.scheduled_for.astimezone(UTC).isoformat(),
                    "run_id": claimed.run_id,
                    "kind": claimed.kind,
                    "status": outcome.status,
                    "attempt": outcome.last.attempt,
                    "http_status": outcome.last.http_status,
                    "duration_ms": outcome.last.duration_ms,
                    "error": outcome.last.error,
                }
            },
        )
        for observer in self.observers:
            observer.finished(claimed, outcome)
        return outcome

    def _attempt_params(self, claimed: Claimed, attempt: Attempt) -> dict[str, Any]:
        return {
            "run_id": claimed.run_id,
            "attempt": attempt.attempt,
            "started_at": datetime.fromtimestamp(attempt.sent_at, UTC) if attempt.sent_at else None,
            "http_status": attempt.http_status,
            "error": storable(attempt.error),
            "duration_ms": attempt.duration_ms,
            "excerpt": storable(attempt.excerpt),
        }

    def _finish(self, params: dict[str, Any]) -> None:
        """Queue a result; results are written in batches by flush_pending (and kept while the database is away)."""
        self.pending.append(_Pending(params))
        self._pending_event.set()

    async def flush_pending(self) -> int:
        """Write queued results in one transaction; raises on a database fault (results stay queued)."""
        async with self._flush_lock:  # two flushes of one snapshot would drop what arrived in between
            return await self._flush_locked()

    async def _flush_locked(self) -> int:
        batch = list(self.pending)
        if not batch:
            return 0
        refused = await self._try_write([item.params for item in batch])
        if refused is not None:
            # One row the database refuses must not cost the others their results.
            log.warning(
                "writing %d result(s) together failed (%s); writing them one by one", len(batch), one_line(refused)
            )
            for item in batch:
                await self._write_alone(item.params)
        del self.pending[: len(batch)]
        return len(self.pending)

    async def _write_alone(self, params: dict[str, Any]) -> None:
        """Write one result; if the database refuses it, write it without its excerpt and error text."""
        refused = await self._try_write([params])
        if refused is None:
            return
        reason = f"the run's result could not be stored ({type(refused).__name__}); excerpt and error text dropped"
        refused = await self._try_write([{**params, "excerpt": None, "error": reason}])
        if refused is not None:
            log.error(
                "run %s: result could not be stored (%s); its lease will expire", params["run_id"], one_line(refused)
            )

    async def _try_write(self, rows: list[dict[str, Any]]) -> psycopg.Error | None:
        """_write_results; the error if the database refused the rows. Database faults propagate."""
        try:
            await self._write_results(rows)
        except DB_FAULTS:
            raise
        except psycopg.Error as exc:
            return exc
        return None

    async def _write_results(self, rows: list[dict[str, Any]]) -> None:
        run_ids = [r["run_id"] for r in rows]
        async with self.store.transaction() as conn:
            await Store.execute(
                conn,
                "runs_finish_many",
                {
                    "run_ids": run_ids,
                    "statuses": [r["status"] for r in rows],
                    "attempts": [r["attempt"] for r in rows],
                    "started": [r["started_at"] for r in rows],
                    "finished": [r["finished_at"] for r in rows],
                    "http": [r["http_status"] for r in rows],
                    "errors": [r["error"] for r in rows],
                    "durations": [r["duration_ms"] for r in rows],
                    "excerpts": [r["excerpt"] for r in rows],
                },
            )
            await Store.execute(conn, "leases_release_many", {"run_ids": run_ids})
            await Store.execute(conn, "runs_finish_notify", {"run_ids": run_ids})

    async def _flusher(self, stop: asyncio.Event) -> None:
        """Background writer of results for serve(): small batches, retried while the database is away."""
        while not (stop.is_set() and not self.inflight and not self.pending):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._pending_event.wait(), timeout=0.5)
            self._pending_event.clear()
            await asyncio.sleep(0.02)  # gather a batch
            try:
                await self.flush_pending()
            except DB_FAULTS:
                await asyncio.sleep(0.5)
            except Exception as exc:  # a bug must not stop result writing for good
                log.error("writing results failed: %s; retrying", one_line(exc))
                await asyncio.sleep(0.5)

    async def run_once(self, now: datetime) -> Report:
        """Claim at `now`, fire everything claimed, wait for the results: the unit of work."""
        report = await self.claim(now)
        outcomes = await asyncio.gather(*(self.execute(c) for c in report.runs))
        await self.flush_pending()
        for outcome in outcomes:
            if outcome.status == "succeeded":
                report.succeeded += 1
            else:
                report.failed += 1
        return report

    async def prune_runs(self, now: datetime, max_batches: int = 20) -> int:
        """Delete finished runs beyond `policy.keep_runs` per task and older than `keep_runs_days`, in batches."""
        rules: list[tuple[str, dict[str, Any]]] = [("runs_prune_keep", {"batch": self.config.prune_batch})]
        if self.config.keep_runs_days is not None:
            before = now - timedelta(days=self.config.keep_runs_days)
            rules.append(("runs_prune_age", {"batch": self.config.prune_batch, "before": before}))
        deleted = 0
        for name, params in rules:
            for _ in range(max_batches):
                async with self.store.connection() as conn:
                    count = await Store.execute(conn, name, params)
                deleted += count
                if count < self.config.prune_batch:
                    break
        if deleted:
            log.info("pruned %d finished run(s) from the history", deleted, extra={"fields": {"pruned": deleted}})
        return deleted

    async def prune_safely(self, now: datetime) -> None:
        """prune_runs for serve(): history that cannot be pruned now is pruned later, firing goes on."""
        try:
            await self.prune_runs(now)
        except DB_FAULTS:
            raise
        except Exception as exc:
            log.warning(
                "pruning the run history failed (%s); next try in %g s", one_line(exc), self.config.prune_seconds
            )

    async def heartbeat(self, now: datetime) -> None:
        async with self.store.connection() as conn:
            await Store.execute(
                conn,
                "engine_heartbeat",
                {"engine_id": self.config.engine_id, "host": socket.gethostname(), "pid": os.getpid(), "now": now},
            )

    async def sleep_seconds(self, now: datetime) -> float:
        """Until the nearest next_run_at, within [0, max_sleep]; 0 when manual runs are queued."""
        async with self.store.connection() as conn:
            [row] = await Store.fetch(conn, "nearest_due", {"now": now, "sources": list(self.config.sources)})
        if row["queued"]:
            return 0.0
        if row["next_run_at"] is None:
            return self.config.max_sleep
        until: float = (row["next_run_at"] - now).total_seconds()
        return max(0.0, min(self.config.max_sleep, until))

    # ------------------------------------------------------------ serve

    def _spawn(self, claimed: Claimed) -> None:
        task: asyncio.Task[Outcome | None] = asyncio.create_task(self._execute_safely(claimed))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    async def _execute_safely(self, claimed: Claimed) -> Outcome | None:
        try:
            return await self.execute(claimed)
        except Exception:  # a bug must not kill the engine; the lease expiry will mark the run lost
            log.exception("run %s failed inside the engine", claimed.task_id)
            return None

    async def serve(self, stop: asyncio.Event) -> None:
        """Claim and fire until `stop` is set; then drain in-flight runs (at most drain_seconds)."""
        listener: psycopg.AsyncConnection[Any] | None = None
        backoff = 0.5
        last_beat = last_prune = 0.0
        flusher = asyncio.create_task(self._flusher(stop))
        while not stop.is_set():
            try:
                if listener is None:
                    listener = await self.store.listen()
                now = self.clock.now()
                if time.monotonic() - last_beat >= self.config.heartbeat_seconds:
                    await self.heartbeat(now)
                    last_beat = time.monotonic()
                if time.monotonic() - last_prune >= self.config.prune_seconds:
                    last_prune = time.monotonic()
                    await self.prune_safely(now)
                if len(self.inflight) >= self.config.concurrency * 2:
                    await asyncio.wait(self.inflight, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                    continue
                if self.pending:  # free finished runs' leases first, or the claim would skip their next occurrence
                    await self.flush_pending()
                report = await self.claim(now)
                for claimed in report.runs:
                    self._spawn(claimed)
                backoff = 0.5
                if report.claimed_tasks >= self.config.batch:
                    continue  # more is due right now
                await self._wait(listener, await self.sleep_seconds(self.clock.now()), stop)
            except Exception as exc:  # the database away, or a bug: log, back off, go on; never exit
                if isinstance(exc, DB_FAULTS):
                    log.warning("database unavailable (%s); retrying in %.1f s", one_line(exc), backoff)
                else:
                    log.error("claim failed (%s: %s); retrying in %.1f s", type(exc).__name__, one_line(exc), backoff)
                await self.store.recover()
                if listener is not None:
                    with contextlib.suppress(Exception):
                        await listener.close()
                listener = None
                backoff = await back_off(stop, backoff)
        await self.drain(flusher)
        if listener is not None:
            with contextlib.suppress(Exception):
                await listener.close()

    async def _wait(self, listener: psycopg.AsyncConnection[Any], seconds: float, stop: asyncio.Event) -> None:
        """Sleep up to `seconds`, woken early by a NOTIFY or by `stop`."""
        if seconds <= 0:
            return

        async def notified() -> None:
            async for _ in listener.notifies(timeout=seconds, stop_after=1):
                return

        waiters = [asyncio.create_task(notified()), asyncio.create_task(stop.wait())]
        try:
            done, _ = await asyncio.wait(waiters, timeout=seconds + 1, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # re-raise a connection error from the listener
        finally:
            for task in waiters:
                task.cancel()
            for task in waiters:
                with contextlib.suppress(asyncio.CancelledError, *DB_FAULTS):
                    await task

    async def drain(self, flusher: asyncio.Task[None]) -> None:
        """Let in-flight runs finish (bounded, cut short by `hurry`), write their results (bounded), say goodbye."""
        hurry = asyncio.create_task(self.hurry.wait())
        deadline = time.monotonic() + self.config.drain_seconds
        while self.inflight and not self.hurry.is_set() and time.monotonic() < deadline:
            waiting = {*self.inflight, hurry}
            await asyncio.wait(waiting, timeout=deadline - time.monotonic(), return_when=asyncio.FIRST_COMPLETED)
        left = list(self.inflight)
        for task in left:  # stopped now: these runs end `lost` when their leases expire
            task.cancel()
        if left:
            log.warning("stopped with %d run(s) in flight; they are recorded lost when their leases expire", len(left))
        self._pending_event.set()
        try:
            await asyncio.wait_for(
                asyncio.shield(flusher), timeout=1.0 if self.hurry.is_set() else self.config.drain_seconds
            )
        except TimeoutError:
            flusher.cancel()
            log.warning("%d result(s) could not be written before exit; their leases will expire", len(self.pending))
        hurry.cancel()
        with contextlib.suppress(Exception):  # the goodbye is a courtesy: heartbeats expire anyway
            async with self.store.connection() as conn:
                await Store.execute(conn, "engine_gone", {"engine_id": self.config.engine_id})
        await self.firer.close()
