"""Least privilege: what each role needs on schema scheduler, as data, and the GRANTs for it (pure).

Four roles besides the owner (who runs `reconciler db init`): a planner that only reads, an
applier that writes task rows, an engine that may move a task's `next_run_at` but never
its spec, so a leaked engine credential cannot point a task at another URL, and a dashboard that
reads what its pages show. With the engine's grants comes a trigger on the audit log that refuses
the DELETE of a row younger than AUDIT_FLOOR_DAYS: retention is the engine's, and a leaked engine
credential cannot erase the recent record of who did what (docs/guarantees.md says what it can do).
Advisory locks, LISTEN and NOTIFY need no grant; the runs id is an identity column, so
INSERT on runs needs no grant on its sequence.
"""

from __future__ import annotations

import re

from psycopg import sql

from reconciler.db import schema
from reconciler.errors import UserError

# Days an audit row is kept whatever --keep-runs-days says: no engine deletes a younger one (audit_prune_age), and
# the database refuses the DELETE of one by any role but one that may drop the trigger (the owner).
AUDIT_FLOOR_DAYS = 7
AUDIT_GUARD = "audit_keeps_recent"  # the trigger and its function

# role → table → privileges; `UPDATE(col, …)` is a column privilege. Tables that schemata.toml does
# not (yet) declare are left out of the statements.
ROLE_PRIVILEGES: dict[str, dict[str, tuple[str, ...]]] = {
    "planner": {
        "tasks": ("SELECT",),
        "runs": ("SELECT",),
        "engines": ("SELECT",),
        "applies": ("SELECT",),
        "notifiers": ("SELECT",),
        "calendars": ("SELECT",),
        "limits": ("SELECT",),
        "declared": ("SELECT",),
        "notifications": ("SELECT",),
        "pauses": ("SELECT",),
        "audit": ("SELECT",),
        "backfills": ("SELECT",),
    },
    "applier": {
        "tasks": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # a `moved_from` rename carries run history and leases over; `trigger` queues a manual run and
        # `cancel` ends a queued one
        "runs": ("SELECT", "INSERT", "UPDATE(task_id, status, finished_at, error)"),
        "run_leases": ("SELECT", "UPDATE(task_id)"),
        "engines": ("SELECT",),
        "applies": ("SELECT", "INSERT"),
        "notifiers": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "calendars": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "limits": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "declared": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # a deleted notifier's pending events end in the apply that deletes it
        "notifications": ("SELECT", "UPDATE(status, next_attempt_at, error)"),
        # a task deleted, or its failure/recovery/lost subscribers changed, starts its failing state afresh
        "notify_state": ("SELECT", "DELETE"),
        # `pause` and `resume` (and an apply deleting or moving a paused task)
        "pauses": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # every operator action's row; never rewritten or deleted by an operator command
        "audit": ("SELECT", "INSERT"),
        # `backfill` records one (its runs are runs rows); `backfill --cancel` marks it cancelled; a move moves it
        "backfills": ("SELECT", "INSERT", "UPDATE(task_id, cancelled_at, cancelled_by)"),
    },
    "engine": {
        # next_run_at, and the limit a due occurrence waits for
        "tasks": ("SELECT", "UPDATE(next_run_at, limit_wait)"),
        "runs": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "run_leases": ("SELECT", "INSERT", "DELETE"),
        "engines": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # notifiers are read, never written: a leaked engine credential cannot redirect them either
        "notifiers": ("SELECT",),
        # none on calendars: an engine reads the calendars a task names from the task's row
        # limits: the claim takes tokens from a limit's bucket and counts what it held back or missed; never
        # its numbers (a leaked engine credential cannot lift a limit)
        "limits": ("SELECT", "UPDATE(tokens, refilled_at, missed_total, delayed_total)"),
        "notifications": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        "notify_state": ("SELECT", "INSERT", "UPDATE"),
        # the leases on fleet-wide work (metrics, the late scan): taken, renewed and read
        "leader": ("SELECT", "INSERT", "UPDATE"),
        # read, never written: a leaked engine credential cannot resume a paused task
        "pauses": ("SELECT",),
        # retention deletes rows older than --keep-runs-days (and than AUDIT_FLOOR_DAYS: a younger row's DELETE is
        # refused, see audit_guard); no UPDATE: it cannot rewrite one
        "audit": ("SELECT", "DELETE"),
        # read, never written: whether a lost backfill run is queued again (not when its backfill was cancelled)
        "backfills": ("SELECT",),
    },
    # the read-only dashboard: SELECT on what its pages show, nothing else (no notifiers, no audit log)
    "dashboard": {
        "tasks": ("SELECT",),
        "runs": ("SELECT",),
        "engines": ("SELECT",),
        "applies": ("SELECT",),
        "notifications": ("SELECT",),
        "pauses": ("SELECT",),
        "limits": ("SELECT",),
    },
}

