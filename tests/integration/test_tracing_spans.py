"""With OpenTelemetry (the SDK's in-memory exporter): one span per run with a child per attempt, each attempt's span
the `traceparent` its target received; a manual run under its caller's span; a job's callbacks and its end joined
to its run's span; no secret in any attribute."""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.operate.audit import Operator
from reconciler.operate.runs import trigger
from reconciler.otel import OtelTracer, provider_of
from reconciler.targets.http import Firer
from reconciler.tracing import run_span_id
from tests.builders import cron
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, SECRET, RecordingSleep, setup

KEY = "whsec_" + base64.b64encode(b"k" * 32).decode()
ENV = {"API_KEY": SECRET, "WH_KEY": KEY}
SECRET_TARGET = (
    'headers = { X-Api-Key = { env = "API_KEY" } }\nquery = { token = { env = "API_KEY" } }\n'
    '[target.auth]\nkind = "bearer"\ntoken = { env = "API_KEY" }\n'
    '[target.signing]\nkind = "standard-webhooks"\nsecret = { env = "WH_KEY" }\n'
)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    found = InMemorySpanExporter()
    yield found
    found.clear()


@pytest.fixture
async def traced(store: Store, exporter: InMemorySpanExporter) -> AsyncIterator[Engine]:
    tracer = OtelTracer(provider_of(SimpleSpanProcessor(exporter), {}))
    firer = Firer(concurrency=10, env=ENV)
    firer.sleep = RecordingSleep()
    made = Engine(store, EngineConfig("traced", public_url="http://jobs.example.test"), firer, tracer=tracer)
    yield made
    await firer.close()
    await made.deliverer.close()
    tracer.shutdown()


def hexed(value: int, width: int) -> str:
    return f"{value:0{width}x}"


def by_name(spans: Any, name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def no_secret_in(spans: Any) -> None:
    for span in spans:
        text = repr(dict(span.attributes or {})) + repr(span.status.description) + span.name
        for secret in (SECRET, KEY, KEY.removeprefix("whsec_")):
            assert secret not in text, span.name


async def test_a_run_is_one_span_with_a_child_per_attempt_whose_id_its_target_received(
    store: Store, dsn: str, traced: Engine, exporter: InMemorySpanExporter, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/flaky", statuses=[503, 200])
    files = {"flaky": cron(f"{url}/flaky", policy="retries = 1", target=SECRET_TARGET)}
    await setup(store, tmp_path, files)
    report = await traced.run_once(NOW + timedelta(minutes=5))
    assert report.succeeded == 1
    with psycopg.connect(dsn) as conn:
        [(run_id, trace_id)] = conn.execute(
            "SELECT id, replace(trace_id::text, '-', '') FROM scheduler.runs"
        ).fetchall()
    spans = exporter.get_finished_spans()
    [run] = by_name(spans, "reconciler.run")
    attempts = by_name(spans, "reconciler.attempt")
    assert len(spans) == 3 and len(attempts) == 2
    assert run.context is not None and run.parent is None  # a new trace: the run is its root
    assert hexed(run.context.trace_id, 32) == trace_id and hexed(run.context.span_id, 16) == run_span_id(
        trace_id, run_id
    )
    attributes = dict(run.attributes or {})
    assert attributes["reconciler.task_id"] == "flaky" and attributes["reconciler.run_id"] == run_id
    assert (attributes["reconciler.kind"], attributes["reconciler.status"]) == ("scheduled", "succeeded")
    assert attributes["reconciler.attempt"] == 2 and attributes["http.response.status_code"] == 200
    assert attributes["reconciler.scheduled_for"] == "2026-12-02T12:05:00+00:00"
    received = [r.headers["traceparent"] for r in rec.paths("/flaky")]
    for attempt, header in zip(attempts, received, strict=True):
        assert attempt.parent is not None and attempt.parent.span_id == run.context.span_id
        assert attempt.context is not None
        assert header == f"00-{trace_id}-{hexed(attempt.context.span_id, 16)}-01"
    assert [dict(a.attributes or {})["http.response.status_code"] for a in attempts] == [503, 200]
    no_secret_in(spans)


async def test_a_manual_run_with_a_traceparent_is_a_child_of_its_callers_span(
    store: Store, traced: Engine, exporter: InMemorySpanExporter, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _rec = http
    await setup(store, tmp_path, {"t": cron(f"{url}/t", expr="0 0 1 1 *")})
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    await trigger(store, "t", Operator("tester"), caller)
    await traced.run_once(NOW)
    [run] = by_name(exporter.get_finished_spans(), "reconciler.run")
    assert run.parent is not None and hexed(run.parent.span_id, 16) == "00f067aa0ba902b7"
    assert run.context is not None and hexed(run.context.trace_id, 32) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert dict(run.attributes or {})["reconciler.kind"] == "manual"


async def test_a_jobs_callbacks_and_its_end_join_its_runs_span(
    store: Store, dsn: str, traced: Engine, exporter: InMemorySpanExporter, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/job", statuses=[202])
    job = 'completion = "callback"\ndeadline = "1h"\n' + SECRET_TARGET
    await setup(store, tmp_path, {"job": cron(f"{url}/job", target=job)})
    await traced.run_once(NOW + timedelta(minutes=5))
    assert by_name(exporter.get_finished_spans(), "reconciler.run") == []  # accepted: the run is not over yet
    [request] = rec.paths("/job")
    match = re.search(r"/runs/(\d+)/([A-Za-z0-9_-]+)$", request.headers["X-Reconciler-Callback"])
    assert match is not None
    run_id, token = int(match.group(1)), match.group(2)
    assert (await traced.jobs.heartbeat(run_id, token, {"done": 1})).status == 200
    assert (await traced.jobs.complete(run_id, token, "succeeded", {"rows": 3}, None)).status == 200
    assert (await traced.jobs.complete(run_id, token, "succeeded", None, None)).status == 409
    spans = exporter.get_finished_spans()
    [run] = by_name(spans, "reconciler.run")
    assert run.context is not None and dict(run.attributes or {})["reconciler.status"] == "succeeded"
    callbacks = [span for span in spans if span.name.startswith("reconciler.callback.")]
    assert [(s.name, dict(s.attributes or {})["http.response.status_code"]) for s in callbacks] == [
        ("reconciler.callback.heartbeat", 200),
        ("reconciler.callback.complete", 200),
        ("reconciler.callback.complete", 409),
    ]
    for span in [*callbacks, *by_name(spans, "reconciler.attempt")]:
        assert span.parent is not None and span.parent.span_id == run.context.span_id
        assert span.context is not None and span.context.trace_id == run.context.trace_id
    no_secret_in(spans)
    assert token not in repr([dict(s.attributes or {}) for s in spans])
