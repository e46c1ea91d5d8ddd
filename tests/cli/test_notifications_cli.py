"""The notification outbox on the command line: `notifications` lists it, `runs` and `explain` show
what each run notified, every value masked and escaped; `--notifiers-dir` defaults beside the tasks."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from reconciler.cli.parser import parse
from reconciler.db.grants import grants_sql
from tests.builders import cli

TASK = '[trigger]\nkind = "cron"\nexpr = "*/5 * * * *"\n[target]\nurl = "http://127.0.0.1:9/x"\n'
HOSTILE_ERROR = "refused\r\nX-Evil: 1 \x1b[31mred\x1b[0m token=NOTESECRET https://u:NOTEPW@hooks.example/x"
HOSTILE_NOTIFIER = "evil\x1b]0;title\x07"


def insert(dsn: str, table: str, **values: object) -> int:
    """A row written straight into scheduler.TABLE, as an engine (or a hand edit) would; its id."""
    statement = sql.SQL("INSERT INTO scheduler.{} ({}) VALUES ({}) RETURNING id").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, values)),
        sql.SQL(", ").join(sql.Placeholder() * len(values)),
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(statement, list(values.values())).fetchone()
    assert row is not None
    return int(row[0])


def notification(dsn: str, task_id: str, event: str, notifier: str, **values: object) -> int:
    return insert(
        dsn, "notifications", source="default", task_id=task_id, event=event, notifier=notifier,
        payload=Jsonb({"event": event}), **values,
    )  # fmt: skip


@pytest.fixture
def tasks(dsn: str, tmp_path: Path) -> Path:
    """Tasks a and b applied to the test database."""
    folder = tmp_path / "tasks.d"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"{name}.toml").write_text(TASK)
    assert cli(dsn, folder, "apply")[0] == 0
    return folder


@pytest.fixture
def runs(dsn: str, tasks: Path) -> tuple[int, int]:
    """a's 12:05 run failed and notified oncall (delivered) and pager (given up); its 12:10 run recovered
    and oncall's notification of it is being retried; b's 12:05 occurrence is late (no run)."""
    failed = insert(
        dsn, "runs", task_id="a", scheduled_for="2026-12-02 12:05:00+00", kind="scheduled", status="failed",
        attempt=1, http_status=500, error="HTTP 500",
    )  # fmt: skip
    recovered = insert(
        dsn, "runs", task_id="a", scheduled_for="2026-12-02 12:10:00+00", kind="scheduled", status="succeeded",
        attempt=1, http_status=200,
    )  # fmt: skip
    notification(dsn, "a", "failure", "oncall", run_id=failed, status="delivered", attempts=1, http_status=200,
                 created_at="2026-12-02 12:05:01+00", delivered_at="2026-12-02 12:05:02+00")  # fmt: skip
    notification(dsn, "a", "failure", "pager", run_id=failed, status="failed", attempts=5, http_status=503,
                 error="service unavailable", created_at="2026-12-02 12:05:01+00")  # fmt: skip
    notification(dsn, "a", "recovery", "oncall", run_id=recovered, attempts=2, http_status=500,
                 created_at="2026-12-02 12:10:01+00", next_attempt_at="2026-12-02 12:10:05+00")  # fmt: skip
    notification(
        dsn, "b", "late", "oncall", scheduled_for="2026-12-02 12:05:00+00", created_at="2026-12-02 12:06:30+00",
        next_attempt_at="2026-12-02 12:06:30+00",
    )  # fmt: skip
    return failed, recovered


def cells(out: str) -> list[list[str]]:
    """A table's rows (header first) as cells: columns are two or more spaces apart."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()]


# ---------------------------------------------------------------- reconciler notifications


def test_notifications_lists_the_outbox_newest_first(runs: tuple[int, int], dsn: str, tasks: Path) -> None:
    failed, recovered = runs
    code, out, _ = cli(dsn, tasks, "notifications")
    assert code == 0
    header, *rows = cells(out)
    assert header == [
        "ID", "CREATED (UTC)", "TASK", "EVENT", "NOTIFIER", "OCCURRENCE (UTC)", "RUN", "STATUS", "TRY",
        "NEXT TRY (UTC)", "HTTP", "ERROR",
    ]  # fmt: skip
    late, pending = "2026-12-02 12:06:30 UTC", "2026-12-02 12:10:05 UTC"
    assert [row[1:] for row in rows] == [
        [late, "b", "late", "oncall", "2026-12-02 12:05:00 UTC", "-", "pending", "0", late, "-"],
        ["2026-12-02 12:10:01 UTC", "a", "recovery", "oncall", "-", str(recovered), "pending", "2", pending, "500"],
        ["2026-12-02 12:05:01 UTC", "a", "failure", "pager", "-", str(failed), "failed", "5", "-", "503",
         "service unavailable"],
        ["2026-12-02 12:05:01 UTC", "a", "failure", "oncall", "-", str(failed), "delivered", "1", "-", "200"],
    ]  # fmt: skip
    ids = [int(row[0]) for row in rows]
    assert ids == sorted(ids, reverse=True)


