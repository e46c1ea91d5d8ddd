"""Jobs (docs/jobs.md): a callback task's run stays `running` after its target accepts it, until the job reports
(`POST …/heartbeat`, `POST …/complete` to any engine) or passes its deadline or heartbeat timeout (any engine's
upkeep ends it `timed_out`). Its state is in the database, by the database's clock; an engine holds none of it.

Each attempt has its own token (≥ 128 random bits) in its callback URL; only its sha256 is stored and a given
token is compared to it in constant time. A `failed` or `timed_out` job with retries left is queued again (the
same row: the same Idempotency-Key) for its backoff; the claim that starts it sends the next attempt with a new
token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from reconciler.clock import utc_iso
from reconciler.db import job_queries
from reconciler.db.job_queries import CallbackRow, JobRow
from reconciler.db.rows import Conn
from reconciler.db.statements import Statement
from reconciler.db.store import DB_FAULTS, Store
from reconciler.notify.events import Ended, ended_of, record_ended
from reconciler.spec.backoff import backoff_delay
from reconciler.spec.environment import EnvPolicy
from reconciler.spec.values import EnvRef
from reconciler.targets.http import MAX_RETRY_AFTER, Attempt, NotPrepared
from reconciler.targets.secrets import EnvProblem, RunSecrets, storable
from reconciler.tracing import RunEnd, RunTrace, Tracer

log = logging.getLogger("reconciler.engine")

TOKEN_BYTES = 32  # 256 random bits
TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(TOKEN_BYTES)
CALLBACK_HEADER = "X-Reconciler-Callback"
OVERDUE_BATCH = 100  # jobs one upkeep transaction ends
MAX_ERROR = 4096  # characters of a completion's error kept
ACCEPT_RETRY_SECONDS, ACCEPT_RETRY_CAP = 0.2, 5.0  # the first and the longest wait to record an acceptance again
NO_PUBLIC_URL = (
    'completion = "callback" needs the engine\'s public address for the job to report to: start every engine '
    "with --public-url URL (or RECONCILER_PUBLIC_URL); see docs/jobs.md"
)


def new_token() -> tuple[str, str]:
    """A fresh attempt token and its hash (the only form stored)."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return token, token_hash(token)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def callback_url(base: str, run_id: int, token: str) -> str:
    """`<public url>/runs/<run id>/<token>`: the job POSTs to …/heartbeat and …/complete under it."""
    return f"{base.rstrip('/')}/runs/{run_id}/{token}"


@dataclass(frozen=True)
class Answer:
    """A callback's answer: the HTTP status and its JSON body."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


NOT_FOUND = Answer(404, {"error": "no such run, or not its token"})


def retry_wait(policy: Any, attempt: int) -> float | None:
    """The backoff before a failed or timed-out job's next attempt; None when its retries are spent. The
    stored policy is read defensively (a hand edit may store anything)."""
    policy = policy if isinstance(policy, dict) else {}
    retries, base = policy.get("retries", 0), policy.get("retry_backoff_seconds", 5)
    if not isinstance(retries, int) or isinstance(retries, bool) or attempt > retries:
        return None
    base = float(base) if isinstance(base, int | float) and math.isfinite(base) and base >= 0 else 5.0
    return min(backoff_delay(base, attempt), MAX_RETRY_AFTER)


def scrubber(target: Any, env: Mapping[str, str], policy: EnvPolicy) -> RunSecrets:
    """The secrets a task's requests carry (the variables its stored target names), to scrub from what its job
    reports before it is stored."""
    found = RunSecrets(env, policy)
    stack = [target]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if set(item) == {"env"} and isinstance(item["env"], str):
                with contextlib.suppress(EnvProblem, ValueError):  # a variable it may not read, or unset
                    found.resolve(EnvRef(env=item["env"]), "target")
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def clean(value: Any, run: RunSecrets) -> Any:
    """A reported JSON value as stored: secrets scrubbed from every string (keys too), NUL and lone
    surrogates (which PostgreSQL's jsonb refuses) replaced."""
    if isinstance(value, str):
        text = value.encode("utf-8", "replace").decode("utf-8")
        return storable(run.scrub(text) if run.values else text)
    if isinstance(value, dict):
        return {clean(str(k), run): clean(v, run) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v, run) for v in value]
    return value


def recorded(row: CallbackRow) -> dict[str, Any]:
    """What a repeated callback is told: the outcome recorded."""
    body: dict[str, Any] = {"status": row["status"], "attempt": row["attempt"]}
    if row["output"] is not None:
        body["output"] = row["output"]
    if row["error"]:
        body["error"] = row["error"]
    if row["status"] == "queued" and row["retry_at"] is not None:
        body["retry_at"] = utc_iso(row["retry_at"])
    return body


def trace_of(row: JobRow) -> RunTrace:
    """A job's run's place in its trace."""
    return RunTrace.of(row["id"], row["trace_id"], row["traceparent"])


