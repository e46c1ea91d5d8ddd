"""Notifications: events written to the `scheduler.notifications` outbox in the transaction of what
caused them, and their delivery by any engine (claimed with SKIP LOCKED, retried, one Idempotency-Key
per event).

- `failure` / `lost` when a run ends failed (after its retries) or lost while the task was not
  failing; again every `repeat_every_seconds` while it keeps failing, if set. `recovery` on the
  first success after that. The state per task (`notify_state`) is locked by the transaction
  that writes the result, so replicas writing results of one task at once agree on it.
- `missed` once per claim that records missed occurrences of the task.
- `late` (the dead-man's switch) once per occurrence still unclaimed `late_after_seconds` after it
  was due (default: the task's misfire grace), seen by the claim that takes it or by any live
  engine's scan (`late_scan`), whichever comes first.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import ValidationError

from reconciler.clock import SYSTEM, Clock, utc_iso
from reconciler.environment import EnvPolicy
from reconciler.errors import one_line
from reconciler.models import Target, TaskSpec
from reconciler.notifiers import SlackNotifier, parse_spec, subscriptions
from reconciler.store import Conn, Row, Store
from reconciler.targets import Attempt, Firer, backoff_delay

log = logging.getLogger("reconciler.engine")

STATEFUL = ("failure", "recovery", "lost")  # events decided on the task's failing state
NOTIFY_ATTEMPTS = 10  # then the notification is `failed`
NOTIFY_BACKOFF = 2.0  # seconds before the 2nd attempt, doubling (2, 4, … 512 s: about 17 minutes in all)
NOTIFY_POLL_SECONDS = 1.0  # how often each engine looks for due notifications
NOTIFY_CONCURRENCY = 10  # sent at a time per engine, on a session of their own: never a firing slot
NOTIFY_BATCH = NOTIFY_CONCURRENCY  # claimed at a time: each starts at once, so its lease covers its send
LEASE_MARGIN = 30.0  # a claimed notification is another engine's to send this long after its timeout


@dataclass(frozen=True)
class Ended:
    """A run that ended (succeeded, failed or lost) of a task with subscriptions."""

    task_id: str
    run_id: int
    scheduled_for: datetime
    status: str
    subs: dict[str, list[str]]
    repeat_every: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)  # http_status, error, attempt


@dataclass(frozen=True)
class State:
    failing: bool = False
    failure_sent_at: datetime | None = None


@dataclass(frozen=True)
class Event:
    event: str
    task_id: str
    run_id: int | None
    scheduled_for: datetime | None
    payload: dict[str, Any]


def transitions(
    states: Mapping[str, State], ended: Sequence[Ended], now: datetime
) -> tuple[list[Event], dict[str, State]]:
    """The events of runs that ended (in the order they ended), and each task's state after them (pure)."""
    after = dict(states)
    events: list[Event] = []
    for run in ended:
        state = after.get(run.task_id, State())
        if run.status == "succeeded":
            if state.failing:
                events.append(_event("recovery", run, now))
            after[run.task_id] = State()
            continue
        repeat = run.repeat_every is not None and (
            state.failure_sent_at is None or (now - state.failure_sent_at).total_seconds() >= run.repeat_every
        )
        if not state.failing or repeat:
            events.append(_event("failure" if run.status == "failed" else "lost", run, now))
            after[run.task_id] = State(True, now)
        else:
            after[run.task_id] = State(True, state.failure_sent_at)
    return events, after


def payload(event: str, task_id: str, now: datetime, **values: Any) -> dict[str, Any]:
    """The JSON a webhook receives (a Slack message is made from it)."""
    scheduled = values.get("scheduled_for")
    body = {"event": event, "task_id": task_id, "occurred_at": utc_iso(now), **values}
    if isinstance(scheduled, datetime):
        body["scheduled_for"] = utc_iso(scheduled)
    body["hints"] = {
        "runs": f"reconciler runs {task_id}",
        **(
            {"explain": f"reconciler explain {task_id} --at {utc_iso(scheduled)}"}
            if isinstance(scheduled, datetime)
            else {}
        ),
    }
    return body


