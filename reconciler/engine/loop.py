"""The engine: `run_once(now)` claims and fires; `serve()` loops around it, and drains at stop. Nothing
else schedules.

The claim (`claim.py`) is one transaction that decides what to fire; only after it commits are
requests sent (`runner.py`), and their results are written in batches (`results.py`). The queue's
pacing is `pacing.py`'s; the heartbeat, retention and the late scan are `upkeep.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from reconciler.clock import DATABASE, Clock, statement_now
from reconciler.db import queries
from reconciler.db.failover import RECONNECT_CAP_SECONDS
from reconciler.db.initialize import Initialized
from reconciler.db.store import DB_FAULTS, Store
from reconciler.engine.claim import Claimed, Claimer, Report
from reconciler.engine.config import EngineConfig
from reconciler.engine.jobs import Jobs
from reconciler.engine.listener import Listener
from reconciler.engine.outage import Outage
from reconciler.engine.pacing import CLAIMS_AT_ONCE, Pacer
from reconciler.engine.results import Results
from reconciler.engine.runner import Observer, execute
from reconciler.engine.upkeep import Upkeep
from reconciler.errors import one_line
from reconciler.notify.delivery import Deliverer
from reconciler.spec.backoff import backoff_delay
from reconciler.spec.environment import EnvPolicy
from reconciler.targets.http import Firer, Outcome
from reconciler.tracing import Tracer

__all__ = ["Engine", "EngineConfig", "Observer", "back_off", "default_engine_id"]

log = logging.getLogger("reconciler.engine")

# Idle time is spent validating the specs of tasks due within WARM_HORIZON, WARM_BUDGET at a
# time (a NOTIFY waits that long at most), when the engine would sleep at least WARM_MIN_SLEEP.
WARM_HORIZON = 120.0
WARM_BUDGET = 0.2
WARM_MIN_SLEEP = 0.5
# Seconds: the longest wait between claims while the database is away (each try waits up to the
# pool's timeout for a connection, and the pool reconnects every RECONNECT_CAP_SECONDS at most), and
# after a claim failed for another reason (a bug: logged each time).
RECONNECT_CAP = RECONNECT_CAP_SECONDS
ERROR_CAP = 10.0
# Seconds: at stop, how long the work nobody waits for (the claim loop's own reads, the outbox's claim) may take to
# end before it is cut off, and how long past --drain-seconds the results and the goodbye may take. Every wait at
# stop is bounded by these (a database gone for good made each wait out the pool's timeout): an engine exits within
# --drain-seconds + 1 s.
STOP_GRACE = 0.5


async def back_off(stop: asyncio.Event, seconds: float, cap: float = RECONNECT_CAP) -> float:
    """Wait `seconds` (less if `stop` is set); the next, doubled wait, at most `cap`."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return backoff_delay(seconds, 2, cap=cap)


def default_engine_id(environ: Mapping[str, str] = os.environ) -> str:
    """The id of an engine started without --engine-id: POD_NAME as is (Kubernetes sets it from the
    pod's name: one engine per pod, and a container restarted in its pod keeps its id), else
    HOST-PID (unique among the engines of one host, new at each start)."""
    return environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


