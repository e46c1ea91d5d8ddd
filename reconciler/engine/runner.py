"""Running one claimed run: fire it (targets/http.py), queue its result for the writer (results.py),
log it and tell the observers. Whatever goes wrong is that run's `failed` result; the engine goes on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol

from reconciler.clock import DATABASE, Clock, utc_iso, utc_text
from reconciler.db import queries
from reconciler.db.store import Store
from reconciler.engine.claim import Claimed, Report
from reconciler.engine.jobs import NO_PUBLIC_URL, JobAttempts
from reconciler.engine.limits import retry_token
from reconciler.engine.results import Results, attempt_params
from reconciler.notify.events import Ended, ended_of
from reconciler.targets.http import Attempt, Firer, Outcome
from reconciler.targets.request import Request
from reconciler.tracing import RunEnd

log = logging.getLogger("reconciler.engine")
clock_seconds = DATABASE.timestamp  # a run span's times, by the database's clock


class Observer(Protocol):
    """Told of every claim and every finished run (metrics, `up`'s run lines)."""

    def claimed(self, report: Report) -> None: ...

    def finished(self, claimed: Claimed, outcome: Outcome) -> None: ...


async def execute(
    claimed: Claimed,
    *,
    store: Store,
    firer: Firer,
    results: Results,
    clock: Clock,
    observers: Sequence[Observer],
    public_url: str | None = None,
) -> Outcome:
    """Fire one claimed run and queue its result; whatever goes wrong is this run's `failed` result. A job
    (completion = "callback") its target accepted has no result yet: it reports its own (see jobs.py)."""

    async def on_attempt(attempt: Attempt) -> None:
        with contextlib.suppress(Exception):  # progress only; the final result is written anyway
            async with store.connection() as conn:
                await queries.run_attempt(conn, **attempt_params(claimed.run_id, claimed.scheduled_for, attempt))

    async def token() -> float:
        async with store.transaction() as conn:
            return await retry_token(conn, claimed.rated)

    # Progress is written between attempts: a run of one attempt has none to write.
    progress = on_attempt if claimed.spec.policy.retries else None
    target, job, started = claimed.spec.target, None, clock_seconds()
    if target.callback and public_url is not None:
        assert target.deadline_seconds is not None
        job = JobAttempts(store, claimed.run_id, public_url, target.deadline_seconds, target.heartbeat_seconds)
    trace = firer.tracer.sampled(claimed.trace())
    try:
        if target.callback and job is None:
            outcome = Outcome("failed", [Attempt(claimed.first_attempt, error=NO_PUBLIC_URL)])
        else:
            request = Request(
                target,
                claimed.task_id,
                claimed.scheduled_for,
                claimed.key,
                job.prepare if job is not None else None,
                claimed.run_id,
                claimed.kind,
                trace,
                target.signing,
            )
            outcome = await firer.fire(
                request,
                claimed.spec,
                progress,
                claimed.deadline,
                token if claimed.rated else None,
                claimed.first_token,
                claimed.first_attempt,
            )
    except Exception as exc:  # a bug in firing: recorded on this run, the engine goes on
        log.error("run %s failed inside the engine: %s", claimed.task_id, type(exc).__name__, exc_info=True)
        outcome = Outcome("failed", [Attempt(1, error=f"engine error while firing: {type(exc).__name__}")])
    if outcome.status == "accepted" and job is not None:
        await job.accepted(outcome.last, claimed.deadline)
        log_outcome(claimed, outcome, "accepted; the job reports its outcome")
        for observer in observers:
            observer.finished(claimed, outcome)
        return outcome
    result = {**attempt_params(claimed.run_id, claimed.scheduled_for, outcome.last), "status": outcome.status}
    result["finished_at"] = clock.now()
    if claimed.spec.notify is not None and (found := ended_of(claimed.spec, None)):
        detail = {
            "http_status": outcome.last.http_status,
            "error": result["error"],
            "attempt": outcome.last.attempt,
        }
        result["ended"] = Ended(claimed.task_id, claimed.run_id, claimed.scheduled_for, outcome.status, *found, detail)
    results.add(result)
    if firer.tracer.enabled:
        last = outcome.last
        firer.tracer.run(
            RunEnd(
                trace,
                claimed.task_id,
                claimed.kind,
                utc_iso(claimed.scheduled_for),
                outcome.status,
                started,
                clock_seconds(),
                last.attempt,
                last.error,
                last.http_status,
            )
        )
    log_outcome(claimed, outcome, outcome.status)
    for observer in observers:
        observer.finished(claimed, outcome)
    return outcome


def log_outcome(claimed: Claimed, outcome: Outcome, what: str) -> None:
    """The run's line: INFO when it succeeded (or its job was accepted), else WARNING."""
    last = outcome.last
    log.log(
        logging.WARNING if outcome.status == "failed" else logging.INFO,
        "run %s (%s %s, run %d) %s: %s, attempt %d, %d ms",
        claimed.task_id,
        claimed.kind,
        utc_text(claimed.scheduled_for),
        claimed.run_id,
        what,
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
