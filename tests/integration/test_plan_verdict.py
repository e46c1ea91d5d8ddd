"""The plan on the pull request is the merge's verdict: the same rails, the same revision check,
the same options; a refused plan exits 1 in every format, and `apply` refuses identically.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psycopg
import pytest

from reconciler.cli.parser import main
from reconciler.reconcile.revision import CI_COMMIT_VARIABLES
from tests.builders import cli, cron_trigger, task_text, write_tasks

GIT = ["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.com", "-c", "init.defaultBranch=main"]


@pytest.fixture(autouse=True)
def no_ci_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The revision comes from git here, even when the suite itself runs in CI."""
    for name in (*CI_COMMIT_VARIABLES, "GITHUB_REF", "GITHUB_ACTOR"):
        monkeypatch.delenv(name, raising=False)


def write(folder: Path, names: list[str]) -> None:
    """Exactly these daily tasks in `folder`, each calling a URL of its own name."""
    write_tasks(
        folder,
        {n: task_text(trigger=cron_trigger("@daily"), url=f"http://127.0.0.1:9/{n}") for n in names},
        replace=True,
    )


def test_too_many_deletes_refused_by_plan_in_every_format_and_by_apply(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.d"
    write(tasks, [f"t{i}" for i in range(8)])
    assert cli(dsn, tasks, "apply")[0] == 0
    write(tasks, [f"t{i}" for i in range(5)])  # three deletes; the default limit is 25 % of 8 = 2
    reason = "this apply would delete 3 tasks, more than --max-deletes 2: t5, t6, t7"

    code, out, err = cli(dsn, tasks, "plan", "--detailed-exitcode")
    assert code == 1 and f"refused: {reason}" in out and reason in err
    code, out, _ = cli(dsn, tasks, "plan", "--format", "markdown")
    assert code == 1 and "would refuse this plan" in out and reason in out
    code, out, _ = cli(dsn, tasks, "plan", "--format", "json")
    assert code == 1 and any(reason in r for r in json.loads(out)["refused"])
    code, out, err = cli(dsn, tasks, "apply")
    assert code == 1 and reason in err and "Apply complete" not in out

    # The same options on both sides: the plan passes, and apply carries it out.
    code, out, _ = cli(dsn, tasks, "plan", "--max-deletes", "3", "--detailed-exitcode")
    assert code == 2 and "refused" not in out and "3 to delete" in out
    code, out, _ = cli(dsn, tasks, "apply", "--max-deletes", "3")
    assert code == 0 and "Apply complete: 3 change(s) written." in out


def test_emptying_a_source_needs_allow_empty_on_plan_and_apply(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.d"
    write(tasks, ["a", "b"])
    assert cli(dsn, tasks, "apply")[0] == 0
    write(tasks, [])
    for command in ("plan", "apply"):
        code, _, err = cli(dsn, tasks, command)
        assert code == 1 and "would delete every task of source 'default' (2)" in err, (command, err)
    assert cli(dsn, tasks, "plan", "--allow-empty")[0] == 0
    assert cli(dsn, tasks, "apply", "--allow-empty")[0] == 0


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_a_checkout_behind_the_live_revision_is_refused(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    tasks = repo / "tasks.d"
    write(tasks, ["a"])
    git(tmp_path, "init", "-q", str(repo))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "A: first task")
    commit_a = git(repo, "rev-parse", "HEAD")
    write(tasks, ["a", "b"])
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "B: second task")
    commit_b = git(repo, "rev-parse", "HEAD")
    assert cli(dsn, tasks, "apply")[0] == 0  # live: B

    code, out, _ = cli(dsn, tasks, "status")
    assert code == 0 and f"live revision {commit_b}" in out
    code, out, _ = cli(dsn, tasks, "history")
    assert code == 0 and commit_b in out and "by Ada" in out and "B: second task" in out and "2 created" in out
    code, out, _ = cli(dsn, tasks, "history", "b", "--format", "json")
    [entry] = json.loads(out)
    assert (entry["revision"], entry["op"], entry["counts"]["create"]) == (commit_b, "create", 2)
    code, out, _ = cli(dsn, tasks, "explain", "b")
    assert code == 0 and f"last changed by revision {commit_b}" in out

    git(repo, "checkout", "-q", commit_a)  # a checkout that does not contain B: its plan deletes b
    code, out, err = cli(dsn, tasks, "plan")
    assert code == 1 and f"behind the live revision {commit_b[:7]}" in err and "rebase" in err
    code, _, err = cli(dsn, tasks, "apply")
    assert code == 1 and f"behind the live revision {commit_b[:7]}" in err
    code, out, _ = cli(dsn, tasks, "plan", "--allow-older")
    assert code == 0 and "applying it anyway (--allow-older)" in out

    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "old", commit_a)
    older = tmp_path / "older"  # a shallow clone of A: git cannot tell, so a warning, not a refusal
    git(tmp_path, "clone", "-q", "--depth", "1", "--no-local", "--branch", "old", str(repo), str(older))
    code, out, err = cli(dsn, older / "tasks.d", "plan")
    assert code == 0 and "cannot tell whether this checkout contains the live revision" in out, err
    assert "the clone is shallow" in out

    write(tmp_path / "plain", ["a", "b"])
    code, out, _ = cli(dsn, tmp_path / "plain", "plan")  # no git at all: a warning
    assert code == 0 and "is not in a git repository" in out


