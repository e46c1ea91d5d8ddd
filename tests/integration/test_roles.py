"""Least privilege on a real server: each role runs its commands with exactly `grants_sql`'s grants.

Roles are cluster-wide: each test's roles carry its database's name and are dropped at teardown.
They get a password too, so the tests also pass on a server that does not trust local users.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from reconciler.clock import utcnow
from reconciler.db.grants import grants_sql
from reconciler.db.initialize import Initialized, maintain
from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.notify.events import late_scan
from reconciler.targets.http import Firer
from tests.builders import cli, cron
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, runs, setup


class Roles:
    """LOGIN roles for one test database, dropped (with their grants) at teardown."""

    def __init__(self, owner_dsn: str) -> None:
        self.owner_dsn = owner_dsn
        self.dbname = psycopg.conninfo.conninfo_to_dict(owner_dsn)["dbname"]
        self.made: list[str] = []

    def create(self, name: str) -> str:
        """A new role `<database>_<name>` without any privilege; returns its DSN."""
        role, password = f"{self.dbname}_{name}", secrets.token_hex(8)
        with psycopg.connect(self.owner_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password))
            )
        self.made.append(role)
        params = psycopg.conninfo.conninfo_to_dict(self.owner_dsn)
        params.update(user=role, password=password)
        return psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})

    def grant(
        self,
        planner: str | None = None,
        applier: str | None = None,
        engine: str | None = None,
        dashboard: str | None = None,
    ) -> None:
        """Run grants_sql as the owner, for roles named by their DSNs."""

        def user(role_dsn: str | None) -> str | None:
            return None if role_dsn is None else str(psycopg.conninfo.conninfo_to_dict(role_dsn)["user"])

        with psycopg.connect(self.owner_dsn, autocommit=True) as conn:
            conn.execute(grants_sql(user(planner), user(applier), user(engine), user(dashboard)).encode())

    def drop(self) -> None:
        with psycopg.connect(self.owner_dsn, autocommit=True) as conn:
            for role in self.made:
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def roles(dsn: str) -> Iterator[Roles]:
    made = Roles(dsn)
    try:
        yield made
    finally:
        made.drop()


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks.d"
    folder.mkdir()
    (folder / "ping.toml").write_text(cron("http://127.0.0.1:9/ping"))
    return folder


@pytest.fixture
def initialized(dsn: str, tasks: Path) -> str:
    """This test's database after `reconciler db init` as its owner."""
    assert cli(dsn, tasks, "db", "init")[0] == 0
    return dsn


def reads_everything(role_dsn: str, tasks: Path) -> None:
    """Every read-only command that touches the database succeeds as this role."""
    export = str(tasks.parent / "exported")
    for command in (["plan"], ["status"], ["runs"], ["explain", "ping"], ["export", "--out-dir", export], ["audit"]):
        code, _, err = cli(role_dsn, tasks, *command)
        assert code == 0, (command, err)


def test_planner_reads_everything_but_may_not_apply(initialized: str, roles: Roles, tasks: Path) -> None:
    planner = roles.create('plan "ro"; --')  # quoting is part of the contract: role names are user input
    roles.grant(planner=planner)
    assert cli(initialized, tasks, "apply")[0] == 0  # the owner applies; the planner reads it back
    reads_everything(planner, tasks)
    (tasks / "pong.toml").write_text(cron("http://127.0.0.1:9/pong"))
    code, _, err = cli(planner, tasks, "apply")
    assert code == 1
    line = one_error_line(err)
    assert "permission denied for table tasks" in line and "needs INSERT on scheduler.tasks" in line
    assert "reconciler db grants" in line
    code, _, err = cli(planner, tasks, "trigger", "ping")
    assert code == 1 and "needs INSERT on scheduler.runs" in one_error_line(err)
    code, _, err = cli(planner, tasks, "pause", "ping", "--reason", "x")
    assert code == 1 and "permission denied for table" in one_error_line(err)


