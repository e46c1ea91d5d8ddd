"""The runner: `run_once(now)` claims and fires; `serve()` loops around it. Nothing else schedules.

The claim (`claim.py`) is one transaction that decides what to fire; only after it commits
are requests sent (`targets.py`), and their results are written in batches (`results.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import psycopg

from reconciler.clock import DATABASE, Clock, DatabaseClock, statement_now, utc_iso, utc_text, utcnow
from reconciler.db import queries
from reconciler.db.store import DB_FAULTS, Conn, Store
from reconciler.engine.claim import Claimed, Claimer, Report
from reconciler.engine.leader import leader_only
from reconciler.engine.results import Results, attempt_params
from reconciler.errors import one_line
from reconciler.notify.delivery import Deliverer
from reconciler.notify.events import Ended, ended_of, late_scan
from reconciler.spec.environment import EnvPolicy
from reconciler.targets.backoff import backoff_delay
from reconciler.targets.http import Attempt, Firer, Outcome

log = logging.getLogger("reconciler.engine")

# Idle time is spent validating the specs of tasks due within WARM_HORIZON, WARM_BUDGET at a
# time (a NOTIFY waits that long at most), when the engine would sleep at least WARM_MIN_SLEEP.
WARM_HORIZON = 120.0
WARM_BUDGET = 0.2
WARM_MIN_SLEEP = 0.5
# Claimed runs may queue for a slot this long at the pace the slots sustain (and longer when a
# claim takes longer): far inside the lease's margin, and long enough to ramp up in a few claims.
QUEUE_SECONDS = 1.0
CLAIMS_AT_ONCE = 2  # claim transactions serve() runs at a time
RECONNECT_CAP = 10.0  # seconds: the longest wait between tries while the database is away


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
    prune_seconds: float = 60.0  # how often serve() starts a pass over the run history (see prune_runs)
    prune_batch: int = 2000  # rows deleted per statement: short transactions, no long locks
    allow_env: tuple[str, ...] = ()  # globs of variables tasks may read; empty: all but the engine's own
    sources: tuple[str, ...] = ()  # claim only these sources' tasks (`engine --source`); empty: every source
    max_clock_offset: float = 5.0  # warn when this machine's clock is further than this off the database's


async def back_off(stop: asyncio.Event, seconds: float) -> float:
    """Wait `seconds` (less if `stop` is set); the next, doubled wait, at most RECONNECT_CAP."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return backoff_delay(seconds, 2, cap=RECONNECT_CAP)


def default_engine_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Observer(Protocol):
    """Told of every claim and every finished run (metrics, `up`'s run lines)."""

    def claimed(self, report: Report) -> None: ...

    def finished(self, claimed: Claimed, outcome: Outcome) -> None: ...


