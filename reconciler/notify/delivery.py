"""Delivery of the `scheduler.notifications` outbox (its rows are notify.py's): every engine claims due
rows of its sources with SKIP LOCKED, sends each on a session and slots of its own (a notifier that
is down never holds a task's firing slot), and records each send's outcome as it ends; failures are
retried with backoff, one Idempotency-Key per row for all its attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from pydantic import ValidationError

from reconciler.clock import DATABASE, Clock, statement_now
from reconciler.db import notify_queries
from reconciler.db.notify_queries import NotificationRow
from reconciler.db.store import DB_FAULTS, Store
from reconciler.errors import one_line
from reconciler.spec.backoff import backoff_delay
from reconciler.spec.environment import EnvPolicy
from reconciler.spec.notifier import SlackNotifier, WebhookNotifier, parse_spec
from reconciler.spec.target import Target
from reconciler.targets.http import Attempt, Firer
from reconciler.targets.request import Request

log = logging.getLogger("reconciler.engine")

NOTIFY_ATTEMPTS = 10  # then the notification is `failed`
NOTIFY_BACKOFF = 2.0  # seconds before the 2nd attempt, doubling (2, 4, … 512 s: about 17 minutes in all)
NOTIFY_POLL_SECONDS = 1.0  # how often each engine looks for due notifications (and when a send ends)
NOTIFY_CONCURRENCY = 10  # sent at a time per engine, on a session of their own: never a firing slot
PER_NOTIFIER = 3  # of those, one notifier's at most: one that hangs leaves the other slots to the others
LEASE_MARGIN = 30.0  # a claimed notification is another engine's to send this long after its timeout


class DeliveryObserver(Protocol):
    """Told of every delivery attempt (metrics): outcome delivered, retry or failed."""

    def notified(self, notifier: str, event: str, outcome: str) -> None: ...


def slack_text(body: Mapping[str, Any]) -> str:
    """A readable Slack message of an event."""
    event, task = body.get("event"), body.get("task_id")
    when = body.get("scheduled_for")
    head = {
        "failure": ":red_circle: *{task}* failed",
        "lost": ":red_circle: *{task}*: run lost (its engine stopped)",
        "recovery": ":large_green_circle: *{task}* recovered",
        "missed": ":warning: *{task}* missed {missed} occurrence(s)",
        "late": ":warning: *{task}* is late: not started {late_seconds} s after it was due",
    }.get(str(event), "*{task}*: {event}")
    text = head.format(task=task, event=event, missed=body.get("missed"), late_seconds=body.get("late_seconds"))
    details = [f"scheduled for {when}" if when else "", f"run {body['run_id']}" if body.get("run_id") else ""]
    error = body.get("error") or (f"HTTP {body['http_status']}" if body.get("http_status") else "")
    details.append(str(error))
    return text + "".join(f"\n• {d}" for d in details if d)


class Deliverer:
    """Keeps up to NOTIFY_CONCURRENCY notifications being sent (run() beside the engine's claims): claims
    only as many due rows as it has free slots, so each send starts at once, within its lease, at most
    PER_NOTIFIER of one notifier's, and records each outcome as that send ends, so a notifier that never
    answers holds back no other."""

    def __init__(
        self, store: Store, engine_id: str, policy: EnvPolicy, clock: Clock = DATABASE, sources: Sequence[str] = ()
    ) -> None:
        self.store = store
        self.engine_id = engine_id
        self.sources = list(sources)
        self.clock = clock
        self.firer = Firer(concurrency=NOTIFY_CONCURRENCY, policy=policy)
        self.observers: list[DeliveryObserver] = []
        self.sending: dict[asyncio.Task[None], NotificationRow] = {}  # send → its row, until its outcome is recorded
        self._ended = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`: claim what is due into the free slots every NOTIFY_POLL_SECONDS and whenever a send
        ends. The sends running at `stop` go on: `finish` waits for them."""
        while not stop.is_set():
            self._ended.clear()
            try:
                await self.deliver_due()
            except DB_FAULTS:
                pass  # the claim loop reports a database away
            except Exception as exc:  # not the database: a bug, logged with its stack
                log.warning(
                    "sending notifications failed (%s); next try in %g s",
                    one_line(exc),
                    NOTIFY_POLL_SECONDS,
                    exc_info=True,
                )
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._ended.wait())]
            try:
                await asyncio.wait(waiters, timeout=NOTIFY_POLL_SECONDS, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def deliver_due(self, wait: bool = False) -> int:
        """Claim due notifications into the free slots and start sending them (with `wait`, until each
        outcome is recorded); how many were claimed."""
        free = NOTIFY_CONCURRENCY - len(self.sending)
        if free <= 0:
            return 0
        sending = Counter(f"{row['source']}/{row['notifier']}" for row in self.sending.values())
        async with self.store.connection() as conn:
            rows = await notify_queries.notifications_claim(
                conn,
                now=statement_now(self.clock),  # due by the database's clock
                limit=free,
                engine_id=self.engine_id,
                lease=LEASE_MARGIN,
                sources=self.sources,
                per_notifier=PER_NOTIFIER,
                sending=sending,
            )
        started = [asyncio.create_task(self._deliver(row)) for row in rows]
        for task, row in zip(started, rows, strict=True):
            self.sending[task] = row
            task.add_done_callback(self._done)
        if wait and started:
            await asyncio.wait(started)
        return len(rows)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.sending.pop(task, None)
        self._ended.set()

    async def finish(self) -> None:
        """At stop, once the drain is over: the sends still running are cut off, and their rows released
        (due again at once, the attempt not counted), so another engine sends them now, not after the lease."""
        cut = list(self.sending.items())
        for task, _ in cut:
            task.cancel()
        await asyncio.gather(*(task for task, _ in cut), return_exceptions=True)
        ids = [row["id"] for _, row in cut]
        if ids:
            with contextlib.suppress(Exception):  # the leases end anyway
                async with self.store.connection() as conn:
                    await notify_queries.notifications_release(
                        conn, ids=ids, engine_id=self.engine_id, now=self.clock.now()
                    )
            log.warning("stopped while sending %d notification(s); released them to other engines", len(ids))
        await self.firer.close()

    async def _deliver(self, row: NotificationRow) -> None:
        """One attempt of one notification, and its row's new values recorded."""
        gone = row["spec"] is None  # its notifier left its source's notifiers.d: no retry can send it
        if gone:
            error = f"notifier {row['notifier']!r} is no longer in notifiers.d of source {row['source']!r}"
            attempt = Attempt(row["attempts"], error=error + "; not retried (add it back for later events)")
        else:
            attempt = await self._attempt(row)
        now = self.clock.now()
        if attempt.ok:
            outcome, status, retry_at = "delivered", "delivered", now
        elif gone or _permanent(attempt) or row["attempts"] >= NOTIFY_ATTEMPTS:
            outcome, status, retry_at = "failed", "failed", now
        else:
            wait = backoff_delay(NOTIFY_BACKOFF, row["attempts"], attempt.retry_after)
            outcome, status, retry_at = "retry", "pending", now + timedelta(seconds=wait)
        try:
            async with self.store.connection() as conn:
                await notify_queries.notification_result(
                    conn,
                    id=row["id"],
                    engine_id=self.engine_id,
                    http_status=attempt.http_status,
                    error=attempt.error,
                    status=status,
                    next=retry_at,
                    now=now,
                )
        except Exception as exc:  # the lease ends, and another attempt sends it again (the same Idempotency-Key)
            bug = not isinstance(exc, DB_FAULTS)  # the database away is one line; anything else is a bug
            log.warning(
                "notification %d: its outcome could not be recorded (%s)", row["id"], one_line(exc), exc_info=bug
            )
            return
        for observer in self.observers:
            observer.notified(row["notifier"], row["event"], outcome)
        if outcome != "delivered":
            log.warning(
                "notification %d (%s of %s to %s) %s: %s",
                row["id"],
                row["event"],
                row["task_id"],
                row["notifier"],
                "gave up" if outcome == "failed" else f"attempt {row['attempts']} failed, retrying",
                attempt.error,
            )

    async def _attempt(self, row: NotificationRow) -> Attempt:
        try:
            spec = parse_spec(row["spec"])
            target = self._target(spec, row)
        except Exception as exc:  # a variable not set, a stored spec edited by hand: this attempt's error
            return Attempt(row["attempts"], error=f"notifier {row['notifier']!r} cannot be sent: {one_line(exc)}")
        scheduled = row["scheduled_for"] or row["created_at"]
        key = f"reconciler-notification-{row['id']}"
        async with self.firer.slots:
            attempt = await self.firer.send(
                Request(target, row["task_id"], scheduled, key), row["attempts"], float("inf")
            )
        if isinstance(spec, SlackNotifier) and attempt.http_status and 300 <= attempt.http_status < 400:
            # Slack's URL is a secret, which a redirect's hint would show (its path, at least): not here.
            attempt.error = f"HTTP {attempt.http_status}: a redirect, not followed; check the URL in ${spec.url.env}"
        return attempt

    def _target(self, spec: WebhookNotifier | SlackNotifier, row: NotificationRow) -> Target:
        """The request of one notification: a webhook's target with the event as its JSON body, or Slack's."""
        body = row["payload"]
        if isinstance(spec, SlackNotifier):
            url = self.firer.secrets().resolve(spec.url, f"notifiers.d/{row['notifier']}.toml url")
            try:
                return Target.model_validate(
                    {"url": url, "json": {"text": slack_text(body)}, "timeout_seconds": spec.timeout_seconds}
                )
            except ValidationError:  # never the URL in the error: it is a secret
                raise ValueError(f"environment variable {spec.url.env} does not hold an http(s) URL") from None
        return spec.model_copy(update={"json_body": body})

    async def close(self) -> None:
        await self.firer.close()


def _permanent(attempt: Attempt) -> bool:
    """A reply a retry will not change: a redirect (not followed; its error names where to) or a 4xx other
    than 408 (timeout) and 429 (too many requests)."""
    status = attempt.http_status
    return status is not None and 300 <= status < 500 and status not in (408, 429)
