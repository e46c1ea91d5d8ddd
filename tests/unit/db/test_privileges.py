"""grants_sql renders ROLE_PRIVILEGES safely; a refused query is explained by the privileges it uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.db.errors import needed_privileges
from reconciler.db.grants import ROLE_COMMANDS, ROLE_PRIVILEGES, grants_sql, privilege_table
from reconciler.db.schema import load_schemata
from reconciler.db.store import QUERIES
from reconciler.errors import UserError
from tests.generated_docs import COMMAND, DEPLOY_README, PARTS, ROOT, part


def test_every_declared_table_has_its_grants_decided() -> None:
    granted = {table for tables in ROLE_PRIVILEGES.values() for table in tables}
    assert {t.name for t in load_schemata().tables} <= granted


def test_applier_may_do_what_the_planner_does() -> None:
    for table, privileges in ROLE_PRIVILEGES["planner"].items():
        assert set(privileges) <= set(ROLE_PRIVILEGES["applier"][table]), table


def test_engine_may_move_next_run_at_but_not_rewrite_a_task() -> None:
    assert ROLE_PRIVILEGES["engine"]["tasks"] == ("SELECT", "UPDATE(next_run_at, limit_wait)")


def test_a_pause_is_written_by_operators_and_only_read_by_engines() -> None:
    assert ROLE_PRIVILEGES["engine"]["pauses"] == ("SELECT",)  # a leaked engine credential resumes nothing
    assert ROLE_PRIVILEGES["applier"]["pauses"] == ("SELECT", "INSERT", "UPDATE", "DELETE")
    assert ROLE_PRIVILEGES["planner"]["pauses"] == ("SELECT",)


def test_no_role_but_the_owner_may_rewrite_the_audit_log() -> None:
    assert ROLE_PRIVILEGES["applier"]["audit"] == ("SELECT", "INSERT")  # every operator command writes its row
    assert ROLE_PRIVILEGES["engine"]["audit"] == ("SELECT", "DELETE")  # retention, by age
    assert ROLE_PRIVILEGES["planner"]["audit"] == ("SELECT",)
    assert not any("UPDATE" in p for grants in ROLE_PRIVILEGES.values() for p in grants.get("audit", ()))


def test_grants_per_role_with_column_privileges_quoted() -> None:
    text = grants_sql("ci_plan", None, "eng")
    assert 'GRANT USAGE ON SCHEMA "scheduler" TO "ci_plan";' in text
    assert 'GRANT SELECT ON TABLE "scheduler"."tasks" TO "ci_plan";' in text
    assert 'GRANT SELECT, UPDATE ("next_run_at", "limit_wait") ON TABLE "scheduler"."tasks" TO "eng";' in text
    assert "-- applier" not in text
    assert grants_sql(None, None, None) == ""


@pytest.mark.parametrize("name", ['x"; DROP TABLE scheduler.tasks; --', "a\nDROP ROLE postgres; --", "Mixed Case"])
def test_hostile_role_names_stay_one_identifier(name: str) -> None:
    quoted = '"' + name.replace('"', '""') + '"'
    text = grants_sql(name, name, name)
    assert text.replace(quoted, '"R"') == grants_sql("R", "R", "R")


@pytest.mark.parametrize("name", ["", "public", "none", "x" * 64, "a\0b"])
def test_role_names_postgres_would_misread_are_refused(name: str) -> None:
    with pytest.raises(UserError):
        grants_sql(name, None, None)


def test_privilege_table_lists_every_role() -> None:
    table = privilege_table()
    for role, commands in ROLE_COMMANDS.items():
        assert f"| {role} | {commands} |" in table
    assert "SELECT, UPDATE(next_run_at, limit_wait)" in table


@pytest.mark.parametrize(
    ("query", "table", "expected"),
    [
        ("task_insert", "tasks", ["INSERT"]),
        ("task_update", "tasks", ["UPDATE"]),
        ("claim_due", "tasks", ["SELECT", "UPDATE"]),  # FOR UPDATE locks rows
        ("leases_expired", "run_leases", ["DELETE"]),
        ("runs_mark_lost", "runs", ["UPDATE", "INSERT", "SELECT"]),  # a lost backfill run is queued again
        ("run_queue_manual", "runs", ["INSERT"]),
        ("status_rows", "runs", ["SELECT"]),
        ("claim_due", "pauses", ["SELECT", "UPDATE"]),  # FOR UPDATE OF the tasks: the message over-asks
        ("pause_upsert", "pauses", ["INSERT", "UPDATE"]),
        ("audit_insert", "audit", ["INSERT"]),
        ("audit_prune_age", "audit", ["DELETE", "SELECT"]),
    ],
)
def test_refused_query_names_the_privileges_it_uses(query: str, table: str, expected: list[str]) -> None:
    assert needed_privileges(QUERIES[query], table) == (f"scheduler.{table}", expected)


@pytest.mark.parametrize(("path", "name"), list(PARTS), ids=[name for _, name in PARTS])
def test_deploy_readme_shows_what_the_code_prints_now(path: Path, name: str) -> None:
    """deploy/README.md's privilege table and GRANTs are `privilege_table()` and `reconciler db grants`'s output."""
    shown, now = part(path, name), PARTS[path, name]() + "\n"
    assert shown == now, f"{path.relative_to(ROOT)}'s {name} is stale: run `{COMMAND}` from the repository root"


def test_the_generated_grants_name_every_declared_table_and_the_roles_shown() -> None:
    grants = part(DEPLOY_README, "grants")
    for table in load_schemata().tables:
        assert f'"scheduler"."{table.name}"' in grants, table.name
    assert 'TO "reconciler_plan";' in grants and 'TO "reconciler_engine";' in grants
    assert privilege_table() in part(DEPLOY_README, "privilege-table")