def _event(event: str, run: Ended, now: datetime) -> Event:
    body = payload(event, run.task_id, now, run_id=run.run_id, scheduled_for=run.scheduled_for, status=run.status)
    return Event(event, run.task_id, run.run_id, run.scheduled_for, {**body, **run.detail})


def outbox_rows(
    events: Iterable[Event], subs_of: Mapping[str, Mapping[str, list[str]]], now: datetime
) -> dict[str, Any]:
    """`notifications_insert`'s parameters: one row per event and subscribed notifier."""
    rows = [(e, name) for e in events for name in dict.fromkeys(subs_of.get(e.task_id, {}).get(e.event, []))]
    return {
        "now": now,
        "task_ids": [e.task_id for e, _ in rows],
        "notifiers": [name for _, name in rows],
        "events": [e.event for e, _ in rows],
        "run_ids": [e.run_id for e, _ in rows],
        "scheduled": [e.scheduled_for for e, _ in rows],
        "payloads": [json.dumps(e.payload, default=str) for e, _ in rows],
    }


async def record_ended(conn: Conn, ended: Sequence[Ended], now: datetime) -> None:
    """In the transaction that records these runs' ends: lock their tasks' states, write the events."""
    if not ended:
        return
    ids = sorted({run.task_id for run in ended})
    _, rows = await Store.pipelined(conn, [("notify_state_ensure", {"ids": ids}), ("notify_state_lock", {"ids": ids})])
    states = {r["task_id"]: State(r["failing"], r["failure_sent_at"]) for r in rows}
    events, after = transitions(states, ended, now)
    changed = {task_id: state for task_id, state in after.items() if states.get(task_id) != state}
    statements: list[tuple[str, Mapping[str, Any]]] = []
    if changed:
        params = {
            "ids": list(changed),
            "failing": [s.failing for s in changed.values()],
            "sent": [s.failure_sent_at for s in changed.values()],
            "now": now,
        }
        statements.append(("notify_state_save", params))
    if events:
        subs_of = {run.task_id: run.subs for run in ended}
        statements.append(("notifications_insert", outbox_rows(events, subs_of, now)))
    await Store.send(conn, statements)


def ended_of(spec: TaskSpec | None, notify: Mapping[str, Any] | None) -> tuple[dict[str, list[str]], int | None] | None:
    """A task's stateful subscriptions and repeat, from its spec (or its stored `notify` JSON); None when none."""
    raw = spec.notify.model_dump() if spec is not None and spec.notify is not None else notify
    if not raw:
        return None
    subs = {event: names for event, names in subscriptions({"notify": raw}).items() if event in STATEFUL}
    repeat = raw.get("repeat_every_seconds")
    return (subs, int(repeat) if isinstance(repeat, int | float) else None) if subs else None


def late_after(spec: TaskSpec) -> float | None:
    """How late an unclaimed occurrence is `late`; None when nobody hears of it."""
    notify = spec.notify
    if notify is None or not notify.late:
        return None
    return float(
        notify.late_after_seconds if notify.late_after_seconds is not None else spec.policy.misfire_grace_seconds
    )


def late_event(task_id: str, scheduled_for: datetime, now: datetime) -> Event:
    """`late` for an occurrence still unclaimed at `now` (the claim's and the scan's)."""
    late = round((now - scheduled_for).total_seconds())
    body = payload("late", task_id, now, scheduled_for=scheduled_for, late_seconds=late)
    return Event("late", task_id, None, scheduled_for, body)


def claim_events(
    spec: TaskSpec, task_id: str, due: Sequence[datetime], missed: Sequence[datetime], now: datetime
) -> list[Event]:
    """A claim's events for one task: `late` for the oldest due occurrence taken later than late_after_seconds
    (once per occurrence: the outbox's unique index), `missed` once for the occurrences it recorded missed."""
    events = []
    limit = late_after(spec)
    if limit is not None:
        late = [moment for moment in due if (now - moment).total_seconds() > limit]
        if late:
            events.append(late_event(task_id, late[0], now))
    if missed and spec.notify is not None and spec.notify.missed:
        body = payload("missed", task_id, now, scheduled_for=missed[-1], missed=len(missed))
        events.append(Event("missed", task_id, None, missed[-1], body))
    return events