def test_a_planner_granted_before_pauses_existed_still_plans_and_reads(
    initialized: str, roles: Roles, tasks: Path
) -> None:
    planner = roles.create("old_planner")
    roles.grant(planner=planner)
    with psycopg.connect(initialized, autocommit=True) as conn:
        conn.execute(sql.SQL("REVOKE SELECT ON scheduler.pauses FROM {}").format(sql.Identifier(user_of(planner))))
    assert cli(initialized, tasks, "apply")[0] == 0
    assert cli(initialized, tasks, "pause", "ping", "--reason", "x")[0] == 0
    for command in (["plan"], ["status"], ["explain", "ping"]):
        code, out, err = cli(planner, tasks, *command)
        assert code == 0 and "paused" not in out, (command, err)  # it cannot see the pause, and says nothing of it


def user_of(role_dsn: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(role_dsn)["user"])


def test_applier_applies_moves_and_triggers(initialized: str, roles: Roles, tasks: Path) -> None:
    applier = roles.create("applier")
    roles.grant(applier=applier)
    code, out, err = cli(applier, tasks, "apply")
    assert code == 0 and "Apply complete: 1 change(s) written." in out, err
    code, out, err = cli(applier, tasks, "trigger", "ping")
    assert code == 0, err
    assert cli(applier, tasks, "cancel", out.split()[3], "--reason", "by mistake")[0] == 0
    for command in (
        ["pause", "ping", "--reason", "incident"],
        ["resume", "ping"],
        ["pause", "ping", "--reason", "again"],
    ):
        code, _, err = cli(applier, tasks, *command)
        assert code == 0, (command, err)
    reads_everything(applier, tasks)  # an applier can do what a planner does
    (tasks / "ping.toml").rename(tasks / "pong.toml")
    (tasks / "pong.toml").write_text('moved_from = "ping"\n' + (tasks / "pong.toml").read_text())
    code, out, err = cli(applier, tasks, "apply")  # a move carries runs and leases over
    assert code == 0 and "> move" in out, err
    (tasks / "pong.toml").unlink()
    code, out, err = cli(applier, tasks, "apply", "--allow-empty")
    assert code == 0 and "- delete pong" in out, err
    assert cli(applier, tasks, "plan", "--detailed-exitcode")[0] == 0
    code, out, _ = cli(applier, tasks, "audit")
    actions = [line.split()[5] for line in out.splitlines()]
    assert actions == ["apply", "apply", "pause", "resume", "pause", "cancel", "trigger", "apply"], out


