"""What a run is and can be: the one vocabulary of run statuses and kinds.

The database's CHECK constraints (schemata.toml), the command line's choices, the dashboard's filters, the
engine's decisions and the backfill's reprocessing all read these names from here; a test keeps schemata.toml's
lists equal to them.
"""

from __future__ import annotations

from typing import Literal, get_args

RunStatus = Literal[
    "queued", "running", "succeeded", "failed", "missed", "skipped", "lost", "timed_out"
]  # timed_out: a job (docs/jobs.md) past its deadline or heartbeat timeout
RunKind = Literal["scheduled", "catchup", "manual", "retry", "backfill"]

STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
KINDS: tuple[RunKind, ...] = get_args(RunKind)

PENDING: frozenset[RunStatus] = frozenset({"queued", "running"})  # not over yet
FINAL: tuple[RunStatus, ...] = tuple(status for status in STATUSES if status not in PENDING)
# over, but not succeeded
UNSUCCESSFUL: frozenset[RunStatus] = frozenset({"failed", "missed", "skipped", "lost", "timed_out"})
RECORDED: frozenset[RunStatus] = frozenset({"missed", "skipped", "failed", "lost"})  # ended without a request
QUEUED_KINDS: frozenset[RunKind] = frozenset({"manual", "backfill"})  # queued by an operator, started in a claim