def still_on(locked: tuple[str, str | None] | None, row: CallbackRow) -> bool:
    """Whether the attempt a callback read is still on once its row is locked: neither ended nor retried since."""
    return locked is not None and locked[1] == row["callback_hash"] and locked[0] in ("running", "lost")


class Jobs:
    """The callbacks' and the upkeep's side of jobs, on any engine."""

    def __init__(
        self,
        store: Store,
        policy: EnvPolicy | None = None,
        env: Mapping[str, str] | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.store = store
        self.tracer = tracer or Tracer()  # callbacks and the jobs' ends join their runs' traces
        self.policy = policy or EnvPolicy()
        self.env: Mapping[str, str] = env if env is not None else os.environ
        # Told of each callback answered (route, HTTP status) and each job this engine ended (task id, status,
        # seconds since its target accepted it): the metrics.
        self.on_callback: list[Callable[[str, int], None]] = []
        self.on_ended: list[Callable[[str, str, float], None]] = []

    def _count(self, route: str, answer: Answer) -> Answer:
        for observer in self.on_callback:
            observer(route, answer.status)
        return answer

    async def _find(self, run_id: int, token: str) -> CallbackRow | None:
        """The run whose current attempt's token this is (compared in constant time); None otherwise."""
        if not TOKEN.fullmatch(token):
            return None
        async with self.store.connection() as conn:
            row = await job_queries.job_get(conn, run_id=run_id)
        stored = row["callback_hash"] if row is not None else None
        if row is None or stored is None or not hmac.compare_digest(token_hash(token), stored):
            return None
        return row

    @staticmethod
    def _standing(row: CallbackRow) -> Answer | None:
        """The answer to a callback on an attempt that is over (None: it is still on): 409 once it reported (a repeat),
        410 once it timed out or its deadline passed."""
        reported = Answer(409, {"error": "the job has reported its outcome already", **recorded(row)})
        if row["status"] in ("succeeded", "failed"):
            return reported
        if row["status"] == "timed_out" or (row["deadline_at"] is not None and row["deadline_at"] <= row["now"]):
            return Answer(410, {"error": "the job's deadline has passed", **recorded(row)})
        if row["status"] not in ("running", "lost"):  # a late result still wins over lost, as a response does
            return reported
        return None

    async def heartbeat(self, run_id: int, token: str, progress: Any) -> Answer:
        """`POST …/heartbeat`: the job is alive (its heartbeat timeout starts again), with its progress."""

        async def beat(conn: Conn, row: CallbackRow, secrets: RunSecrets) -> Answer:
            stored = None if progress is None else clean(progress, secrets)
            await job_queries.write(conn, [job_queries.job_heartbeat(run_id=run_id, progress=stored)])
            return Answer(200, {"status": "running"})

        return await self._on_attempt("heartbeat", run_id, token, beat)

    async def complete(self, run_id: int, token: str, status: str, output: Any, error: str | None) -> Answer:
        """`POST …/complete`: the job's outcome. The first completion wins."""

        async def end(conn: Conn, row: CallbackRow, secrets: RunSecrets) -> Answer:
            reason = None if error is None else clean(error[:MAX_ERROR], secrets)
            if status == "failed" and not reason:
                reason = "the job reported failed"
            stored = None if output is None else clean(output, secrets)
            final = await self._end(conn, row, status, reason, stored)
            return Answer(200, {"status": final, **({"retrying": True} if final == "queued" else {})})

        return await self._on_attempt("complete", run_id, token, end)

    async def _on_attempt(
        self, route: str, run_id: int, token: str, act: Callable[[Conn, CallbackRow, RunSecrets], Awaitable[Answer]]
    ) -> Answer:
        """`act` on the attempt this token is for, in a transaction holding its run's row, while the attempt is on;
        else the answer to a callback on an attempt that is over, or to a wrong token. Counted, and a span of the
        run's trace when its token was right."""
        row = await self._find(run_id, token)
        if row is None:
            return self._count(route, NOT_FOUND)
        answer = self._standing(row)
        if answer is None:
            secrets = scrubber(row["target"], self.env, self.policy)
            async with self.store.pipelined_transaction() as conn:
                if still_on(await job_queries.job_lock(conn, run_id=run_id), row):
                    answer = await act(conn, row, secrets)
            if answer is None:
                # a racing callback or the upkeep ended the attempt first: answer as to a callback after it
                again = await self._find(run_id, token)
                answer = NOT_FOUND if again is None else self._standing(again) or NOT_FOUND
        if self.tracer.enabled:
            self.tracer.callback(trace_of(row), route, answer.status)
        return self._count(route, answer)

    async def _end(self, conn: Conn, row: JobRow, status: str, error: str | None, output: Any) -> str:
        """End a job's attempt in the caller's transaction: retried (queued) when it failed or timed out with
        retries left, else final, with its notifications. The status the run has now."""
        wait = retry_wait(row["policy"], row["attempt"]) if status != "succeeded" else None
        statements: list[Statement]
        if wait is not None:
            statements = job_queries.job_retry(
                run_id=row["id"], wait=wait, error=error, output=output, timed_out=status == "timed_out"
            )
            await job_queries.write(conn, statements)
            return "queued"
        statements = job_queries.job_end(run_id=row["id"], status=status, error=error, output=output)
        await job_queries.write(conn, statements)
        if self.tracer.enabled:
            self._span(row, status, error)
        found = ended_of(None, row["notify"])
        if found is not None:
            detail = {"error": error, "attempt": row["attempt"]}
            ended = Ended(row["task_id"], row["id"], row["scheduled_for"], status, *found, detail=detail)
            await record_ended(conn, [ended], row["now"])
        seconds = max(0.0, (row["now"] - (row["accepted_at"] or row["now"])).total_seconds())
        for observer in self.on_ended:
            observer(row["task_id"], status, seconds)
        return status

    def _span(self, row: JobRow, status: str, error: str | None) -> None:
        """The run's span, now that its job has ended: from its first request to now, by the database's clock."""
        ended = row["now"].timestamp()
        started = row["started_at"].timestamp() if row["started_at"] is not None else ended
        scheduled = utc_iso(row["scheduled_for"])
        end = RunEnd(
            trace_of(row), row["task_id"], row["kind"], scheduled, status, started, ended, row["attempt"], error
        )
        self.tracer.run(end)

    async def end_overdue(self, now: datetime | None = None, limit: int = OVERDUE_BATCH) -> int:
        """End the jobs past their deadline or heartbeat timeout (`timed_out`, or queued for a retry); how many."""
        async with self.store.pipelined_transaction() as conn:
            rows = await job_queries.jobs_overdue(conn, limit=limit, now=now)
            for row in rows:
                past = row["deadline_at"] is not None and row["deadline_at"] <= row["now"]
                beat = row["heartbeat_seconds"]
                error = (
                    "timed out: no completion by the job's deadline"
                    if past or beat is None
                    else f"timed out: no heartbeat for {beat:g} s (heartbeat_timeout)"
                )
                await self._end(conn, row, "timed_out", error, None)
        for row in rows:
            log.warning("run %s (run %d) timed out", row["task_id"], row["id"], extra={"fields": {"run_id": row["id"]}})
        return len(rows)


class JobAttempts:
    """The engine's side of one job's attempts: each gets a new token, recorded before its request leaves (the job
    may report before its 202 is read), and a 2xx makes the run's lease the job's."""

    def __init__(self, store: Store, run_id: int, base: str, deadline: float, heartbeat: float | None) -> None:
        self.store = store
        self.run_id = run_id
        self.base = base
        self.deadline = deadline
        self.heartbeat = heartbeat
        self.hash: str | None = None  # the last attempt's token's

    async def prepare(self, attempt: int) -> tuple[dict[str, str], tuple[str, ...]]:
        """The attempt's callback header (and its token, a secret), once its token is recorded."""
        token, self.hash = new_token()
        try:
            async with self.store.connection() as conn:
                ready = await job_queries.job_attempt(
                    conn,
                    run_id=self.run_id,
                    attempt=attempt,
                    token_hash=self.hash,
                    deadline=self.deadline,
                    heartbeat=self.heartbeat,
                )
        except Exception as exc:  # the database away: this attempt is not sent, and retried as a connect error is
            raise NotPrepared(f"not sent: the job's token could not be recorded ({type(exc).__name__})") from None
        if not ready:
            raise NotPrepared("not sent: the run is no longer running", transient=False)
        url = callback_url(self.base, self.run_id, token)
        return {CALLBACK_HEADER: url}, (token, url)

    async def accepted(self, attempt: Attempt, until: float | None) -> bool:
        """Record that the target accepted the job (retried while the database is away, until `until`, the
        run's lease's end by time.monotonic(): then the run ends lost, and the job's completion still lands)."""
        assert self.hash is not None
        started = datetime.fromtimestamp(attempt.sent_at, UTC) if attempt.sent_at else None
        tries = 0
        while True:
            tries += 1
            try:
                async with self.store.connection() as conn:
                    return await job_queries.job_accepted(
                        conn,
                        run_id=self.run_id,
                        token_hash=self.hash,
                        http_status=attempt.http_status,
                        excerpt=storable(attempt.excerpt),
                        started_at=started,
                        duration_ms=attempt.duration_ms,
                    )
            except DB_FAULTS:
                wait = backoff_delay(ACCEPT_RETRY_SECONDS, tries, cap=ACCEPT_RETRY_CAP)
                if until is not None and time.monotonic() + wait >= until:
                    return False
                await asyncio.sleep(wait)
