"""A task's target (what its requests carry, signed if asked) and how its run ends: at the response (the
default), or when the job the request started
reports back (`completion = "callback"`, docs/jobs.md) by its deadline, heartbeating if asked to."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from reconciler.spec.signing import Signing
from reconciler.spec.target import Target
from reconciler.spec.trigger import checked_duration, duration_seconds
from reconciler.spec.values import DAY

MAX_DEADLINE_SECONDS = 7 * DAY
CALLBACK_ONLY = 'is for completion = "callback" only; remove it, or set completion = "callback"'
NEEDS_DEADLINE = (
    'completion = "callback" needs deadline = "6h" (how long the job may take, at most 7d): '
    "the run ends timed_out past it"
)


def _duration(value: str, what: str) -> str:
    return checked_duration(
        value, MAX_DEADLINE_SECONDS, f"7d, the longest a job may run; split the job or shorten {what}"
    )


def seconds_of(value: str | None) -> float | None:
    """A validated duration (`"6h"`) in seconds; None stays None."""
    return None if value is None else float(duration_seconds(value))


class TaskTarget(Target):
    """A task's target: a notifier's (Target) and how the run ends."""

    # Absent from the stored spec when not given (older specs keep their hash).
    completion: Literal["response", "callback"] = Field(default="response", exclude_if=lambda v: v == "response")
    deadline: str | None = None  # callback: the run ends timed_out past it, counted from each attempt's request
    heartbeat_timeout: str | None = None  # callback: timed_out when no heartbeat came for that long
    signing: Signing | None = Field(default=None, exclude_if=lambda v: v is None)  # absent: specs keep their hash

    @field_validator("deadline")
    @classmethod
    def _deadline(cls, value: str | None) -> str | None:
        return None if value is None else _duration(value, "the deadline")

    @field_validator("heartbeat_timeout")
    @classmethod
    def _heartbeat(cls, value: str | None) -> str | None:
        return None if value is None else _duration(value, "the heartbeat timeout")

    cross_checks = (
        *Target.cross_checks,
        (("completion", "deadline", "heartbeat_timeout", "timeout_seconds"), lambda v: _completion_problem(**v)),
    )

    @property
    def callback(self) -> bool:
        return self.completion == "callback"

    @property
    def deadline_seconds(self) -> float | None:
        return seconds_of(self.deadline)

    @property
    def heartbeat_seconds(self) -> float | None:
        return seconds_of(self.heartbeat_timeout)


def _completion_problem(completion: Any, deadline: Any, heartbeat_timeout: Any, timeout_seconds: Any) -> str | None:
    if completion != "callback":
        if deadline is not None:
            return f"deadline {CALLBACK_ONLY}"
        if heartbeat_timeout is not None:
            return f"heartbeat_timeout {CALLBACK_ONLY}"
        return None
    if deadline is None:
        return NEEDS_DEADLINE
    total, beat = seconds_of(deadline), seconds_of(heartbeat_timeout)
    assert total is not None
    if isinstance(timeout_seconds, int | float) and timeout_seconds >= total:
        return (
            f"deadline {deadline} is not longer than timeout_seconds = {timeout_seconds:g}, which bounds the "
            "request that starts the job; lengthen the deadline or shorten timeout_seconds"
        )
    if beat is not None and beat >= total:
        return (
            f"heartbeat_timeout {heartbeat_timeout} is not shorter than deadline {deadline}; "
            "shorten it, or remove it to wait for the deadline alone"
        )
    return None
