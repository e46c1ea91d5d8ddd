"""One vocabulary of run statuses and kinds (reconciler/runs.py): the database's CHECK constraints say the same."""

from __future__ import annotations

import re

from reconciler.db.schema import load_schemata
from reconciler.runs import FINAL, KINDS, PENDING, STATUSES, UNSUCCESSFUL


def check_values(column: str) -> tuple[str, ...]:
    """The values a CHECK (column IN (...)) of scheduler.runs allows, in its order."""
    [runs] = [table for table in load_schemata().tables if table.name == "runs"]
    [found] = [c for c in runs.columns if c.name == column]
    assert found.check is not None
    return tuple(re.findall(r"'([a-z_]+)'", found.check))


def test_the_runs_table_allows_exactly_the_statuses_and_kinds_of_the_vocabulary() -> None:
    assert check_values("status") == STATUSES
    assert check_values("kind") == KINDS


def test_every_status_is_pending_or_final_and_unsuccessful_ones_are_final() -> None:
    assert set(FINAL) | PENDING == set(STATUSES)
    assert not set(FINAL) & PENDING
    assert set(FINAL) >= UNSUCCESSFUL and "succeeded" not in UNSUCCESSFUL
