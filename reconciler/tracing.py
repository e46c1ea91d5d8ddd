"""Trace context (docs/requests.md, "Tracing"): every request of a run carries a W3C `traceparent` in the run's
trace, and a `Tracer` records the run's spans. The default records none; the engine's command gives the
OpenTelemetry one (reconciler/otel.py, cli/runtime.tracer) when the `otel` extra is installed and the standard
OTEL_* variables ask for traces. Without them nothing of OpenTelemetry is imported, and a request costs a
random span id more.

A run's trace id is stored on its row (a new one per run, or the one `trigger --traceparent` gave); its span's id
is derived from the trace id and the run id, so whichever engine ends the run (its response, its job's callback,
the upkeep's timeout) records the same span, and attempts and callbacks elsewhere join it as its children.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
ZERO_TRACE, ZERO_SPAN = "0" * 32, "0" * 16
SAMPLED = "01"


def traceparent_problem(text: str) -> str | None:
    """Why `text` is not a W3C traceparent this engine can join (None: it is one)."""
    match = TRACEPARENT.fullmatch(text)
    if match is None:
        return (
            "not a W3C traceparent: give 00-<32 lowercase hex trace id>-<16 lowercase hex span id>-<2 hex flags>, "
            "as 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        )
    if match.group(1) == ZERO_TRACE or match.group(2) == ZERO_SPAN:
        return "a traceparent's trace id and span id may not be all zeros"
    return None


def new_span_id() -> str:
    """A random span id (16 hex digits, never all zeros). Not a secret: Python's fast generator serves (the
    operating system's costs a system call per request)."""
    return f"{random.getrandbits(64) or 1:016x}"


def new_trace_ids(count: int) -> list[str]:
    """`count` random trace ids (32 hex digits each) from one read of the operating system's random source."""
    raw = os.urandom(16 * count).hex()
    return [raw[at : at + 32] for at in range(0, 32 * count, 32)]


def run_span_id(trace_id: str, run_id: int) -> str:
    """The span id of run `run_id` in trace `trace_id`: the same wherever it is computed; two runs of one
    trace (`trigger --traceparent` twice with one parent) have different ones."""
    digest = hashlib.sha256(f"{trace_id}/{run_id}".encode()).hexdigest()[:16]
    return digest if digest != ZERO_SPAN else "1" * 16


@dataclass(frozen=True)
class RunTrace:
    """A run's place in its trace: its trace id, its own span's id, the span that started it (a
    `trigger --traceparent` caller's; None for a new trace) and the trace flags its requests carry."""

    run_id: int
    trace_id: str
    parent_id: str | None = None
    flags: str = SAMPLED

    @property
    def span_id(self) -> str:
        """The run's own span's id (only a tracer that records spans asks)."""
        return run_span_id(self.trace_id, self.run_id)

    @classmethod
    def of(cls, run_id: int, trace_id: Any, traceparent: str | None = None) -> RunTrace:
        """From a run row's `trace_id` (a UUID, hex, or None for a row written before traces were: a new trace,
        not stored) and `traceparent` (the caller's, for a manual run)."""
        hexed = getattr(trace_id, "hex", trace_id)
        if not isinstance(hexed, str) or len(hexed) != 32 or hexed == ZERO_TRACE:
            [hexed] = new_trace_ids(1)
        parent, flags = None, SAMPLED
        if traceparent is not None and (match := TRACEPARENT.fullmatch(traceparent)) and match.group(1) == hexed:
            parent, flags = match.group(2), match.group(3)
        return cls(run_id, hexed, parent, flags)

    def header(self, span_id: str) -> str:
        """The `traceparent` of a request sent from span `span_id` of this trace."""
        return f"00-{self.trace_id}-{span_id}-{self.flags}"


@dataclass
class AttemptSpan:
    """One attempt's span: its id (the `traceparent`'s parent id) and, once it is over, its outcome."""

    span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class RunEnd:
    """A run's span, recorded when the run ends: its times (POSIX seconds, by the database's clock), status and
    attributes (never a secret: names, times, numbers, and errors already scrubbed)."""

    trace: RunTrace
    task_id: str
    kind: str
    scheduled_for: str
    status: str
    started: float
    ended: float
    attempt: int
    error: str | None = None
    http_status: int | None = None


class Tracer:
    """Records no spans; its requests still carry a `traceparent` (a random span id per attempt)."""

    enabled = False

    def sampled(self, trace: RunTrace) -> RunTrace:
        """`trace` with the flags its requests carry: the sampler's decision (this one: the flags it has)."""
        return trace

    @contextlib.contextmanager
    def attempt(self, trace: RunTrace, attributes: Mapping[str, Any]) -> Iterator[AttemptSpan]:
        """One attempt's span, a child of its run's, around the request."""
        yield AttemptSpan(new_span_id(), dict(attributes))

    def run(self, end: RunEnd) -> None:
        """Record a run's span, once it has ended."""

    def callback(self, trace: RunTrace, route: str, status: int) -> None:
        """Record a job's callback (heartbeat, complete) as a span of its run."""

    def shutdown(self) -> None:
        """Send what is buffered; at the engine's exit."""


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the standard OTEL_* variables ask for traces: an exporter named (not "none") or an OTLP endpoint
    given, and the SDK not disabled."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
