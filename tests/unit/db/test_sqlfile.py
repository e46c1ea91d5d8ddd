"""queries.sql's fragments are written in as text when it is loaded: a statement that uses one reads
exactly as if it were written out."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.db.sqlfile import load_queries


def test_a_fragment_is_substituted_with_its_argument(tmp_path: Path) -> None:
    sql = tmp_path / "q.sql"
    sql.write_text(
        "-- fragment: mine(column)\n-- which rows\n({column} = ANY(%(sources)s))\n\n"
        "-- fragment: one\n1\n\n"
        "-- name: a\n-- a comment\nSELECT {{one}} FROM t WHERE {{mine(t.source)}};\n\n"
        "-- name: b\nSELECT 2 FROM u WHERE {{mine( source )}};\n"
    )
    assert load_queries(sql) == {
        "a": "SELECT 1 FROM t WHERE (t.source = ANY(%(sources)s))",
        "b": "SELECT 2 FROM u WHERE (source = ANY(%(sources)s))",
    }


def test_an_unknown_fragment_is_an_error(tmp_path: Path) -> None:
    sql = tmp_path / "q.sql"
    sql.write_text("-- name: a\nSELECT {{nothing}};\n")
    with pytest.raises(ValueError, match="unknown fragment 'nothing'"):
        load_queries(sql)


def test_a_query_defined_twice_is_an_error(tmp_path: Path) -> None:
    sql = tmp_path / "q.sql"
    sql.write_text("-- name: a\nSELECT 1;\n\n-- name: b\nSELECT 2;\n\n-- name: a\nSELECT 3;\n")
    with pytest.raises(ValueError, match="query a is defined twice"):
        load_queries(sql)


def test_every_fragment_of_queries_sql_is_used_and_none_is_left() -> None:
    queries = load_queries()
    assert not any("{{" in statement for statement in queries.values())
    # claim_queued, nearest_due, and backfill_stall (what holds a backfill's next run)
    assert sum("max_running_instances')::numeric" in statement for statement in queries.values()) == 3
