"""A job's state as the command line shows it under its run (docs/jobs.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reconciler.clock import utc_text

JOB_JSON_CHARS = 300  # of a job's progress or output on one line


def job_lines(run: Mapping[str, Any]) -> list[str]:
    """A job's state under its run (values already masked: output/masking.masked_job): accepted, last heartbeat,
    deadline or retry, and what it reported. No line for a run that is not a job."""
    facts = []
    if run.get("accepted_at"):
        facts.append(f"job accepted {utc_text(run['accepted_at'])}")
        if run.get("heartbeat_at"):
            facts.append(f"last heartbeat {utc_text(run['heartbeat_at'])}")
        if run.get("status") == "running" and run.get("deadline_at"):
            facts.append(f"deadline {utc_text(run['deadline_at'])}")
    if run.get("status") == "queued" and run.get("retry_at"):
        facts.append(f"job retried at {utc_text(run['retry_at'])}")
    lines = [", ".join(facts)] if facts else []
    lines += [f"{name}: {compact(run[name])}" for name in ("progress", "output") if run.get(name) is not None]
    return lines


def compact(value: Any) -> str:
    """A job's progress or output as one line of JSON, at most JOB_JSON_CHARS characters (the command line's and
    the dashboard's)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text[:JOB_JSON_CHARS] + ("…" if len(text) > JOB_JSON_CHARS else "")
