"""The typed rows of the query layer name exactly the columns their statements select: a TypedDict
that drifts from queries.sql would let mypy vouch for keys the rows do not have."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from reconciler.db import command_queries, declared, operator_queries, queries
from reconciler.db.store import QUERIES, Store

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LISTED = {"task_id": None, "status": None, "limit": 1}

# statement → (its row type, parameters that run it)
TYPED: dict[str, tuple[type, dict[str, Any]]] = {
    "status_rows": (command_queries.StatusRow, {}),
    "engines_live": (command_queries.EngineRow, {"seconds": 30.0}),
    "applies_live_sources": (command_queries.LiveSourceRow, {}),
    "applies_list": (command_queries.ApplyRow, {"source": None, "task_id": "t", "limit": 1}),
    "runs_between": (command_queries.RunBetweenRow, {"task_id": "t", "lo": NOW, "hi": NOW}),
    "runs_list": (command_queries.RunRow, LISTED),
    "run_get": (command_queries.RunRow, {"run_id": 1}),
    "notifications_list": (command_queries.OutboxRow, LISTED),
    "notifications_of_runs": (command_queries.RunNotificationRow, {"run_ids": [1]}),
    "pauses_in_force": (operator_queries.PauseRow, {"ids": None}),
    "operator_tasks": (operator_queries.OperatorTaskRow, {"ids": ["t"], "source": None}),
    "audit_list": (operator_queries.AuditRow, {"task_id": "t", "limit": 1}),
    "claim_due": (queries.DueRow, {"now": NOW, "batch": 1, "sources": []}),
}


@pytest.mark.parametrize("query", sorted(TYPED))
async def test_a_typed_row_has_its_statements_columns(store: Store, dsn: str, query: str) -> None:
    row_type, params = TYPED[query]
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(QUERIES[query], params)
        assert cursor.description is not None
        columns = [column.name for column in cursor.description]
    assert columns == list(row_type.__annotations__), query


@pytest.mark.parametrize("table", ["notifiers", "calendars", "limits", "declared"])
async def test_the_stored_items_of_every_declared_table_have_the_typed_rows_columns(store: Store, table: str) -> None:
    """db/declared.py composes one statement for every kind stored whole; its rows are StoredItemRow's."""
    async with store.transaction() as conn:
        await declared.item_upsert(
            conn,
            table=table,
            kind="limit",
            source="s",
            name="n",
            spec='{"max_in_flight": 1}',
            spec_hash="h",
            columns={},
            created={},
        )
        [row] = await declared.stored_items(conn, table=table, kind="limit")
    assert list(row) == list(declared.StoredItemRow.__annotations__)