class Engine:
    def __init__(self, store: Store, config: EngineConfig, firer: Firer | None = None, clock: Clock = DATABASE) -> None:
        self.store = store
        self.config = config
        self.firer = firer or Firer(concurrency=config.concurrency, policy=EnvPolicy(config.allow_env))
        self.clock = clock
        self.claimer = Claimer(store, config.engine_id, config.batch, config.sources, config.lease_margin)
        self.results = Results(store, clock)
        self.deliverer = Deliverer(store, config.engine_id, EnvPolicy(config.allow_env), clock, config.sources)
        # Claimed runs wait in `queue` for one of at most --concurrency workers, each of which fires
        # run after run with no task, callback or semaphore wait per run (see _worker).
        self.queue: deque[Claimed] = deque()
        self.workers: set[asyncio.Task[None]] = set()
        self.running = 0  # runs a worker has taken and not finished (those resting included)
        self.firer.on_rest = self._fill
        self.ready = False  # a claim has succeeded (for /readyz)
        self.hurry = asyncio.Event()  # a second Ctrl-C: stop draining, leave in-flight runs to their leases
        self._slot_freed = asyncio.Event()  # runs in flight have finished: room to claim again
        self._pace = 0.0  # attempts per second the slots sustain when kept busy, smoothed
        self._paced_at = (0, 0.0)  # (Firer.sent, Firer.slot_seconds) when the pace was last measured
        self._claim_seconds = 0.0  # how long a claim takes, smoothed
        self.ahead = self.wake_room = 0  # the queue's size (see _pace_queue)
        self.claims: dict[asyncio.Task[Report], int] = {}  # claims running in serve(), and the most each may take
        self._more_due = True  # the last claim to end took all it asked for: more may be due
        self._pace_queue()
        self.observers: list[Observer] = []
        self.clock_off = False  # the last heartbeat found this machine's clock past max_clock_offset

    async def claim(self, now: datetime | None, limit: int | None = None) -> Report:
        """One claim transaction (see claim.py) of at most `limit` due tasks (default --batch) at `now` (None:
        the database's clock); observers are told."""
        report = await self.claimer.claim(now, limit, self.results.finished())
        self.ready = True
        for observer in self.observers:
            observer.claimed(report)
        return report

    # ------------------------------------------------------------ fire

    async def execute(self, claimed: Claimed) -> Outcome:
        """Fire one claimed run and record its result; whatever goes wrong is this run's `failed` result."""

        async def on_attempt(attempt: Attempt) -> None:
            with contextlib.suppress(Exception):  # progress only; the final result is written anyway
                async with self.store.connection() as conn:
                    await queries.run_attempt(conn, **attempt_params(claimed.run_id, attempt))

        # Progress is written between attempts: a run of one attempt has none to write.
        progress = on_attempt if claimed.spec.policy.retries else None
        try:
            outcome = await self.firer.fire(
                claimed.task_id, claimed.spec, claimed.scheduled_for, progress, claimed.deadline, claimed.key
            )
        except Exception as exc:  # a bug in firing: recorded on this run, the engine goes on
            log.error("run %s failed inside the engine: %s", claimed.task_id, type(exc).__name__, exc_info=True)
            outcome = Outcome("failed", [Attempt(1, error=f"engine error while firing: {type(exc).__name__}")])
        result = {**attempt_params(claimed.run_id, outcome.last), "status": outcome.status}
        result["finished_at"] = self.clock.now()
        if claimed.spec.notify is not None and (found := ended_of(claimed.spec, None)):
            detail = {
                "http_status": outcome.last.http_status,
                "error": result["error"],
                "attempt": outcome.last.attempt,
            }
            result["ended"] = Ended(
                claimed.task_id, claimed.run_id, claimed.scheduled_for, outcome.status, *found, detail
            )
        self.results.add(result)
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
                    "scheduled_for": utc_iso(claimed.scheduled_for),
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

    async def run_once(self, now: datetime) -> Report:
        """Claim at `now`, fire everything claimed, wait for the results: the unit of work."""
        report = await self.claim(now)
        outcomes = await asyncio.gather(*(self.execute(c) for c in report.runs))
        await self.results.flush()
        for outcome in outcomes:
            if outcome.status == "succeeded":
                report.succeeded += 1
            else:
                report.failed += 1
        return report

    async def prune_runs(self, now: datetime, max_batches: int | None = None) -> int:
        """One pass over the run history: delete finished runs beyond `policy.keep_runs` per task and
        older than `keep_runs_days` (delivered and given-up notifications too), `prune_batch` rows at a
        time until none is left (or `max_batches`).

        Only the runs of the engine's sources (`engine --source`; every source when none is given).
        Sized to the backlog, so retention keeps up with any rate of runs, and gentle: each batch is
        a short transaction locking only the rows it deletes (replicas pruning by age at once skip
        each other's), and the pass rests as long as each batch took, so it takes at most half of
        one database backend beside the claims."""
        batch, sources = self.config.prune_batch, self.config.sources
        rules: list[Callable[[Conn], Awaitable[int]]] = [
            lambda conn: queries.runs_prune_keep(conn, batch=batch, sources=sources)
        ]
        if self.config.keep_runs_days is not None:
            before = now - timedelta(days=self.config.keep_runs_days)
            rules += [
                lambda conn: queries.runs_prune_age(conn, before=before, batch=batch, sources=sources),
                lambda conn: queries.notifications_prune_age(conn, before=before, batch=batch, sources=sources),
            ]
        deleted = 0
        for rule in rules:
            for _ in itertools.count() if max_batches is None else range(max_batches):
                started = time.monotonic()
                async with self.store.connection() as conn:
                    count = await rule(conn)
                deleted += count
                if count < batch:
                    break
                await asyncio.sleep(time.monotonic() - started)
        if deleted:
            log.info("pruned %d finished run(s) and notification(s)", deleted, extra={"fields": {"pruned": deleted}})
        return deleted

    async def _every(
        self, stop: asyncio.Event, seconds: float, work: Callable[[], Awaitable[object]], what: str
    ) -> None:
        """`work` now and then every `seconds` until `stop`, beside serve()'s claims (the heartbeat,
        the pruner): what fails is tried again next time; a database away is the claim loop's to report."""
        while not stop.is_set():
            try:
                await work()
            except DB_FAULTS:
                pass
            except Exception as exc:  # not the database: a bug, logged with its stack
                log.warning("%s failed (%s); next try in %g s", what, one_line(exc), seconds, exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=seconds)

    async def heartbeat(self) -> None:
        """Say this engine is alive (by the database's clock), and measure this machine's clock against it."""
        host, pid, now = socket.gethostname(), os.getpid(), statement_now(self.clock)
        async with self.store.connection() as conn:
            sent = utcnow()
            [row] = await queries.engine_heartbeat(conn, engine_id=self.config.engine_id, host=host, pid=pid, now=now)
            received = utcnow()
        if isinstance(self.clock, DatabaseClock):
            self._check_offset(self.clock.measure(sent, row["database_now"], received))

    def _check_offset(self, offset: float) -> None:
        """A warning when this machine's clock goes further off the database's than max_clock_offset (and a
        line when it is back): nothing fires early or late for it, but this host's own timestamps are off."""
        bound = self.config.max_clock_offset
        off = abs(offset) > bound
        if off and not self.clock_off:
            log.warning(
                "this machine's clock is %.1f s %s the database's (more than --max-clock-offset %g s): the "
                "database's clock decides what is due, so nothing fires early or late, but timestamps this host "
                "writes outside reconciler (and its logs' times) are off by as much; check its time sync (NTP)",
                abs(offset),
                "behind" if offset > 0 else "ahead of",
                bound,
                extra={"fields": {"clock_offset_seconds": round(offset, 3)}},
            )
        elif self.clock_off and not off:
            log.info("this machine's clock is back within %g s of the database's (%+.3f s)", bound, offset)
        self.clock_off = off

    async def sleep_seconds(self, now: datetime | None) -> float:
        """Until the nearest next_run_at (by the database's clock when `now` is None), within [0, max_sleep];
        0 when manual runs are queued."""
        async with self.store.connection() as conn:
            [row] = await queries.nearest_due(conn, now=now, sources=self.config.sources)
        if row["queued"]:
            return 0.0
        if row["next_run_at"] is None:
            return self.config.max_sleep
        until: float = (row["next_run_at"] - row["now"]).total_seconds()
        return max(0.0, min(self.config.max_sleep, until))

    # ------------------------------------------------------------ serve

    @property
    def in_flight(self) -> int:
        """Claimed runs not finished: queued for a worker, firing, or resting between attempts."""
        return len(self.queue) + self.running

    def _fill(self) -> None:
        """Start workers for the queue, up to --concurrency not resting (a run waiting out a backoff
        or jitter holds its worker, but no slot: another worker takes its place)."""
        active = len(self.workers) - self.firer.resting
        for _ in range(min(len(self.queue), self.config.concurrency - active)):
            worker = asyncio.create_task(self._worker())
            self.workers.add(worker)
            worker.add_done_callback(self.workers.discard)

    async def _worker(self) -> None:
        """Fire queued runs one after another until the queue is empty, or until a run back from its
        rest makes one worker too many."""
        try:
            while self.queue and len(self.workers) - self.firer.resting <= self.config.concurrency:
                claimed = self.queue.popleft()
                self.running += 1
                try:
                    await self.execute(claimed)
                except Exception:  # a bug must not kill the engine; the lease expiry will mark the run lost
                    log.exception("run %s failed inside the engine", claimed.task_id)
                finally:
                    self.running -= 1
                if not self._slot_freed.is_set() and self.claim_room() >= self.wake_room:
                    self._slot_freed.set()  # room for a good part of a claim: not a wake-up per finished run
        finally:
            # At once, not by the done callback a loop turn later: the next worker to decide
            # whether it is one too many must not count this one.
            self.workers.discard(asyncio.current_task())

    def _pace_queue(self) -> None:
        """Size the queue from the smoothed pace and claim time (after each claim, not per run):
        `ahead`, how many claimed runs may wait for a slot, is about four claims' worth at the pace
        the slots sustain (a claim's time varies threefold under load) or QUEUE_SECONDS' worth, at
        least --concurrency, at most two batches: back-to-back claims of a full batch need one
        batch waiting while the next is claimed. A deeper queue would make runs wait for a slot past
        their lease, and keep due tasks from replicas with free slots. `wake_room`, the room that
        wakes the next claim, is a quarter of the queue (or half the slots), so there is no claim
        per finished run."""
        config = self.config
        waits = max(QUEUE_SECONDS, 4 * self._claim_seconds)
        self.ahead = min(2 * config.batch, max(config.concurrency, math.ceil(self._pace * waits)))
        self.wake_room = max(1, min(config.batch, config.concurrency) // 2, self.ahead // 4)

    def claim_room(self) -> int:
        """How many due tasks a claim may take now: the free slots plus the queue (`ahead`), less
        the runs in flight and what the claims running may take. Runs waiting out a backoff or
        jitter hold no slot and are not counted."""
        taking = sum(self.claims.values())
        return self.config.concurrency + self.ahead - (self.in_flight - self.firer.resting) - taking

    def _measure(self, report: Report) -> None:
        """Smooth the claim's duration and the pace (for claim_room).

        The pace is what the slots sustain when kept busy (Little's law: --concurrency over the mean
        time an attempt holds its slot), not the rate runs finished: a starved engine would measure
        its own starvation and keep its queue short."""
        seconds = report.seconds
        self._claim_seconds = 0.7 * self._claim_seconds + 0.3 * seconds if self._claim_seconds else seconds
        sent, held = self._paced_at
        if self.firer.sent - sent >= 20:
            pace = self.config.concurrency * (self.firer.sent - sent) / max(self.firer.slot_seconds - held, 1e-6)
            self._pace = pace if not self._pace else 0.5 * self._pace + 0.5 * pace
            self._paced_at = (self.firer.sent, self.firer.slot_seconds)
        self._pace_queue()

    async def serve(self, stop: asyncio.Event) -> None:
        """Claim and fire until `stop` is set; then drain in-flight runs (at most drain_seconds).

        Up to CLAIMS_AT_ONCE claims run at a time: on a busy loop a claim's round trips each wait a
        loop turn, so one claim at a time left the queue empty while it ran (see _may_claim)."""
        listener: psycopg.AsyncConnection[Any] | None = None
        backoff = 0.5
        # The writer ends once stopped with nothing in flight, nor claims whose runs the drain fires.
        flusher = asyncio.create_task(
            self.results.writer(lambda: stop.is_set() and not self.in_flight and not self.claims)
        )
        beside = [
            asyncio.create_task(self._every(stop, self.config.heartbeat_seconds, self.heartbeat, "heartbeat")),
            asyncio.create_task(
                self._every(
                    stop,
                    self.config.prune_seconds,
                    lambda: self.prune_runs(self.clock.now()),
                    "pruning the run history",
                )
            ),
            asyncio.create_task(
                self._every(
                    stop,
                    self.config.heartbeat_seconds,
                    leader_only(
                        self.store,
                        self.config.engine_id,
                        "late scan",
                        lambda: late_scan(self.store, statement_now(self.clock)),
                        3 * self.config.heartbeat_seconds,
                    ),
                    "late scan",
                )
            ),
        ]
        # Not cancelled at stop (a claim cut off would leave its rows leased): it ends when `stop` is set.
        delivering = asyncio.create_task(self.deliverer.run(stop))
        while not stop.is_set():
            try:
                if self._collect():  # first: claims that ended go to the queue, listener or not
                    backoff = 0.5
                if listener is None:
                    listener = await self.store.listen()
                if not self._more_due and not self.claims:  # the last claim took all that was due
                    await self._wait(listener, await self._warm_then_sleep(), stop)
                    self._more_due = True
                    continue
                limit = min(self.config.batch, self.claim_room())
                if self._may_claim(limit):
                    self.claims[asyncio.create_task(self.claim(statement_now(self.clock), limit))] = limit
                    continue
                # A claim ending or workers making room (they set the event) wake this; the timeout is a safety net.
                self._fill()  # a worker whose run came back from a rest may have stepped down
                await self._settle(stop, timeout=1.0)
            except Exception as exc:  # the database away, or a bug: log, back off, go on; never exit
                if isinstance(exc, DB_FAULTS):
                    log.warning("database unavailable (%s); retrying in %.1f s", one_line(exc), backoff)
                else:
                    log.error(
                        "claim failed (%s: %s); retrying in %.1f s",
                        type(exc).__name__,
                        one_line(exc),
                        backoff,
                        exc_info=True,
                    )
                await self.store.recover()
                if listener is not None:
                    with contextlib.suppress(Exception):
                        await listener.close()
                listener = None
                backoff = await back_off(stop, backoff)
        for task in beside:
            task.cancel()
        await asyncio.gather(*beside, delivering, return_exceptions=True)
        await self._finish_claims()
        await self.drain(flusher)
        if listener is not None:
            with contextlib.suppress(Exception):
                await listener.close()

    def _may_claim(self, limit: int) -> bool:
        """Whether to start a claim of `limit` now: some room, and if a claim is already running,
        room for a good part of a claim (`wake_room`) and fewer than CLAIMS_AT_ONCE running."""
        if limit <= 0 or (self.claims and not self._more_due):
            return False
        return not self.claims or (limit >= self.wake_room and len(self.claims) < CLAIMS_AT_ONCE)

    def _collect(self) -> int:
        """Queue the runs of the claims that ended (and start workers); then re-raise the first
        error of those that failed (one warning and one back-off however many failed together).
        The number of claims that succeeded."""
        succeeded, error = 0, None
        for task in [t for t in self.claims if t.done()]:
            limit = self.claims.pop(task)
            if task.cancelled():
                continue
            if (exc := task.exception()) is not None:
                error = error or exc
                continue
            report = task.result()
            self._measure(report)
            self.queue.extend(report.runs)
            self._fill()
            self._more_due = report.claimed_tasks >= limit  # less than asked for: nothing more is due now
            succeeded += 1
        if error is not None:
            raise error
        return succeeded

    async def _finish_claims(self) -> None:
        """At stop: the claims running end (bounded by --drain-seconds, cut short by `hurry`); their
        runs are fired in the drain like the others queued. A claim that fails or is cut off
        leaves nothing to fire."""
        await self._while_running(lambda: {t for t in self.claims if not t.done()})
        for task in self.claims:
            task.cancel()
        await asyncio.gather(*self.claims, return_exceptions=True)
        while self.claims:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                self._collect()

    async def _while_running(self, running: Callable[[], set[asyncio.Task[Any]]]) -> None:
        """Until `running()` is empty, for at most --drain-seconds, cut short by `hurry` (a second Ctrl-C)."""
        hurry = asyncio.ensure_future(self.hurry.wait())
        deadline = time.monotonic() + self.config.drain_seconds
        try:
            while (tasks := running()) and not self.hurry.is_set() and time.monotonic() < deadline:
                waiting = {*tasks, hurry}
                await asyncio.wait(waiting, timeout=deadline - time.monotonic(), return_when=asyncio.FIRST_COMPLETED)
        finally:
            hurry.cancel()

    async def _settle(self, stop: asyncio.Event, timeout: float) -> None:
        """Until a claim ends, `stop`, `timeout`, or workers make room for a claim (`_slot_freed`;
        not waited for when no claim could start on room: a wake-up per finished run)."""
        self._slot_freed.clear()
        waiters = [asyncio.ensure_future(stop.wait())]
        if len(self.claims) < CLAIMS_AT_ONCE and self._more_due:
            waiters.append(asyncio.ensure_future(self._slot_freed.wait()))
        try:
            await asyncio.wait([*self.claims, *waiters], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _warm_then_sleep(self) -> float:
        """The seconds to sleep, less what validating soon-due specs (in idle time only) took."""
        seconds = await self.sleep_seconds(statement_now(self.clock))
        if seconds < WARM_MIN_SLEEP:
            return seconds
        started = time.monotonic()
        until = self.clock.now() + timedelta(seconds=max(seconds, WARM_HORIZON))
        await self.claimer.warm(until, budget=min(WARM_BUDGET, seconds / 4))
        return max(0.0, seconds - (time.monotonic() - started))

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
        await self._while_running(lambda: {*self.workers, *self.deliverer.sending})
        left = self.in_flight
        self.queue.clear()  # stopped now: these runs, and those cut off below, end `lost` when their leases expire
        for worker in list(self.workers):
            worker.cancel()
        await asyncio.gather(*self.workers, return_exceptions=True)
        if left:
            log.warning("stopped with %d run(s) in flight; they are recorded lost when their leases expire", left)
        self.results.wake()
        try:
            await asyncio.wait_for(
                asyncio.shield(flusher), timeout=1.0 if self.hurry.is_set() else self.config.drain_seconds
            )
        except TimeoutError:
            flusher.cancel()
            if self.results.pending:
                log.warning(
                    "%d result(s) could not be written before exit; their leases will expire",
                    len(self.results.pending),
                )
        with contextlib.suppress(Exception):  # the goodbye is a courtesy: heartbeats expire anyway
            async with self.store.connection() as conn:
                await queries.engine_gone(conn, engine_id=self.config.engine_id)
        await self.deliverer.finish()
        await self.firer.close()