def test_applier_backfills_and_cancels_the_planner_only_looks(initialized: str, roles: Roles, tasks: Path) -> None:
    planner, applier = roles.create("bf_planner"), roles.create("bf_applier")
    roles.grant(planner=planner, applier=applier)
    assert cli(applier, tasks, "apply")[0] == 0
    span = ["ping", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T01:00:00Z"]
    code, out, err = cli(planner, tasks, "backfill", *span, "--dry-run")
    assert code == 0 and "12 to queue" in out, err
    code, _, err = cli(planner, tasks, "backfill", *span)
    assert code == 1 and "permission denied" in one_error_line(err)
    code, out, err = cli(applier, tasks, "backfill", *span, "--format", "json")
    assert code == 0, err
    backfill_id = json.loads(out)["backfill_id"]
    code, out, err = cli(planner, tasks, "backfill", "--list")
    assert code == 0 and "queued" in out, err
    code, out, err = cli(applier, tasks, "backfill", "--cancel", str(backfill_id))
    assert code == 0 and "12 queued run(s) dropped" in out, err


async def test_engine_fires_but_may_not_rewrite_a_task(
    initialized: str, roles: Roles, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    applier, engine_dsn = roles.create("applier"), roles.create("engine")
    roles.grant(applier=applier, engine=engine_dsn)
    folder = tmp_path / "engine-tasks"
    async with Store(applier) as store:  # room for the scheduled and the manual run side by side
        await setup(store, folder, {"a": cron(f"{url}/a", policy="max_running_instances = 2"), "p": cron(f"{url}/p")})
    code, _, err = await asyncio.to_thread(cli, applier, folder, "trigger", "a")
    assert code == 0, err
    code, _, err = await asyncio.to_thread(cli, applier, folder, "pause", "p", "--reason", "held")
    assert code == 0, err
    firer = Firer(concurrency=4)
    try:
        async with Store(engine_dsn) as store:
            await store.init_schema()  # what every command does first: a no-op that needs no CREATE
            engine = Engine(store, EngineConfig("least-privilege", keep_runs_days=1), firer)
            await engine.heartbeat()
            report = await engine.run_once(NOW + timedelta(minutes=5, seconds=3))
            assert (report.fired, report.succeeded, report.skipped) == (2, 2, 1), runs(initialized)
            assert await late_scan(store, NOW + timedelta(hours=1)) == 0  # it reads pauses there too
            # it reads when the next run is due: 12:10, ten seconds after 12:09:50
            assert await engine.sleep_seconds(NOW + timedelta(minutes=9, seconds=50)) == 10.0
            # retention of whole days of history needs the tables' owner: this engine may not, and says so
            assert not (await engine.maintain_partitions(utcnow() + timedelta(days=2))).maintained
            assert len(runs(initialized)) == 3
            async with store.connection() as conn:
                await Store.execute(conn, "engine_gone", {"engine_id": "least-privilege"})
    finally:
        await firer.close()
    assert sorted(r.path for r in rec.paths()) == ["/a", "/a"]  # nothing for the paused task
    async with Store(initialized) as owner:  # `reconciler db maintain` as the owner: results carry the wall-clock time
        done = Initialized()
        await maintain(owner, utcnow() + timedelta(days=2), 1, done)
    assert done.maintained and done.maintenance.dropped
    assert runs(initialized) == []  # retired: all three finished more than --keep-runs-days ago
    with psycopg.connect(engine_dsn, autocommit=True) as conn:
        for change in ("spec = '{}'", "enabled = false", "source = 'other'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"UPDATE scheduler.tasks SET {change}")
        # nor resume (or pause) a task, nor rewrite the audit log
        for statement in (
            "DELETE FROM scheduler.tasks",
            "DELETE FROM scheduler.pauses",
            "INSERT INTO scheduler.pauses (task_id, paused_by, reason) VALUES ('a', 'x', 'y')",
            "UPDATE scheduler.pauses SET paused_until = now()",
            "UPDATE scheduler.audit SET actor = 'someone else'",
            "INSERT INTO scheduler.audit (actor, action) VALUES ('x', 'pause')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


async def test_a_leaked_engine_credential_cannot_erase_recent_audit_rows(
    initialized: str, roles: Roles, tasks: Path
) -> None:
    applier, engine_dsn = roles.create("applier"), roles.create("engine")
    roles.grant(applier=applier, engine=engine_dsn)
    assert (await asyncio.to_thread(cli, applier, tasks, "apply"))[0] == 0  # the audit log's fresh row
    with psycopg.connect(initialized, autocommit=True) as conn:  # the owner writes older ones, by age in days
        for days in (40, 8, 6):
            conn.execute(
                "INSERT INTO scheduler.audit (at, actor, action, source) "
                "VALUES (now() - make_interval(days => %s), %s, 'pause', 'default')",
                (days, f"{days} days ago"),
            )

    def actors() -> list[str]:
        with psycopg.connect(initialized) as conn:
            return sorted(str(row[0]) for row in conn.execute("SELECT actor FROM scheduler.audit"))

    everything = actors()
    with psycopg.connect(engine_dsn, autocommit=True) as conn:
        for statement in (
            "DELETE FROM scheduler.audit WHERE at > now() - interval '1 hour'",
            "DELETE FROM scheduler.audit WHERE at > now() - interval '7 days'",
            "DELETE FROM scheduler.audit",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="younger than 7 days"):
                conn.execute(statement)
    assert actors() == everything  # refused whole: not a row gone
    # Retention as the engine role: what is past --keep-runs-days (1) and a week old goes, without an error.
    firer = Firer(concurrency=1)
    try:
        async with Store(engine_dsn) as store:
            engine = Engine(store, EngineConfig("least-privilege", keep_runs_days=1), firer)
            await engine.prune_runs(utcnow())
    finally:
        await firer.close()
    assert actors() == sorted(name for name in everything if name not in ("40 days ago", "8 days ago"))


def test_db_init_without_create_is_one_line_and_plan_still_plans(dsn: str, roles: Roles, tasks: Path) -> None:
    nobody = roles.create("nobody")
    for command in (["db", "init"], ["apply"]):
        code, _, err = cli(nobody, tasks, *command)
        assert code == 1
        line = one_error_line(err)
        assert "schema scheduler does not exist" in line and "may not create it" in line, line
        assert "run `reconciler db init` as the owner" in line
    code, out, err = cli(nobody, tasks, "plan")  # read-only: it never creates the schema
    assert code == 0 and "1 to create" in out and "no scheduler schema yet: apply will create it" in out, err
    assert schema_objects(dsn) == -1


def schema_objects(dsn: str) -> int:
    """Relations in schema scheduler, or -1 when the schema does not exist."""
    with psycopg.connect(dsn) as conn:
        if not conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'scheduler'").fetchall():
            return -1
        query = (
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE nspname = 'scheduler'"
        )
        row = conn.execute(query).fetchone()
        return int(row[0]) if row else 0


def test_plan_with_connect_and_select_only_writes_nothing(initialized: str, roles: Roles, tasks: Path) -> None:
    reader = roles.create("reader")
    with psycopg.connect(initialized, autocommit=True) as conn:  # no more than CONNECT, USAGE and SELECT
        role = sql.Identifier(str(psycopg.conninfo.conninfo_to_dict(reader)["user"]))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA scheduler TO {}").format(role))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA scheduler TO {}").format(role))
    before = schema_objects(initialized)
    assert cli(initialized, tasks, "apply")[0] == 0
    (tasks / "pong.toml").write_text(cron("http://127.0.0.1:9/pong"))
    code, out, err = cli(reader, tasks, "plan", "--detailed-exitcode")
    assert code == 2 and "+ create pong" in out, err
    with psycopg.connect(initialized) as conn:
        assert conn.execute("SELECT count(*) FROM scheduler.applies").fetchone() == (1,)  # the owner's apply only
    assert schema_objects(initialized) == before


def test_ungranted_role_on_initialized_database_is_told_what_to_grant(
    initialized: str, roles: Roles, tasks: Path
) -> None:
    nobody = roles.create("nobody")
    code, _, err = cli(nobody, tasks, "plan")
    assert code == 1
    line = one_error_line(err)
    assert "needs USAGE on schema scheduler" in line and "reconciler db grants" in line


def test_outdated_schema_names_the_owner_as_the_fix(initialized: str, roles: Roles, tasks: Path) -> None:
    planner = roles.create("planner")
    roles.grant(planner=planner)
    with psycopg.connect(initialized, autocommit=True) as conn:  # as if a newer release added this column
        conn.execute("ALTER TABLE scheduler.runs DROP COLUMN response_excerpt")
        conn.execute("COMMENT ON SCHEMA scheduler IS NULL")  # initialized from another declaration
    code, _, err = cli(planner, tasks, "status")  # plan never upgrades: it reads what is there
    assert code == 1
    line = one_error_line(err)
    assert "schema scheduler is out of date" in line and "may not upgrade it" in line
