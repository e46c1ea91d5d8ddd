"""The claim's whole decision as a table (engine/claim_plan.py: `plan_claim`), no database: given the rows a claim
reads under its locks, the run rows it inserts, the queued runs it starts, the tasks it moves on and what it takes
from its limits. Catch-up, misfire, max instances, pauses, queued runs and limits, each alone and together; a
backfill run never starts beside a run in flight of its occurrence (one Idempotency-Key is never in flight twice)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reconciler.db.queries import DueRow, LimitRow, QueuedRow
from reconciler.engine.claim_plan import ClaimPlan, plan_claim
from reconciler.engine.specs import Compiled, Compiling, Invalid
from reconciler.schedule.triggers import compile_schedule
from tests.helpers import spec

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
MINUTELY = {"kind": "cron", "expr": "* * * * *"}


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def minutes(moment: datetime | None) -> float | None:
    return None if moment is None else (moment - T0).total_seconds() / 60


def compiled(**policy: Any) -> Compiled:
    """An every-minute task with this policy."""
    found = spec("UTC", MINUTELY, **policy)
    return Compiled(found, compile_schedule(found))


@dataclass(frozen=True)
class Due:
    """A due task row: its id, its due next_run_at (minutes after T0), its pause and the limits it names."""

    id: str
    next_run: float
    limits: tuple[str, ...] = ()
    limit_wait: str | None = None
    paused_until: float | None = None
    paused: bool = False

    def row(self) -> DueRow:
        paused = self.paused or self.paused_until is not None
        return DueRow(
            id=self.id,
            spec_key=1,
            next_run_at=at(self.next_run),
            paused_by="ops" if paused else None,
            paused_reason="deploy" if paused else None,
            paused_until=at(self.paused_until) if self.paused_until is not None else None,
            source="default",
            limits=list(self.limits) or None,
            limit_wait=self.limit_wait,
        )


def queued(
    run_id: int, task_id: str, scheduled: float, limits: tuple[str, ...] = (), kind: str = "manual"
) -> QueuedRow:
    return QueuedRow(
        run_id=run_id,
        task_id=task_id,
        scheduled_for=at(scheduled),
        kind=kind,
        spec_text="{}",
        spec_key=1,
        source="default",
        limits=list(limits) or None,
    )


def limit(
    name: str, max_in_flight: int | None = None, rate: float | None = None, tokens: float = 0.0, in_flight: int = 0
) -> LimitRow:
    return LimitRow(
        source="default",
        name=name,
        max_in_flight=max_in_flight,
        rate_per_second=rate,
        burst=None,
        in_flight=in_flight,
        tokens=tokens,
        at=T0,
    )


@dataclass(frozen=True)
class Case:
    now: float
    due: list[Due]
    specs: dict[str, Compiling]
    queued: list[QueuedRow] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)
    limits: list[LimitRow] = field(default_factory=list)
    in_flight: list[tuple[str, float]] = field(default_factory=list)  # occurrences with a run in flight
    # (task, minutes, kind, status), as inserted
    inserts: list[tuple[str, float, str, str]] = field(default_factory=list)
    # (task, next run in minutes or None, the limit its due occurrence waits for)
    advances: list[tuple[str, float | None, str | None]] = field(default_factory=list)
    starts: list[tuple[int, str]] = field(default_factory=list)  # (queued run id, running | failed)
    taken: list[tuple[str, float, int, int]] = field(default_factory=list)  # (limit, tokens left, delayed, missed)


PLAIN = compiled()
TWO = compiled(max_running_instances=2)
CASES = {
    "on time: one run, the next minute stays due": Case(
        0, [Due("a", 0)], {"a": PLAIN}, inserts=[("a", 0, "scheduled", "running")], advances=[("a", 1, None)]
    ),
    "late past the misfire grace: missed": Case(
        0.5,
        [Due("a", 0)],
        {"a": compiled(misfire_grace_seconds=10)},
        inserts=[("a", 0, "scheduled", "missed")],
        advances=[("a", 1, None)],
    ),
    "down for an hour, coalesced: the newest runs, the others are missed": Case(
        60,
        [Due("a", 0)],
        {"a": compiled(misfire_grace_seconds=30)},
        inserts=[("a", m, "catchup", "missed") for m in range(60)] + [("a", 60, "scheduled", "running")],
        advances=[("a", 61, None)],
    ),
    "catch-up without coalesce: each within the grace runs, oldest first": Case(
        2,
        [Due("a", 0)],
        {"a": compiled(coalesce=False, misfire_grace_seconds=300, max_running_instances=3)},
        inserts=[("a", 0, "catchup", "running"), ("a", 1, "catchup", "running"), ("a", 2, "scheduled", "running")],
        advances=[("a", 3, None)],
    ),
    "max_running_instances reached: skipped": Case(
        0,
        [Due("a", 0)],
        {"a": PLAIN},
        held={"a": 1},
        inserts=[("a", 0, "scheduled", "skipped")],
        advances=[("a", 1, None)],
    ),
    "paused: recorded skipped, nothing runs": Case(
        0,
        [Due("a", 0, paused=True)],
        {"a": PLAIN},
        inserts=[("a", 0, "scheduled", "skipped")],
        advances=[("a", 1, None)],
    ),
    "a pause that ended: what fell due before its end is skipped, the rest runs": Case(
        3,
        [Due("a", 0, paused_until=2)],
        {"a": compiled(coalesce=False, misfire_grace_seconds=300, max_running_instances=2)},
        inserts=[
            ("a", 0, "catchup", "skipped"),
            ("a", 1, "catchup", "skipped"),
            ("a", 2, "catchup", "running"),
            ("a", 3, "scheduled", "running"),
        ],
        advances=[("a", 4, None)],
    ),
    "a stored spec that does not validate: that task fails, the others run": Case(
        0,
        [Due("bad", 0), Due("a", 0)],
        {"bad": Invalid("invalid stored spec: no trigger"), "a": PLAIN},
        inserts=[("bad", 0, "scheduled", "failed"), ("a", 0, "scheduled", "running")],
        advances=[("bad", None, None), ("a", 1, None)],
    ),
    "a queued manual run starts in a free slot": Case(
        0, [], {"a": PLAIN}, queued=[queued(7, "a", -5)], starts=[(7, "running")]
    ),
    "a queued run stays queued while its task's slot is taken": Case(
        0, [], {"a": PLAIN}, queued=[queued(7, "a", -5)], held={"a": 1}
    ),
    "the scheduled run takes the slot first; the queued one waits": Case(
        0,
        [Due("a", 0)],
        {"a": PLAIN},
        queued=[queued(7, "a", -5)],
        inserts=[("a", 0, "scheduled", "running")],
        advances=[("a", 1, None)],
    ),
    "a queued run of a task whose spec does not validate fails": Case(
        0, [], {"a": Invalid("invalid stored spec: x")}, queued=[queued(7, "a", -5)], starts=[(7, "failed")]
    ),
    "a full limit: the occurrence stays due, waiting for it": Case(
        0,
        [Due("a", 0, ("api",)), Due("b", 0, ("api",))],
        {"a": PLAIN, "b": PLAIN},
        limits=[limit("api", max_in_flight=1)],
        inserts=[("a", 0, "scheduled", "running")],
        advances=[("a", 1, None), ("b", 0, "api")],
        taken=[("api", 0.0, 1, 0)],
    ),
    "still waiting for the same limit: the row is not rewritten, the delay not counted again": Case(
        0.5,
        [Due("b", 0, ("api",), limit_wait="api")],
        {"b": PLAIN},
        limits=[limit("api", max_in_flight=1, in_flight=1)],
    ),
    "waiting past the grace: missed for the limit": Case(
        0.9,
        [Due("b", 0, ("api",), limit_wait="api")],
        {"b": compiled(misfire_grace_seconds=30)},
        limits=[limit("api", max_in_flight=1, in_flight=1)],
        inserts=[("b", 0, "scheduled", "missed")],
        advances=[("b", 1, None)],
        taken=[("api", 0.0, 0, 1)],
    ),
    "a rate: one token, one request; the other waits": Case(
        0,
        [Due("a", 0, ("api",)), Due("b", 0, ("api",))],
        {"a": PLAIN, "b": PLAIN},
        limits=[limit("api", rate=1.0, tokens=1.0)],
        inserts=[("a", 0, "scheduled", "running")],
        advances=[("a", 1, None), ("b", 0, "api")],
        taken=[("api", 0.0, 1, 0)],
    ),
    "a limit shared in turns: the queued run of another task gets the second place": Case(
        0,
        [Due("a", 0, ("api",))],
        {"a": compiled(max_running_instances=2), "c": PLAIN},
        queued=[queued(8, "c", -1, ("api",))],
        limits=[limit("api", max_in_flight=2)],
        inserts=[("a", 0, "scheduled", "running")],
        advances=[("a", 1, None)],
        starts=[(8, "running")],
    ),
    # One Idempotency-Key is never in flight twice: a backfill run (its occurrence's key) waits for that
    # occurrence's run in flight (`backfill --reprocess all` of it, a free slot beside it).
    "a backfill run whose occurrence has a run in flight waits, though a slot is free": Case(
        0, [], {"a": TWO}, queued=[queued(7, "a", -5, kind="backfill")], held={"a": 1}, in_flight=[("a", -5)]
    ),
    "it starts once that run has ended": Case(
        0, [], {"a": TWO}, queued=[queued(7, "a", -5, kind="backfill")], starts=[(7, "running")]
    ),
    "meanwhile the backfill's run of another occurrence takes the free slot": Case(
        0,
        [],
        {"a": TWO},
        queued=[queued(7, "a", -5, kind="backfill"), queued(8, "a", -4, kind="backfill")],
        held={"a": 1},
        in_flight=[("a", -5)],
        starts=[(8, "running")],
    ),
    "the claim's own scheduled run of an occurrence holds a backfill run of it": Case(
        0,
        [Due("a", 0)],
        {"a": TWO},
        queued=[queued(7, "a", 0, kind="backfill")],
        inserts=[("a", 0, "scheduled", "running")],
        advances=[("a", 1, None)],
    ),
    "two backfill runs of one occurrence: the second waits for the first": Case(
        0,
        [],
        {"a": TWO},
        queued=[queued(7, "a", -5, kind="backfill"), queued(8, "a", -5, kind="backfill")],
        starts=[(7, "running")],
    ),
    "a manual run has a key of its own: a run in flight at its moment does not hold it": Case(
        0, [], {"a": TWO}, queued=[queued(7, "a", -5)], held={"a": 1}, in_flight=[("a", -5)], starts=[(7, "running")]
    ),
}


def shape(plan: ClaimPlan) -> tuple[Any, ...]:
    inserts = [(i.task_id, minutes(i.decision.scheduled_for), i.decision.kind, i.decision.status) for i in plan.inserts]
    advances = [(a.task_id, minutes(a.next_run_at), a.wait) for a in plan.advances]
    starts = [(s.row["run_id"], "running" if s.spec is not None else "failed") for s in plan.starts]
    taken = [(t.key[1], t.tokens, t.delayed, t.missed) for t in plan.taken]
    return inserts, advances, starts, taken


@pytest.mark.parametrize("name", CASES)
def test_the_claim_plan(name: str) -> None:
    case = CASES[name]
    in_flight = [(task_id, at(moment)) for task_id, moment in case.in_flight]
    due = [d.row() for d in case.due]
    plan = plan_claim(at(case.now), due, case.queued, case.held, case.specs, case.limits, in_flight)
    assert shape(plan) == (case.inserts, case.advances, case.starts, case.taken)


def test_the_plan_is_a_value_its_inputs_are_left_as_they_were() -> None:
    due = [Due("a", 0, ("api",)).row(), Due("b", 0, ("api",)).row()]
    held = {"a": 0}
    limits = [limit("api", max_in_flight=1)]
    before = (repr(due), dict(held), repr(limits))
    first = plan_claim(at(0), due, [], held, {"a": PLAIN, "b": PLAIN}, limits)
    again = plan_claim(at(0), due, [], held, {"a": PLAIN, "b": PLAIN}, limits)
    assert (repr(due), held, repr(limits)) == before
    assert shape(first) == shape(again)


def test_a_paused_task_raises_no_event_and_a_missed_one_does() -> None:
    notified = compiled()
    notified = Compiled(notified.spec.model_copy(update={"notify": _notify()}), notified.schedule)
    quiet = plan_claim(at(5), [Due("a", 0, paused=True).row()], [], {}, {"a": notified})
    assert quiet.events == []
    loud = plan_claim(at(5), [Due("a", 0).row()], [], {}, {"a": notified})
    assert [e.event for e in loud.events] == ["missed"]
    assert loud.subscriptions == {"a": {"missed": ["pager"]}}


def _notify() -> Any:
    from reconciler.spec.task import Notify

    return Notify.model_validate({"missed": ["pager"]})
