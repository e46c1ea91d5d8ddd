"""Notification events: rows of the `scheduler.notifications` outbox written in the transaction of what
caused them (their delivery is delivery.py's).

- `failure` / `lost` when a run ends failed (after its retries) or lost while the task was not
  failing; again every `repeat_every_seconds` while it keeps failing, if set. `recovery` on the
  first success after that. The state per task (`notify_state`) is locked by the transaction
  that writes the result, so replicas writing results of one task at once agree on it.
- `missed` once per claim that records missed occurrences of the task.
- `late` (the dead-man's switch) once per occurrence still unclaimed `late_after_seconds` after it
  was due (default: the task's misfire grace, at least LATE_FLOOR_SECONDS), seen by the claim that
  takes it or by any live engine's scan (`late_scan`), whichever comes first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reconciler.clock import utc_iso
from reconciler.db import notify_queries
from reconciler.db.rows import Conn
from reconciler.db.statements import Statement, execute, send
from reconciler.db.store import Store
from reconciler.spec.notifier import subscriptions
from reconciler.spec.task import LATE_FLOOR_SECONDS, TaskSpec

STATEFUL = ("failure", "recovery", "lost")  # events decided on the task's failing state


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
            events.append(_event("lost" if run.status == "lost" else "failure", run, now))
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


def outbox_insert(events: Iterable[Event], subs_of: Mapping[str, Mapping[str, list[str]]], now: datetime) -> Statement:
    """The outbox rows of `events`: one per event and subscribed notifier."""
    rows = [(e, name) for e in events for name in dict.fromkeys(subs_of.get(e.task_id, {}).get(e.event, []))]
    return notify_queries.notifications_insert(
        now=now,
        task_ids=[e.task_id for e, _ in rows],
        notifiers=[name for _, name in rows],
        events=[e.event for e, _ in rows],
        run_ids=[e.run_id for e, _ in rows],
        scheduled=[e.scheduled_for for e, _ in rows],
        payloads=[json.dumps(e.payload, default=str) for e, _ in rows],
    )


async def record_ended(conn: Conn, ended: Sequence[Ended], now: datetime) -> None:
    """In the transaction that records these runs' ends: lock their tasks' states, write the events."""
    if not ended:
        return
    ids = sorted({run.task_id for run in ended})
    rows = await notify_queries.notify_state_locked(conn, ids=ids)
    states = {r["task_id"]: State(r["failing"], r["failure_sent_at"]) for r in rows}
    events, after = transitions(states, ended, now)
    changed = {task_id: state for task_id, state in after.items() if states.get(task_id) != state}
    statements: list[Statement] = []
    if changed:
        statements.append(
            notify_queries.notify_state_save(
                ids=list(changed),
                failing=[s.failing for s in changed.values()],
                sent=[s.failure_sent_at for s in changed.values()],
                now=now,
            )
        )
    if events:
        subs_of = {run.task_id: run.subs for run in ended}
        statements.append(outbox_insert(events, subs_of, now))
    await send(conn, statements)


def stateful(spec: Mapping[str, Any]) -> dict[str, list[str]]:
    """A normalized spec's subscribers of the events its failing state decides (failure, recovery, lost),
    each event's as a sorted set: `["b", "a"]` subscribes who `["a", "b", "a"]` does."""
    return {event: sorted(set(names)) for event, names in subscriptions(spec).items() if event in STATEFUL}


def ended_of(spec: TaskSpec | None, notify: Mapping[str, Any] | None) -> tuple[dict[str, list[str]], int | None] | None:
    """A task's stateful subscriptions and repeat, from its spec (or its stored `notify` JSON); None when none."""
    raw = spec.notify.model_dump() if spec is not None and spec.notify is not None else notify
    if not raw:
        return None
    subs = stateful({"notify": raw})
    repeat = raw.get("repeat_every_seconds")
    return (subs, int(repeat) if isinstance(repeat, int | float) else None) if subs else None


def late_after(spec: TaskSpec) -> float | None:
    """How late an unclaimed occurrence is `late`; None when nobody hears of it."""
    notify = spec.notify
    if notify is None or not notify.late:
        return None
    if notify.late_after_seconds is not None:
        return float(notify.late_after_seconds)
    return float(max(spec.policy.misfire_grace_seconds, LATE_FLOOR_SECONDS))


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


async def late_scan(store: Store, now: datetime | None) -> int:
    """Any engine's dead-man's switch: `late` for every occurrence of a task with late subscribers still
    unclaimed late_after_seconds after it was due (by the database's clock when `now` is None), whatever
    source or engine should have claimed it."""
    async with store.connection() as conn:
        rows = await notify_queries.tasks_late(conn, now=now, floor=float(LATE_FLOOR_SECONDS))
        events, subs_of = [], {}
        for row in rows:
            events.append(late_event(row["id"], row["next_run_at"], row["now"]))
            subs_of[row["id"]] = subscriptions({"notify": {"late": row["late"]}})
        if events:
            await execute(conn, outbox_insert(events, subs_of, rows[0]["now"]))
    return len(events)