def test_notifications_filters_by_status_task_and_limit(runs: tuple[int, int], dsn: str, tasks: Path) -> None:
    def listed(*args: str) -> list[tuple[str, str, str]]:
        code, out, err = cli(dsn, tasks, "notifications", *args)
        assert code == 0, err
        return [(row[2], row[3], row[4]) for row in cells(out)[1:]]

    assert listed("--status", "failed") == [("a", "failure", "pager")]
    assert listed("--status", "pending", "--task", "a") == [("a", "recovery", "oncall")]
    assert listed("--task", "b") == [("b", "late", "oncall")]
    assert listed("--limit", "2") == [("b", "late", "oncall"), ("a", "recovery", "oncall")]


def test_an_empty_outbox_says_so_in_one_line(dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "tasks.d"
    folder.mkdir()
    (folder / "a.toml").write_text(TASK)
    assert cli(dsn, folder, "notifications") == (0, "no notifications recorded yet\n", "")  # no schema yet
    assert cli(dsn, folder, "apply")[0] == 0
    code, out, _ = cli(dsn, folder, "notifications", "--status", "failed", "--task", "a")
    assert (code, out) == (0, "no failed notifications of a recorded yet\n")
    code, out, _ = cli(dsn, folder, "notifications", "--format", "json")
    assert (code, json.loads(out)) == (0, [])


def test_notifications_of_an_unknown_task_is_an_error(runs: tuple[int, int], dsn: str, tasks: Path) -> None:
    code, out, err = cli(dsn, tasks, "notifications", "--task", "nope")
    assert (code, out) == (1, "")
    assert err == (
        "error: unknown task 'nope': no such task and no notifications recorded; see `reconciler status` for the ids\n"
    )
    notification(dsn, "gone", "failure", "oncall", status="failed", attempts=5)  # a task deleted since
    code, out, _ = cli(dsn, tasks, "notifications", "--task", "gone")
    assert code == 0 and cells(out)[1][2:5] == ["gone", "failure", "oncall"]


def test_notifications_json_has_iso_times_and_no_payload(runs: tuple[int, int], dsn: str, tasks: Path) -> None:
    failed, _ = runs
    code, out, _ = cli(dsn, tasks, "notifications", "--status", "failed", "--format", "json")
    assert code == 0
    [row] = json.loads(out)
    assert {k: row[k] for k in ("task_id", "event", "notifier", "run_id", "status", "attempts", "http_status")} == {
        "task_id": "a",
        "event": "failure",
        "notifier": "pager",
        "run_id": failed,
        "status": "failed",
        "attempts": 5,
        "http_status": 503,
    }
    assert row["error"] == "service unavailable" and row["created_at"] == "2026-12-02T12:05:01+00:00"
    assert row["delivered_at"] is None and "payload" not in row


# ---------------------------------------------------------------- runs and explain


def test_runs_show_what_each_run_notified(runs: tuple[int, int], dsn: str, tasks: Path) -> None:
    failed, recovered = runs
    code, out, _ = cli(dsn, tasks, "runs")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].lstrip().startswith(f"{recovered}  a")
    assert lines[2] == "    notified oncall: pending (attempt 2, HTTP 500)"
    assert lines[3].lstrip().startswith(f"{failed}  a")
    assert lines[4] == "    notified oncall: delivered"
    assert lines[5] == "    notified pager: failed (attempt 5, HTTP 503: service unavailable)"
    assert len(lines) == 6

    code, out, _ = cli(dsn, tasks, "runs", "--verbose")
    assert code == 0
    lines = out.splitlines()
    assert lines[2].startswith("    claimed ") and lines[3] == "    response: (none stored)"  # its details first
    assert lines[4] == "    notified oncall: pending (attempt 2, HTTP 500)"
    assert lines[5].lstrip().startswith(f"{failed}  a")

    code, out, _ = cli(dsn, tasks, "runs", "--format", "json")
    assert code == 0
    shown = {run["id"]: run["notifications"] for run in json.loads(out)}
    assert [(n["notifier"], n["event"], n["status"]) for n in shown[failed]] == [
        ("oncall", "failure", "delivered"),
        ("pager", "failure", "failed"),
    ]
    assert shown[failed][0]["delivered_at"] == "2026-12-02T12:05:02+00:00"
    assert [(n["notifier"], n["attempts"], n["http_status"]) for n in shown[recovered]] == [("oncall", 2, 500)]