def catalog_objects(dsn: str) -> list[tuple[str, ...]]:
    with psycopg.connect(dsn) as conn:
        query = "SELECT nspname FROM pg_namespace WHERE nspname = 'scheduler'"
        return [tuple(map(str, row)) for row in conn.execute(query)]


def test_plan_on_a_fresh_database_writes_nothing(dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "tasks.d"
    write(tasks, ["a", "b"])
    code, out, _ = cli(dsn, tasks, "plan", "--detailed-exitcode")
    assert code == 2 and "2 to create" in out and "no scheduler schema yet: apply will create it" in out
    assert catalog_objects(dsn) == []
    code, out, _ = cli(dsn, tasks, "plan", "--format", "json")
    assert code == 0 and json.loads(out)["schema_missing"] is True
    assert catalog_objects(dsn) == []


def test_outputs_mask_secrets_and_escape_control_characters_from_the_database(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.d"
    write(tasks, ["a"])
    assert cli(dsn, tasks, "apply")[0] == 0
    with pytest.raises(SystemExit) as usage:  # argparse exits: a usage error, code 1
        main(["--dsn", dsn, "--tasks-dir", str(tasks), "apply", "--revision", "v1\x1b]0;pwned\x07"])
    assert usage.value.code == 1 and "printable" in capsys.readouterr().err
    code, out, _ = cli(dsn, tasks, "history")
    assert code == 0 and "(no revision)" in out
    code, out, _ = cli(dsn, tasks, "status")
    assert code == 0 and "live revision (none)" in out
    with psycopg.connect(dsn, autocommit=True) as conn:  # what an older version or a person wrote
        conn.execute(
            "INSERT INTO scheduler.runs (task_id, scheduled_for, kind, status, attempt, error) "
            "VALUES ('a', now(), 'scheduled', 'failed', 1, "
            "'connect to https://bob:RUNPW@x.example/?token=RUNTOK \x1b[2J')"
        )
        conn.execute(
            "INSERT INTO scheduler.tasks (id, source, spec, spec_hash, timezone) "
            "SELECT E'evil\\x1b]0;T\\x07', 'other', spec, spec_hash, 'Nowhere/Zone' FROM scheduler.tasks WHERE id = 'a'"
        )
        conn.execute("UPDATE scheduler.tasks SET next_run_at = now() WHERE source = 'other'")
    for command in (["explain", "a"], ["runs"], ["runs", "--format", "json"], ["status"], ["history"]):
        code, out, err = cli(dsn, tasks, *command)
        assert code == 0, (command, err)
        assert "RUNPW" not in out and "RUNTOK" not in out and "\x1b" not in out, (command, out)
    assert "(unknown zone)" in cli(dsn, tasks, "status")[1]
