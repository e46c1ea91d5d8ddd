"""Trace context without OpenTelemetry: traceparents read and refused, a run's span id the same wherever it is
computed, which OTEL_* variables ask for traces, and nothing of OpenTelemetry imported when none do."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.tracing import TRACEPARENT, RunTrace, Tracer, run_span_id, traceparent_problem, wanted
from tests.builders import cli

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (CALLER, None),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", None),
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "not a W3C traceparent"),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "all zeros"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "all zeros"),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "not a W3C traceparent"),
        (CALLER + "-extra", "not a W3C traceparent"),
        (CALLER + "\n", "not a W3C traceparent"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736\x00-00f067aa0ba902b7-01", "not a W3C traceparent"),
        ("", "not a W3C traceparent"),
        ("é" * 10_000, "not a W3C traceparent"),
    ],
)
def test_a_traceparent_is_read_or_refused_with_the_form_to_give(text: str, problem: str | None) -> None:
    found = traceparent_problem(text)
    assert (found is None) if problem is None else (found is not None and problem in found)
    if found is not None:
        assert "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" in found or "zeros" in found


@given(st.uuids(), st.integers(min_value=1, max_value=2**63 - 1))
def test_a_runs_span_id_is_the_same_wherever_computed_and_its_header_is_valid(trace: uuid.UUID, run_id: int) -> None:
    one, two = RunTrace.of(run_id, trace), RunTrace.of(run_id, trace.hex)
    assert one == two and one.trace_id == trace.hex and one.span_id == run_span_id(trace.hex, run_id)
    assert TRACEPARENT.fullmatch(one.header(one.span_id)) and traceparent_problem(one.header(one.span_id)) is None
    assert run_span_id(trace.hex, run_id) != run_span_id(trace.hex, run_id + 1)


def test_a_manual_run_joins_its_callers_trace_under_the_callers_span_with_its_flags() -> None:
    unsampled = CALLER[:-2] + "00"
    run = RunTrace.of(7, uuid.UUID("4bf92f3577b34da6a3ce929d0e0e4736"), unsampled)
    assert (run.trace_id, run.parent_id, run.flags) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "00")
    assert run.header("1234567890abcdef") == "00-4bf92f3577b34da6a3ce929d0e0e4736-1234567890abcdef-00"


def test_a_row_from_before_traces_gets_a_trace_of_its_own() -> None:
    first, second = RunTrace.of(1, None), RunTrace.of(1, None)
    assert len(first.trace_id) == 32 and first.trace_id != second.trace_id and first.parent_id is None


def test_the_default_tracer_gives_each_attempt_a_span_id_of_its_own() -> None:
    tracer, run = Tracer(), RunTrace.of(1, uuid.uuid4())
    ids = set()
    for _ in range(100):
        with tracer.attempt(run, {}) as span:
            ids.add(span.span_id)
    assert len(ids) == 100 and all(len(i) == 16 and i != "0" * 16 for i in ids)
    assert not tracer.enabled and tracer.sampled(run) is run


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_which_otel_variables_ask_for_traces(env: dict[str, str], expected: bool) -> None:
    assert wanted(env) is expected


def test_without_otel_variables_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys\n"
        "from reconciler.cli import engine, runtime\n"
        "from reconciler.engine.loop import Engine\n"
        "tracer = runtime.tracer({})\n"
        "assert not tracer.enabled\n"
        "print(sorted(name for name in sys.modules if name.startswith('opentelemetry')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("given_", ["x" * 10_000, CALLER.upper(), "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "\x00"])
def test_trigger_refuses_a_malformed_traceparent_in_one_line_without_echoing_it(given_: str) -> None:
    code, _out, err = cli(None, None, "trigger", "t", "--traceparent", given_)
    assert code != 0 and "--traceparent" in err and ("not a W3C traceparent" in err or "all zeros" in err)
    assert "Traceback" not in err and "x" * 100 not in err