def test_explain_shows_what_each_run_notified(runs: tuple[int, int], dsn: str, tasks: Path) -> None:
    code, out, err = cli(dsn, tasks, "explain", "a", "--at", "2026-12-02T12:10:00Z")
    assert code == 0, err
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  2026-12-02 12:05:00 UTC  → failed"))
    assert lines[at + 1 : at + 3] == [
        "      notified oncall: delivered",
        "      notified pager: failed (attempt 5, HTTP 503: service unavailable)",
    ]
    assert lines[at + 3].startswith("  2026-12-02 12:10:00 UTC  → succeeded")
    assert lines[at + 4] == "      notified oncall: pending (attempt 2, HTTP 500)"


def test_hostile_notification_values_are_escaped_and_masked(runs: tuple[int, int], dsn: str, tasks: Path) -> None:
    failed, _ = runs
    notification(dsn, "a", "failure", HOSTILE_NOTIFIER, run_id=failed, status="failed", attempts=5, error=HOSTILE_ERROR)
    escaped = "refused\\r\\nX-Evil: 1 \\x1b[31mred\\x1b[0m token=*** https://***@hooks.example/x"
    outputs = {}
    for command in (
        ["notifications"],
        ["notifications", "--format", "json"],
        ["runs"],
        ["runs", "--verbose"],
        ["runs", "--format", "json"],
        ["explain", "a", "--at", "2026-12-02T12:10:00Z"],
    ):
        code, out, err = cli(dsn, tasks, *command)
        assert code == 0, (command, err)
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", out), (command, out)  # no ESC, BEL or CR reaches a terminal
        assert "NOTESECRET" not in out and "NOTEPW" not in out, (command, out)
        outputs[" ".join(command)] = out
    assert outputs["notifications"].splitlines()[1].endswith(escaped)
    assert "evil\\x1b]0;title\\x07" in outputs["notifications"]
    notified = f"notified evil\\x1b]0;title\\x07: failed (attempt 5: {escaped})"
    assert f"    {notified}" in outputs["runs"].splitlines()
    assert f"      {notified}" in outputs["explain a --at 2026-12-02T12:10:00Z"].splitlines()
    masked = HOSTILE_ERROR.replace("NOTESECRET", "***").replace("u:NOTEPW", "***")
    assert json.loads(outputs["notifications --format json"])[0]["error"] == masked
    [run] = [r for r in json.loads(outputs["runs --format json"]) if r["id"] == failed]
    assert run["notifications"][-1]["error"] == masked


# ---------------------------------------------------------------- an outbox this role may not read


@pytest.fixture
def older_reader(dsn: str, tasks: Path) -> Iterator[str]:
    """A LOGIN role with the planner's grants of a version before notifications (no SELECT on the outbox)."""
    role = f"{psycopg.conninfo.conninfo_to_dict(dsn)['dbname']}_older"
    password = secrets.token_hex(8)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
        conn.execute(grants_sql(role, None, None).encode())
        conn.execute(sql.SQL("REVOKE SELECT ON scheduler.notifications FROM {}").format(sql.Identifier(role)))
    try:
        yield psycopg.conninfo.make_conninfo(dsn, user=role, password=password)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_runs_and_explain_work_without_the_outbox(runs: tuple[int, int], older_reader: str, tasks: Path) -> None:
    for command in (["runs"], ["runs", "--format", "json"], ["explain", "a", "--at", "2026-12-02T12:10:00Z"]):
        code, out, err = cli(older_reader, tasks, *command)
        assert code == 0, (command, err)
        assert "notified" not in out and "pager" not in out, (command, out)
    code, out, err = cli(older_reader, tasks, "notifications")
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "needs SELECT on scheduler.notifications" in err and "reconciler db grants" in err


# ---------------------------------------------------------------- --notifiers-dir


def test_notifiers_dir_defaults_beside_the_tasks_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    billing = tmp_path / "tasks.d" / "billing"
    billing.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert parse(["status"]).notifiers_dir == "notifiers.d"
    assert parse(["--tasks-dir", "x/tasks.d", "status"]).notifiers_dir == "x/notifiers.d"
    assert parse(["status", "--notifiers-dir", "elsewhere"]).notifiers_dir == "elsewhere"
    monkeypatch.chdir(billing)  # the tasks directory is found above; its neighbour too
    assert parse(["status"]).notifiers_dir == "../../notifiers.d"
    monkeypatch.chdir(tmp_path / "tasks.d")
    assert parse(["--tasks-dir", ".", "status"]).notifiers_dir == "../notifiers.d"  # beside it, not inside
