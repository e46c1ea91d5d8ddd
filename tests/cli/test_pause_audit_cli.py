"""`pause`, `resume` and `audit` on the command line: their decisions at the edges (already paused, not
paused, unknown ids, a source, a manual run of a paused task, `--until`), one-line errors for hostile text,
and an audit log that names every action with its actor and reason (--actor, GITHUB_ACTOR)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from tests.builders import clean_env, cli, cron, run_reconciler, write_tasks


@pytest.fixture
def tasks(dsn: str, tmp_path: Path) -> Path:
    """Three applied tasks: billing/invoices and billing/reminders of source `billing`, ops/ping of `default`."""
    billing = write_tasks(tmp_path / "billing" / "tasks.d", {"billing/invoices": cron(), "billing/reminders": cron()})
    assert cli(dsn, billing, "--source", "billing", "apply")[0] == 0
    folder = write_tasks(tmp_path / "tasks.d", {"ops/ping": cron()})
    assert cli(dsn, folder, "--actor", "ci-bot", "apply", "--reason", "first deploy")[0] == 0
    return folder


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def paused(dsn: str) -> dict[str, tuple[str, str, object]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT task_id, paused_by, reason, paused_until FROM scheduler.pauses ORDER BY 1")
        return {r[0]: (r[1], r[2], r[3]) for r in rows}


def audit(dsn: str, tasks: Path, *args: str) -> list[dict[str, object]]:
    code, out, err = cli(dsn, tasks, "audit", "--format", "json", *args)
    assert code == 0, err
    rows: list[dict[str, object]] = json.loads(out)
    return rows


def test_pause_again_updates_who_why_and_until_and_is_audited(dsn: str, tasks: Path) -> None:
    code, out, err = cli(dsn, tasks, "--actor", "alice", "pause", "ops/ping", "--reason", "db migration")
    assert code == 0, err
    assert "paused ops/ping\n" in out and "1 task(s) paused by alice until `reconciler resume`: db migration" in out
    code, out, err = cli(
        dsn, tasks, "--actor", "bob", "pause", "ops/ping", "--reason", "still migrating", "--until", "2999-01-01"
    )
    assert code == 0, err
    assert "paused ops/ping (was paused by alice: db migration)" in out and "until 2999-01-01 00:00:00 UTC" in out
    assert paused(dsn)["ops/ping"][:2] == ("bob", "still migrating")
    [second, first, _apply] = audit(dsn, tasks, "ops/ping")
    assert (first["action"], first["actor"], first["reason"]) == ("pause", "alice", "db migration")
    assert (second["actor"], second["reason"]) == ("bob", "still migrating")
    assert second["details"] == {"until": "2999-01-01T00:00:00+00:00", "selected": None, "already_paused": ["ops/ping"]}


def test_resume_of_a_task_not_paused_is_an_error_as_in_kubectl(dsn: str, tasks: Path) -> None:
    code, out, err = cli(dsn, tasks, "resume", "ops/ping")
    assert code == 1 and out == ""
    assert one_error(err) == "error: ops/ping is not paused; nothing to resume (`reconciler status` shows pauses)"
    assert len(audit(dsn, tasks)) == 2  # the two applies: a resume that did nothing wrote nothing
    # one paused, one not: the paused one is resumed, the other named, exit 1
    assert cli(dsn, tasks, "pause", "billing/invoices", "--reason", "x")[0] == 0
    code, out, err = cli(dsn, tasks, "resume", "billing/invoices", "billing/reminders")
    assert code == 1
    assert "resumed billing/invoices (paused by " in out and "next run " in out
    assert err.strip() == "error: billing/reminders is not paused"
    assert paused(dsn) == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pause", "nope", "--reason", "x"], "error: unknown task(s) 'nope'; see `reconciler status` for the ids"),
        (["pause", "ops/ping", "nope", "--reason", "x"], "error: unknown task(s) 'nope'"),
        (["resume", "nope"], "error: unknown task(s) 'nope'"),
        (["pause", "ops/ping"], "error: pause: --reason is required"),
        (["pause", "--reason", "x"], "error: name the tasks: give task IDs, or --source S"),
        (["--source", "nobody", "pause", "--reason", "x"], "error: source 'nobody' has no tasks"),
        (
            ["--source", "billing", "pause", "ops/ping", "--reason", "x"],
            "error: task 'ops/ping' is of source 'default'",
        ),
        (
            ["pause", "ops/ping", "--reason", "x", "--until", "2020-01-01"],
            "error: --until 2020-01-01T00:00:00+00:00 is not",
        ),
        (["pause", "ops/ping", "--reason", "x", "--until", "soon"], "error: --until: 'soon' is not an ISO date-time"),
        (["pause", "ops/ping", "--reason", "x\0y"], "error: --reason: control character \\x00 at position 1"),
        (["pause", "ops/ping", "--reason", "line\nbreak"], "error: --reason: control character \\n at position 4"),
        (["pause", "ops/ping", "--reason", "x" * 10_000], "error: --reason: 10000 characters, more than 500"),
        (["pause", "ops/ping", "--reason", "   "], "error: --reason: empty"),
        (["--actor", "\x1b[2J", "pause", "ops/ping", "--reason", "x"], "error: --actor: control character \\x1b"),
        (["--actor", "a" * 600, "trigger", "ops/ping"], "error: --actor: 600 characters"),
        (["trigger", "ops/ping", "--reason", "\u202eevil"], "error: --reason: control character \\u202e"),
        (["cancel", "1", "--reason", "a\rb"], "error: --reason: control character \\r"),
        (["apply", "--reason", "a\x85b"], "error: --reason: control character \\x85"),
        (["audit", "nope"], "error: unknown task 'nope': no such task and no action on it recorded"),
    ],
)
def test_operator_mistakes_are_one_line_and_change_nothing(
    dsn: str, tasks: Path, args: list[str], message: str
) -> None:
    code, out, err = cli(dsn, tasks, *args)
    assert code == 1, (out, err)
    assert one_error(err).startswith(message), err
    assert "\0" not in err and "\x1b" not in err and "\u202e" not in err
    assert paused(dsn) == {} and len(audit(dsn, tasks)) == 2


def test_pause_a_source_and_resume_it(dsn: str, tasks: Path) -> None:
    code, out, err = cli(dsn, tasks, "--source", "billing", "--actor", "alice", "pause", "--reason", "quarter close")
    assert code == 0, err
    assert set(paused(dsn)) == {"billing/invoices", "billing/reminders"}
    [row] = audit(dsn, tasks, "billing/reminders")[:1]
    assert row["source"] == "billing" and row["task_ids"] == ["billing/invoices", "billing/reminders"]
    assert row["details"]["selected"] == "source 'billing'"  # type: ignore[index]
    code, out, err = cli(dsn, tasks, "--source", "billing", "resume", "--reason", "closed")
    assert code == 0 and "2 task(s) resumed from now" in out, err
    code, out, err = cli(dsn, tasks, "--source", "billing", "resume")
    assert code == 1 and one_error(err).startswith("error: no task of source 'billing' is paused")


def test_a_paused_task_shows_in_status_and_explain_and_may_still_be_triggered(dsn: str, tasks: Path) -> None:
    assert cli(dsn, tasks, "--actor", "alice", "pause", "ops/ping", "--reason", "flaky target")[0] == 0
    code, out, _ = cli(dsn, tasks, "status")
    assert code == 0
    [row] = [line for line in out.splitlines() if line.startswith("ops/ping ")]
    assert row.rstrip().endswith("PAUSED")
    assert "‖ paused ops/ping by alice since " in out and "until resumed: flaky target" in out
    code, out, _ = cli(dsn, tasks, "status", "--format", "json")
    [task] = [t for t in json.loads(out)["tasks"] if t["id"] == "ops/ping"]
    assert task["paused"]["paused_by"] == "alice" and task["paused"]["paused_until"] is None
    assert all(t["paused"] is None for t in json.loads(out)["tasks"] if t["id"] != "ops/ping")
    code, out, _ = cli(dsn, tasks, "explain", "ops/ping")
    assert code == 0 and "  paused: by alice since " in out and "`reconciler resume ops/ping` ends it" in out
    code, out, err = cli(dsn, tasks, "--actor", "bob", "trigger", "ops/ping", "--reason", "check by hand")
    assert code == 0, err
    assert "note: ops/ping is paused (alice: flaky target); a manual run runs anyway" in out
    run_id = out.split()[3]
    code, out, err = cli(dsn, tasks, "--actor", "carol", "cancel", run_id, "--reason", "not needed")
    assert code == 0, err
    code, out, _ = cli(dsn, tasks, "runs", "ops/ping")
    assert "cancelled by carol with `reconciler cancel` before it started: not needed" in out
    actions = [(r["action"], r["actor"], r["reason"]) for r in audit(dsn, tasks, "ops/ping")]
    assert actions == [
        ("cancel", "carol", "not needed"),
        ("trigger", "bob", "check by hand"),
        ("pause", "alice", "flaky target"),
        ("apply", "ci-bot", "first deploy"),
    ]


def test_the_actor_comes_from_github_actor_else_user_at_host_and_audit_lists_it(dsn: str, tasks: Path) -> None:
    base = ["--tasks-dir", str(tasks)]
    env = clean_env(dsn, GITHUB_ACTOR="octocat")
    run_reconciler(*base, "pause", "ops/ping", "--reason", "from CI", env=env, ok=True)
    run_reconciler(*base, "--actor", "alice", "resume", "ops/ping", env=env, ok=True)  # --actor wins
    without = {k: v for k, v in clean_env(dsn).items() if k != "GITHUB_ACTOR"}
    run_reconciler(*base, "trigger", "ops/ping", env=without, ok=True)
    done = run_reconciler(*base, "audit", env=without, ok=True)
    lines = done.stdout.splitlines()
    assert " trigger [default] ops/ping (run id " in lines[0] and "@" in lines[0].split()[4]
    assert " alice resume [default] ops/ping" in lines[1]
    assert " octocat pause [default] ops/ping: from CI" in lines[2]
    assert " ci-bot apply [default] ops/ping: first deploy (1 create)" in lines[3]
    assert len(lines) == 5  # and billing's apply
    limited = run_reconciler(*base, "audit", "--limit", "1", env=without, ok=True).stdout
    assert limited.splitlines() == lines[:1]
