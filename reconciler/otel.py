"""The OpenTelemetry tracer (the `otel` extra): a span per run, a child per attempt and per job callback, through the
OpenTelemetry SDK, configured by the standard OTEL_* variables (service name, resource, sampler, the OTLP
exporter's endpoint and headers, the batch processor's limits). Imported only by cli/runtime.tracer when those
variables ask for traces, and by tests that give it an exporter of their own. Every span's times are the database's
clock's (clock.DATABASE), as the run's own are.

A run's span is recorded when the run ends, with the times it had, by whichever engine ends it; its ids are the
run's (tracing.RunTrace), which the SDK takes from `RunIds` while the span is made.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from reconciler import __version__
from reconciler.clock import DATABASE
from reconciler.tracing import SAMPLED, AttemptSpan, RunEnd, RunTrace, Tracer

SCOPE = "reconciler"
# The ids the next span made takes: a run's span is made with its run's (trace id, span id); None: random ones.
FORCED: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("reconciler_forced_ids", default=None)


class NotConfigured(Exception):
    """The OTEL_* variables name an exporter this installation does not have."""


class RunIds(IdGenerator):
    """Random ids, except while a run's span is made: then the run's."""

    def __init__(self) -> None:
        self.random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        forced = FORCED.get()
        return forced[1] if forced is not None else self.random.generate_span_id()

    def generate_trace_id(self) -> int:
        forced = FORCED.get()
        return forced[0] if forced is not None else self.random.generate_trace_id()


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _now() -> int:
    """Now by the database's clock, in nanoseconds (a span's time)."""
    return _ns(DATABASE.timestamp())


def _context(trace_id: str, span_id: str, flags: str) -> Context:
    """A context whose (remote) current span is `span_id` of `trace_id`: the parent of what is made in it."""
    sampled = TraceFlags(TraceFlags.SAMPLED if int(flags, 16) & 1 else TraceFlags.DEFAULT)
    parent = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=sampled)
    return trace.set_span_in_context(NonRecordingSpan(parent), Context())


class OtelTracer(Tracer):
    """Spans through an OpenTelemetry SDK TracerProvider."""

    enabled = True

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE, __version__)

    def _parent(self, run: RunTrace) -> Context:
        """The context a run's own span is made in: its caller's span, or none (a new trace)."""
        if run.parent_id is None:
            return Context()
        return _context(run.trace_id, run.parent_id, run.flags)

    def sampled(self, trace_: RunTrace) -> RunTrace:
        decision = self.provider.sampler.should_sample(
            self._parent(trace_), int(trace_.trace_id, 16), "reconciler.run"
        ).decision
        return dataclasses.replace(trace_, flags=SAMPLED if decision is Decision.RECORD_AND_SAMPLE else "00")

    @contextlib.contextmanager
    def attempt(self, run: RunTrace, attributes: Mapping[str, Any]) -> Iterator[AttemptSpan]:
        span = self.tracer.start_span(
            "reconciler.attempt",
            context=_context(run.trace_id, run.span_id, run.flags),
            kind=SpanKind.CLIENT,
            attributes=dict(attributes),
            start_time=_now(),
        )
        context = span.get_span_context()
        got = AttemptSpan(f"{context.span_id:016x}" if context.is_valid else "", dict(attributes))
        try:
            yield got
        finally:
            span.set_attributes({k: v for k, v in got.attributes.items() if v is not None})
            if got.error:
                span.set_status(Status(StatusCode.ERROR, got.error))
            span.end(end_time=_now())

    def run(self, end: RunEnd) -> None:
        attributes: dict[str, Any] = {
            "reconciler.task_id": end.task_id,
            "reconciler.run_id": end.trace.run_id,
            "reconciler.kind": end.kind,
            "reconciler.scheduled_for": end.scheduled_for,
            "reconciler.status": end.status,
            "reconciler.attempt": end.attempt,
        }
        if end.http_status is not None:
            attributes["http.response.status_code"] = end.http_status
        token = FORCED.set((int(end.trace.trace_id, 16), int(end.trace.span_id, 16)))
        try:
            span = self.tracer.start_span(
                "reconciler.run", context=self._parent(end.trace), attributes=attributes, start_time=_ns(end.started)
            )
        finally:
            FORCED.reset(token)
        if end.status != "succeeded":
            span.set_status(Status(StatusCode.ERROR, end.error or end.status))
        span.end(end_time=_ns(max(end.ended, end.started)))

    def callback(self, run: RunTrace, route: str, status: int) -> None:
        attributes: dict[str, Any] = {
            "reconciler.run_id": run.run_id,
            "reconciler.callback": route,
            "http.response.status_code": status,
        }
        span = self.tracer.start_span(
            f"reconciler.callback.{route}",
            context=_context(run.trace_id, run.span_id, run.flags),
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=(at := _now()),
        )
        span.end(end_time=at)

    def shutdown(self) -> None:
        self.provider.shutdown()


def exporter_of(env: Mapping[str, str]) -> SpanExporter:
    """The exporter OTEL_TRACES_EXPORTER names (default otlp, over HTTP; its OTEL_EXPORTER_OTLP_* variables are
    read by it)."""
    name = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if name == "console":
        return ConsoleSpanExporter()
    if name != "otlp":
        raise NotConfigured(f"OTEL_TRACES_EXPORTER={name} is not supported here: use otlp or console")
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    )
    if protocol.strip() != "http/protobuf":
        raise NotConfigured(f"OTLP protocol {protocol} is not supported here: use http/protobuf")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def provider_of(processor: SpanProcessor, env: Mapping[str, str]) -> TracerProvider:
    """A TracerProvider sending its spans to `processor`, its resource from OTEL_SERVICE_NAME and
    OTEL_RESOURCE_ATTRIBUTES (service.name "reconciler" when neither names one), its sampler from
    OTEL_TRACES_SAMPLER."""
    attributes = {"service.version": __version__}
    if not env.get("OTEL_SERVICE_NAME") and "service.name=" not in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes["service.name"] = SCOPE
    resource = Resource.create(attributes)
    provider = TracerProvider(resource=resource, id_generator=RunIds(), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    return provider


def from_environment(env: Mapping[str, str]) -> OtelTracer:
    """The tracer the OTEL_* variables describe, exporting in batches (OTEL_BSP_*) off the event loop."""
    return OtelTracer(provider_of(BatchSpanProcessor(exporter_of(env)), env))