# What each role may run (for the README and the comments of the generated SQL).
ROLE_COMMANDS: dict[str, str] = {
    "planner": "plan, status, runs, notifications, explain, export, history, audit, backfill --dry-run, --list",
    "applier": "the planner's commands, apply, watch, trigger, cancel, pause, resume, backfill",
    "engine": "engine",
    "dashboard": "dashboard (and the pages `engine --metrics-addr` serves, on their own connections)",
}

_PRIVILEGE = re.compile(r"^(SELECT|INSERT|UPDATE|DELETE)(?:\(([^)]*)\))?$")


def _privilege(text: str) -> sql.Composable:
    """`UPDATE(next_run_at)` → UPDATE ("next_run_at"), column names quoted."""
    match = _PRIVILEGE.match(text)
    if match is None:
        raise ValueError(f"not a table privilege: {text!r}")
    verb, columns = match.groups()
    if columns is None:
        return sql.SQL(verb)
    names = [sql.Identifier(c.strip()) for c in columns.split(",")]
    return sql.SQL("{} ({})").format(sql.SQL(verb), sql.SQL(", ").join(names))


def _checked(role: str) -> str:
    """A role name PostgreSQL takes as is: it truncates longer names to 63 bytes without an error,
    and reads `TO "public"`, quoted or not, as every role."""
    if not role or "\0" in role or len(role.encode()) > 63:
        raise UserError(f"role name {role!r}: must be 1 to 63 bytes without NUL")
    if role in ("public", "none"):
        raise UserError(f"role name {role!r} is reserved in GRANT; name a role of its own")
    return role


def grants_sql(planner: str | None, applier: str | None, engine: str | None, dashboard: str | None = None) -> str:
    """The GRANT statements that give each named role (None: skip it) exactly what it needs."""
    decl = schema.load_schemata()
    declared = [t.name for t in decl.tables]
    blocks: list[str] = []
    for kind, role in (("planner", planner), ("applier", applier), ("engine", engine), ("dashboard", dashboard)):
        if role is None:
            continue
        grantee = sql.Identifier(_checked(role))
        lines = [f"-- {kind}: {ROLE_COMMANDS[kind]}"]  # not the name: a newline in it would end the comment
        statements = [sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(decl.schema), grantee)]
        tables = ROLE_PRIVILEGES[kind]
        for table in (t for t in declared if t in tables):
            statements.append(
                sql.SQL("GRANT {} ON TABLE {} TO {}").format(
                    sql.SQL(", ").join(_privilege(p) for p in tables[table]),
                    sql.Identifier(decl.schema, table),
                    grantee,
                )
            )
        lines += [s.as_string(None) + ";" for s in statements]
        if kind == "engine" and "audit" in declared:
            lines.append(f"-- the audit log: the DELETE of a row younger than {AUDIT_FLOOR_DAYS} days is refused")
            lines += [s.as_string(None) + ";" for s in audit_guard(decl.schema)]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def audit_guard(schema_name: str) -> list[sql.Composable]:
    """A trigger that refuses the DELETE of an audit row younger than AUDIT_FLOOR_DAYS (by the database's clock),
    whoever sends it: with the engine's DELETE for retention, a leaked engine credential still cannot erase what was
    done this week. Installed again as is by every `db grants` the owner runs (only an owner may drop it)."""
    function, table = sql.Identifier(schema_name, AUDIT_GUARD), sql.Identifier(schema_name, "audit")
    body = (
        f"BEGIN IF OLD.at >= now() - interval '{AUDIT_FLOOR_DAYS} days' THEN "
        f"RAISE EXCEPTION 'audit row % is younger than {AUDIT_FLOOR_DAYS} days: it is kept', OLD.id "
        f"USING ERRCODE = 'insufficient_privilege'; END IF; RETURN OLD; END"
    )
    return [
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS {}"
        ).format(function, sql.Literal(body)),
        sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(AUDIT_GUARD), table),
        sql.SQL("CREATE TRIGGER {} BEFORE DELETE ON {} FOR EACH ROW EXECUTE FUNCTION {}()").format(
            sql.Identifier(AUDIT_GUARD), table, function
        ),
    ]


def privilege_table() -> str:
    """ROLE_PRIVILEGES as a Markdown table (role × table), for the deployment README."""
    tables = [t.name for t in schema.load_schemata().tables]
    tables += sorted({t for grants in ROLE_PRIVILEGES.values() for t in grants} - set(tables))
    header = ["role", "commands", *(f"`{t}`" for t in tables)]
    rows = [header, ["---"] * len(header)]
    for kind, grants in ROLE_PRIVILEGES.items():
        rows.append([kind, ROLE_COMMANDS[kind], *(", ".join(grants.get(t, ())) or "-" for t in tables)])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)
