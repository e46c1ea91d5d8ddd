"""Pydantic models of one task file (frozen, unknown keys forbidden): the spec, its policy and `[notify]`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from reconciler.spec.backoff import backoff_total
from reconciler.spec.completion import TaskTarget
from reconciler.spec.limit import LimitNames
from reconciler.spec.model import Model
from reconciler.spec.trigger import Trigger
from reconciler.spec.values import (
    DAY,
    MAX_NAME,
    MAX_TEXT,
    CalendarName,
    file_name,
    id_problem,
    text_rule,
    zone_problem,
)

# Input bounds (docs/files.md, "Input bounds"), as spec.values says.
MAX_MISFIRE_GRACE_SECONDS = 366 * DAY
# `late` sooner than this after an occurrence was due would be a claim's ordinary lag, not a dead engine:
# an explicit late_after_seconds is at least MIN_LATE_AFTER_SECONDS, the default (the misfire grace,
# 0 for some tasks) at least LATE_FLOOR_SECONDS.
MIN_LATE_AFTER_SECONDS = 10
LATE_FLOOR_SECONDS = 60
MAX_RETRY_WAIT_SECONDS = DAY  # all backoffs of one run together: a killed engine's lease must expire
MAX_KEEP_RUNS = 1_000_000  # the retention query casts it to int4
MAX_DESCRIPTION = 4096
MAX_LABELS, MAX_LABEL_KEY, MAX_LABEL_VALUE = 64, 63, 256
MAX_BLACKOUTS = 20  # blackout calendars one task names
NEEDS_BLACKOUTS = 'on_blackout needs blackouts = ["NAME"] (files of calendars.d)'

LabelKey = Annotated[str, Field(min_length=1), text_rule(MAX_LABEL_KEY)]
LabelValue = Annotated[str, text_rule(MAX_LABEL_VALUE)]


class Policy(Model):
    misfire_grace_seconds: int = Field(default=60, ge=0, le=MAX_MISFIRE_GRACE_SECONDS)
    coalesce: bool = True
    max_running_instances: int = Field(default=1, ge=1, le=1000)
    retries: int = Field(default=0, ge=0, le=20)
    retry_backoff_seconds: float = Field(default=5, ge=0, le=3600)
    jitter_seconds: int = Field(default=0, ge=0, le=3600)
    dst_gap: Literal["shift", "skip"] = "shift"
    dst_overlap: Literal["first", "last", "both"] | None = None
    keep_runs: int | None = Field(default=None, ge=1, le=MAX_KEEP_RUNS)
    # Absent from the stored spec when not given (older specs keep their hash); None: no blackouts, skip.
    blackouts: Annotated[list[CalendarName], Field(min_length=1, max_length=MAX_BLACKOUTS)] | None = None
    on_blackout: Literal["skip", "defer"] | None = None
    # The limits (files of limits.d) the task's runs count against; absent when none (older specs keep their hash).
    limits: LimitNames | None = None

    @property
    def backoff_total(self) -> float:
        """Every backoff wait of one run together: `retry_backoff_seconds × (2^retries − 1)`."""
        return backoff_total(self.retries, self.retry_backoff_seconds)

    cross_checks = (
        (("retries", "retry_backoff_seconds"), lambda v: _retry_wait_problem(**v)),
        (("blackouts", "on_blackout"), lambda v: NEEDS_BLACKOUTS if v["on_blackout"] and not v["blackouts"] else None),
    )


def _retry_wait_problem(retries: int, retry_backoff_seconds: float) -> str | None:
    wait = backoff_total(retries, retry_backoff_seconds)
    if wait <= MAX_RETRY_WAIT_SECONDS:
        return None
    return (
        f"retries = {retries} with retry_backoff_seconds = {retry_backoff_seconds:g} wait "
        f"{wait:,.0f} s in all (backoff doubles per attempt), more than one day; lower either"
    )


NOTIFY_EVENTS = ("failure", "recovery", "missed", "lost", "late")
MAX_SUBSCRIPTIONS = 20  # notifiers per event


NotifierName = Annotated[str, file_name("notifier", "notifiers.d")]
Subscribers = Annotated[list[NotifierName], Field(max_length=MAX_SUBSCRIPTIONS)]


class Notify(Model):
    """`[notify]`: which notifiers (files of notifiers.d/, of the task's own source) hear of which events."""

    failure: Subscribers = Field(default_factory=list)  # a run failed after its retries, the task not failing before
    recovery: Subscribers = Field(default_factory=list)  # the first success after a failure or a lost run
    missed: Subscribers = Field(default_factory=list)  # a claim recorded missed occurrences
    lost: Subscribers = Field(default_factory=list)  # a run's engine died holding it (as failure: on a change of state)
    late: Subscribers = Field(default_factory=list)  # an occurrence still unclaimed late_after_seconds after it was due
    late_after_seconds: int | None = Field(default=None, ge=MIN_LATE_AFTER_SECONDS, le=MAX_MISFIRE_GRACE_SECONDS)
    repeat_every_seconds: int | None = Field(default=None, ge=60, le=MAX_MISFIRE_GRACE_SECONDS)

    def names(self) -> set[str]:
        return {name for event in NOTIFY_EVENTS for name in getattr(self, event)}


class TaskSpec(Model):
    """The content of one task file."""

    description: Annotated[str, text_rule(MAX_DESCRIPTION, allowed="\t\n")] | None = None
    timezone: str = Field(default="UTC", max_length=MAX_NAME)
    enabled: bool = True
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=MAX_LABELS)
    moved_from: str | None = Field(default=None, max_length=MAX_TEXT)
    trigger: Trigger
    target: TaskTarget
    policy: Policy = Field(default_factory=Policy)
    notify: Notify | None = None  # absent from the stored spec when not given (older specs keep their hash)
    # The calendars the task names, as applied ({name: stored calendar}): bound by the reconciler (from
    # calendars.d, or the task row's `calendars` column), never written in a file (TaskKind.prepare
    # refuses the key), never part of the stored spec or its hash.
    calendars: SkipJsonSchema[dict[str, dict[str, Any]] | None] = Field(default=None, exclude=True)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        problem = zone_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("moved_from")
    @classmethod
    def _moved(cls, value: str | None) -> str | None:
        if value is not None:
            problem = id_problem(value)
            if problem:
                raise ValueError(problem)
        return value

    @property
    def run_seconds(self) -> float:
        """The longest a run of this task can take: every attempt's timeout, every backoff, the jitter."""
        policy = self.policy
        attempts = policy.retries + 1
        return float(self.target.timeout_seconds) * attempts + policy.backoff_total + policy.jitter_seconds

    def normalized(self) -> dict[str, Any]:
        """The canonical JSON form stored in `scheduler.tasks.spec` (defaults filled in)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def calendars_named(spec: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """A normalized task spec's calendars: its trigger's business days (or None) and its policy's blackouts
    (a stored spec edited by hand into something else names none it cannot)."""
    trigger, policy = spec.get("trigger"), spec.get("policy")
    business = trigger.get("business_days") if isinstance(trigger, dict) else None
    blackouts = policy.get("blackouts") if isinstance(policy, dict) else None
    named = [name for name in blackouts if isinstance(name, str)] if isinstance(blackouts, list) else []
    return (business if isinstance(business, str) else None), named