class Engine:
    """One engine: claims (claim.py) and fires (runner.py) in serve()'s loop, paced (pacing.py), beside its
    upkeep (upkeep.py), and drains at stop."""

    def __init__(
        self,
        store: Store,
        config: EngineConfig,
        firer: Firer | None = None,
        clock: Clock = DATABASE,
        tracer: Tracer | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.firer = firer or Firer(concurrency=config.concurrency, policy=EnvPolicy(config.allow_env))
        self.tracer = tracer or Tracer()  # spans of runs (tracing.py): none unless OpenTelemetry's is given
        self.firer.tracer = self.tracer
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
        self.pacer = Pacer(config.concurrency, config.batch)  # the queue's size, when a claim may start
        self.claims: dict[asyncio.Task[Report], int] = {}  # claims running in serve(), and the most each may take
        self._more_due = True  # the last claim to end took all it asked for: more may be due
        self.observers: list[Observer] = []
        # heartbeat, retention, late scan; the heartbeat says whether LISTEN is up (for `status` and /engines)
        # callbacks (web/callbacks.py) and overdue jobs
        self.jobs = Jobs(store, EnvPolicy(config.allow_env), tracer=self.tracer)
        self.upkeep = Upkeep(store, config, lambda: self.clock, self.jobs, lambda: self.listener.connected)
        self.outage = Outage()  # the database's state, logged once per change
        self.listener = Listener(store, config.listen_dsn)  # NOTIFYs wake the claim loop (see listener.py)
        self.firing: set[int] = set()  # the run ids the workers are firing (those resting between attempts too)
        self.in_doubt = False  # a claim failed on the database: it may have committed all the same (see adopt)
        self.since: datetime | None = None  # the database's clock when serve() began (see adopt)
        self.recovering = False  # a fault interrupted the loop: results and claims in doubt come first

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
        """Fire one claimed run and record its result (see runner.py)."""
        return await execute(
            claimed,
            store=self.store,
            firer=self.firer,
            results=self.results,
            clock=self.clock,
            observers=self.observers,
            public_url=self.config.public_url,
        )

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
        """One pass over the run history and the outbox (see Upkeep.prune_runs)."""
        return await self.upkeep.prune_runs(now, max_batches)

    async def maintain_partitions(self, now: datetime) -> Initialized:
        """One pass over the partitions (see Upkeep.maintain_partitions)."""
        return await self.upkeep.maintain_partitions(now)

    async def heartbeat(self) -> None:
        """Say this engine is alive, and measure this machine's clock against the database's (see upkeep.py)."""
        await self.upkeep.heartbeat()

    @property
    def clock_off(self) -> bool:
        """The last heartbeat found this machine's clock past max_clock_offset."""
        return self.upkeep.clock_off

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
                self.firing.add(claimed.run_id)
                try:
                    await self.execute(claimed)
                except Exception:  # a bug must not kill the engine; the lease expiry will mark the run lost
                    log.exception("run %s failed inside the engine", claimed.task_id)
                finally:
                    self.running -= 1
                    self.firing.discard(claimed.run_id)
                if not self._slot_freed.is_set() and self.claim_room() >= self.pacer.wake_room:
                    self._slot_freed.set()  # room for a good part of a claim: not a wake-up per finished run
        finally:
            # At once, not by the done callback a loop turn later: the next worker to decide
            # whether it is one too many must not count this one.
            self.workers.discard(asyncio.current_task())

    def claim_room(self) -> int:
        """How many due tasks a claim may take now (see Pacer.room): runs waiting out a backoff or
        jitter hold no slot."""
        return self.pacer.room(self.in_flight - self.firer.resting, sum(self.claims.values()))

    async def serve(self, stop: asyncio.Event) -> None:
        """Claim and fire until `stop` is set; then drain in-flight runs (at most drain_seconds).

        Up to CLAIMS_AT_ONCE claims run at a time: on a busy loop a claim's round trips each wait a
        loop turn, so one claim at a time left the queue empty while it ran (see _may_claim). Stopping is bounded:
        see STOP_GRACE."""
        # The writer ends once stopped with nothing in flight, nor claims whose runs the drain fires.
        flusher = asyncio.create_task(
            self.results.writer(lambda: stop.is_set() and not self.in_flight and not self.claims)
        )
        beside = self.upkeep.start(stop)
        # Given STOP_GRACE at stop (an outbox claim cut off leaves its rows to their lease): it ends when `stop` is set.
        delivering = asyncio.create_task(self.deliverer.run(stop))
        listening = asyncio.create_task(self.listener.run(stop))
        looping = asyncio.create_task(self._claim_loop(stop))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([looping, stopped], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        deadline = time.monotonic() + self.config.drain_seconds  # runs in flight and claims end by then
        for task in [*beside, listening]:
            task.cancel()
        # The claim loop may be waiting for a pooled connection (the database away: up to the pool's timeout) and
        # the outbox may be claiming: a moment to end, then cut off. Claims (tasks of their own) go on.
        await ended_by([looping, delivering], time.monotonic() + STOP_GRACE)
        await asyncio.gather(*beside, listening, return_exceptions=True)
        await self._finish_claims(deadline)
        await self.drain(flusher, deadline)

    async def _claim_loop(self, stop: asyncio.Event) -> None:
        """Claim, queue what is claimed and sleep until `stop` (cut off at stop: see serve)."""
        backoff = 0.5
        while not stop.is_set():
            try:
                # The database is back (when it was away) once a statement on a pooled connection went
                # through: a claim, or the query of how long to sleep.
                if self._collect():  # first: claims that ended go to the queue
                    backoff = 0.5
                    self.outage.answered()
                if self.since is None:
                    async with self.store.connection() as conn:
                        [row] = await queries.clock_now(conn)
                    self.since = row["now"]
                if self.recovering and not self.claims:
                    # Back from a fault: results first (their runs' slots are free again before this
                    # engine claims), then the runs of a claim that committed unseen.
                    await self.results.flush()
                    if self.in_doubt:
                        await self.adopt()
                    self.recovering = False
                if not self._more_due and not self.claims:  # the last claim took all that was due
                    seconds = await self._warm_then_sleep()
                    self.outage.answered()
                    await self._wait(seconds, stop)
                    self._more_due = True
                    continue
                limit = min(self.config.batch, self.claim_room())
                if self.pacer.may_claim(limit, len(self.claims), self._more_due):
                    self.claims[asyncio.create_task(self.claim(statement_now(self.clock), limit))] = limit
                    continue
                # A claim ending or workers making room (they set the event) wake this; the timeout is a safety net.
                self._fill()  # a worker whose run came back from a rest may have stepped down
                await self._settle(stop, timeout=1.0)
            except Exception as exc:  # the database away, or a bug: log, back off, go on; never exit
                if isinstance(exc, DB_FAULTS):
                    self.outage.failed(self.store.unavailable(exc))  # a line when the outage starts, one a minute
                else:
                    log.error(
                        "claim failed (%s: %s); retrying in %.1f s",
                        type(exc).__name__,
                        one_line(exc),
                        backoff,
                        exc_info=True,
                    )
                self.recovering = True
                await self.store.recover()
                backoff = await back_off(stop, backoff, RECONNECT_CAP if isinstance(exc, DB_FAULTS) else ERROR_CAP)

    async def adopt(self) -> int:
        """After the database cut a claim off: fire the runs of such a claim that committed all the same
        (its answer lost with the connection), which nobody else may fire while their leases last. How many."""
        known = [*(run.run_id for run in self.queue), *self.firing, *self.results.finished()]
        assert self.since is not None
        runs = await self.claimer.adopt(self.since, known)
        self.in_doubt = False
        if runs:
            log.warning(
                "%d run(s) of a claim whose commit went through while its answer was lost with the connection: "
                "firing them now",
                len(runs),
                extra={"fields": {"adopted": len(runs)}},
            )
            self.queue.extend(runs)
            self._fill()
        return len(runs)

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
                # Cut off by the database, a claim may have committed without its answer reaching us.
                self.in_doubt = self.in_doubt or isinstance(exc, DB_FAULTS)
                error = error or exc
                continue
            report = task.result()
            self.pacer.measure(report.seconds, self.firer.sent, self.firer.slot_seconds)
            self.queue.extend(report.runs)
            self._fill()
            self._more_due = report.claimed_tasks >= limit  # less than asked for: nothing more is due now
            succeeded += 1
        if error is not None:
            raise error
        return succeeded

    async def _finish_claims(self, deadline: float) -> None:
        """At stop: the claims running end (by `deadline`, cut short by `hurry`); their runs are fired in the drain
        like the others queued. A claim that fails or is cut off leaves nothing to fire."""
        await self._while_running(lambda: {t for t in self.claims if not t.done()}, deadline)
        for task in self.claims:
            task.cancel()
        await asyncio.gather(*self.claims, return_exceptions=True)
        while self.claims:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                self._collect()

    async def _while_running(self, running: Callable[[], set[asyncio.Task[Any]]], deadline: float) -> None:
        """Until `running()` is empty, at most until `deadline` (monotonic), cut short by `hurry` (a second Ctrl-C)."""
        hurry = asyncio.ensure_future(self.hurry.wait())
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

    async def _wait(self, seconds: float, stop: asyncio.Event) -> None:
        """Sleep up to `seconds` (at most the listener's poll interval while it is down), woken early by
        a NOTIFY or by `stop`."""
        seconds = self.listener.sleep_cap(seconds)
        if seconds <= 0:
            return
        waiters = [asyncio.ensure_future(self.listener.woken.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waiters:
                task.cancel()
            self.listener.woken.clear()

    async def drain(self, flusher: asyncio.Task[None], deadline: float) -> None:
        """Let in-flight runs finish (by `deadline`, cut short by `hurry`), write their results and say goodbye
        (by STOP_GRACE past it, or past the runs' end when that was sooner: a second Ctrl-C)."""
        await self._while_running(lambda: {*self.workers, *self.deliverer.sending}, deadline)
        left = self.in_flight
        self.queue.clear()  # stopped now: these runs, and those cut off below, end `lost` when their leases expire
        for worker in list(self.workers):
            worker.cancel()
        await asyncio.gather(*self.workers, return_exceptions=True)
        if left:
            log.warning("stopped with %d run(s) in flight; they are recorded lost when their leases expire", left)
        self.results.wake()
        final = (time.monotonic() if self.hurry.is_set() else max(deadline, time.monotonic())) + STOP_GRACE
        await ended_by([flusher], final)
        if self.results.pending:
            log.warning(
                "%d result(s) could not be written before exit; their leases will expire", len(self.results.pending)
            )
        if self.outage.down:  # not another wait for the pool's timeout: the row expires with its heartbeat
            log.info("stopping without the database (unavailable): this engine's row expires with its heartbeat")
        else:
            with contextlib.suppress(Exception):  # the goodbye is a courtesy: heartbeats expire anyway
                await asyncio.wait_for(self._goodbye(), timeout=max(0.0, final - time.monotonic()))
        try:  # its sends cut off are released to other engines (or left to their lease, when that takes too long)
            await asyncio.wait_for(self.deliverer.finish(), timeout=max(STOP_GRACE / 5, final - time.monotonic()))
        except TimeoutError:
            await self.deliverer.firer.close()
        await self.firer.close()

    async def _goodbye(self) -> None:
        async with self.store.connection() as conn:
            await queries.engine_gone(conn, engine_id=self.config.engine_id)


async def ended_by(tasks: list[asyncio.Task[Any]], until: float) -> None:
    """Wait for `tasks` until `until` (monotonic); those still running then are cancelled."""
    if running := [task for task in tasks if not task.done()]:
        await asyncio.wait(running, timeout=max(0.0, until - time.monotonic()))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