# ---------------------------------------------------------------- delivery


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
    """Sends due notifications: its own HTTP session and slots, so a notifier that is down or slow never
    holds a task's firing slot; runs beside the claims (Engine.serve)."""

    def __init__(
        self, store: Store, engine_id: str, policy: EnvPolicy, clock: Clock = SYSTEM, sources: Sequence[str] = ()
    ) -> None:
        self.store = store
        self.engine_id = engine_id
        self.sources = list(sources)
        self.clock = clock
        self.firer = Firer(concurrency=NOTIFY_CONCURRENCY, policy=policy)
        self.observers: list[DeliveryObserver] = []

    async def deliver_due(self) -> int:
        """Claim the due notifications (up to NOTIFY_BATCH), send them, record each outcome; how many were sent."""
        now = self.clock.now()
        async with self.store.connection() as conn:
            rows = await Store.fetch(
                conn,
                "notifications_claim",
                {
                    "now": now,
                    "limit": NOTIFY_BATCH,
                    "engine_id": self.engine_id,
                    "lease": LEASE_MARGIN,
                    "sources": self.sources,
                },
            )
        if not rows:
            return 0
        outcomes = await asyncio.gather(*(self._deliver(row) for row in rows))
        async with self.store.transaction() as conn:
            await Store.execute_many(conn, "notification_result", outcomes)
        return len(rows)

    async def _deliver(self, row: Row) -> dict[str, Any]:
        """One attempt of one notification → its row's new values."""
        attempt = await self._attempt(row)
        done = {
            "id": row["id"],
            "engine_id": self.engine_id,
            "http_status": attempt.http_status,
            "error": attempt.error,
        }
        now = self.clock.now()
        if attempt.ok:
            outcome, status, retry_at = "delivered", "delivered", now
        elif _permanent(attempt) or row["attempts"] >= NOTIFY_ATTEMPTS:
            outcome, status, retry_at = "failed", "failed", now
        else:
            wait = backoff_delay(NOTIFY_BACKOFF, row["attempts"], attempt.retry_after)
            outcome, status, retry_at = "retry", "pending", now + timedelta(seconds=wait)
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
        return {**done, "status": status, "next": retry_at, "now": now}

    async def _attempt(self, row: Row) -> Attempt:
        if row["spec"] is None:
            return Attempt(
                row["attempts"], error=f"notifier {row['notifier']!r} no longer exists in its source's notifiers.d"
            )
        try:
            target = self._target(row)
        except Exception as exc:  # a variable not set, a stored spec edited by hand: this attempt's error
            return Attempt(row["attempts"], error=f"notifier {row['notifier']!r} cannot be sent: {one_line(exc)}")
        scheduled = row["scheduled_for"] or row["created_at"]
        key = f"reconciler-notification-{row['id']}"
        async with self.firer.slots:
            return await self.firer.send(target, row["task_id"], scheduled, key, row["attempts"], float("inf"))

    def _target(self, row: Row) -> Target:
        """The request of one notification: a webhook's target with the event as its JSON body, or Slack's."""
        spec = parse_spec(row["spec"])
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
    """A refusal a retry will not change: a 4xx other than 408 (timeout) and 429 (too many requests)."""
    status = attempt.http_status
    return status is not None and 400 <= status < 500 and status not in (408, 429)


async def late_scan(store: Store, now: datetime) -> int:
    """Any engine's dead-man's switch: `late` for every occurrence of a task with late subscribers still
    unclaimed late_after_seconds after it was due, whatever source or engine should have claimed it."""
    async with store.connection() as conn:
        rows = await Store.fetch(conn, "tasks_late", {"now": now})
        events, subs_of = [], {}
        for row in rows:
            events.append(late_event(row["id"], row["next_run_at"], now))
            subs_of[row["id"]] = subscriptions({"notify": {"late": row["late"]}})
        if events:
            await Store.execute(conn, "notifications_insert", outbox_rows(events, subs_of, now))
    return len(events)
