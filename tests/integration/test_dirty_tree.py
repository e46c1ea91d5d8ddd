"""Applying a working tree with uncommitted changes in the declared directories: recorded as `<sha>-dirty` with
a warning naming the files; on CI refused (plan and apply alike) unless --allow-dirty; `--revision` is recorded
as given; watch and up record `-dirty` without a word."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psycopg
import pytest

from reconciler.cli.options import FilesOptions, WatchOptions
from reconciler.cli.watch import apply_files
from reconciler.db.store import Store
from reconciler.reconcile.revision import CI_COMMIT_VARIABLES, CI_VARIABLES, WorkingTree, dirty_verdict, under_ci
from tests.builders import cli, cron, write_tasks

GIT = ["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.com", "-c", "init.defaultBranch=main"]
ONCALL = 'kind = "webhook"\nurl = "http://127.0.0.1:9/oncall"\n'


@pytest.fixture(autouse=True)
def not_on_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite itself may run on CI (.ci/run): each test says whether it is."""
    for name in (*CI_VARIABLES, *CI_COMMIT_VARIABLES, "GITHUB_REF", "GITHUB_ACTOR"):
        monkeypatch.delenv(name, raising=False)


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed repository: tasks.d/a.toml, notifiers.d/oncall.toml and a README.md beside them."""
    root = tmp_path / "repo"
    write_tasks(root / "tasks.d", {"a": cron("http://127.0.0.1:9/a")})
    write_tasks(root / "notifiers.d", {"oncall": ONCALL})
    (root / "README.md").write_text("# schedules\n")
    git(tmp_path, "init", "-q", str(root))
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    return root


def history(dsn: str) -> list[tuple[str | None, str | None]]:
    """(revision, message) of every apply, oldest first."""
    with psycopg.connect(dsn) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT revision, message FROM scheduler.applies ORDER BY id")]


def test_a_clean_tree_is_recorded_as_its_commit_without_a_warning(dsn: str, repo: Path) -> None:
    (repo / "README.md").write_text("changed outside the declared directories: not a change of theirs\n")
    code, _, err = cli(dsn, repo / "tasks.d", "apply")
    assert code == 0 and err == "", err
    assert history(dsn) == [(git(repo, "rev-parse", "HEAD"), "first")]


def test_uncommitted_changes_warn_and_are_recorded_dirty(
    dsn: str, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    write_tasks(repo / "tasks.d", {"a": cron("http://127.0.0.1:9/a-edited")})  # modified
    write_tasks(repo / "tasks.d", {"team/b": cron("http://127.0.0.1:9/b")})  # untracked, in a new folder
    (repo / "notifiers.d" / "pager.toml").write_text(ONCALL)
    git(repo, "add", "notifiers.d/pager.toml")  # staged
    code, out, err = cli(dsn, repo / "tasks.d", "plan")
    files = f"{repo}/notifiers.d/pager.toml, {repo}/tasks.d/a.toml, {repo}/tasks.d/team/b.toml"
    warning = f"warning: uncommitted changes in 3 file(s) of the declared directories ({files})"
    recorded = f"the apply is recorded as {head[:7]}-dirty; commit them so the history names what was applied"
    assert code == 0 and err == f"{warning}: {recorded}\n", err
    assert "warning: uncommitted" not in out  # on stderr only
    code, out, err = cli(dsn, repo / "tasks.d", "apply")
    assert code == 0 and err.startswith(warning) and "Apply complete: 4 change(s) written." in out, out + err
    # The message names what the apply held, not HEAD's subject (which every later `up` apply would repeat).
    message = "uncommitted changes: notifiers.d/pager.toml, tasks.d/a.toml, tasks.d/team/b.toml"
    assert history(dsn) == [(f"{head}-dirty", message)]
    code, out, _ = cli(dsn, repo / "tasks.d", "history")
    assert code == 0 and f"{head}-dirty by Ada: {message}" in out, out
    code, out, _ = cli(dsn, repo / "tasks.d", "history", "--format", "json")
    assert json.loads(out)[0]["revision"] == f"{head}-dirty"
    code, out, _ = cli(dsn, repo / "tasks.d", "status")
    assert f"live revision {head}-dirty" in out, out

    # Committed: the next plan knows the live revision's commit is in this checkout (no "cannot tell"), and
    # the tree is clean again: no warning.
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "second")
    code, out, err = cli(dsn, repo / "tasks.d", "plan", "--detailed-exitcode")
    assert (code, err) == (0, "") and "cannot tell" not in out and "No changes." in out, out + err
    # The live revision is first's commit plus changes: a branch from first contains it, one from before
    # first (an unrelated history here) does not, and git can tell either way.
    git(repo, "checkout", "-q", "--detach", head)
    git(repo, "commit", "-q", "--allow-empty", "-m", "a branch from first")
    code, out, err = cli(dsn, repo / "tasks.d", "plan")
    assert code == 0 and "cannot tell" not in out and "behind" not in out + err, out + err
    git(repo, "checkout", "-q", "--orphan", "unrelated")
    git(repo, "commit", "-q", "-m", "another history")
    code, out, err = cli(dsn, repo / "tasks.d", "plan")
    assert code == 1 and f"this checkout is behind the live revision {head[:7]}-dirty" in err, out + err


def test_on_ci_plan_and_apply_refuse_a_dirty_tree_unless_allow_dirty(
    dsn: str, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    monkeypatch.setenv("CI", "true")
    for n in range(12):  # more than the ten a message names
        (repo / "notifiers.d" / f"n{n:02}.toml").write_text(ONCALL)
    named = ", ".join(f"{repo}/notifiers.d/n{n:02}.toml" for n in range(10))
    reason = (
        f"uncommitted changes in 12 file(s) of the declared directories ({named} and 2 more) on CI: no commit "
        "holds what would be applied; commit them (or run on a clean checkout), or pass --allow-dirty to apply "
        "the working tree"
    )
    code, out, err = cli(dsn, repo / "tasks.d", "plan", "--detailed-exitcode")
    assert code == 1 and f"refused: {reason}" in out and reason in err, out + err
    code, out, _ = cli(dsn, repo / "tasks.d", "plan", "--format", "json")
    assert code == 1 and json.loads(out)["refused"] == [reason]
    code, out, err = cli(dsn, repo / "tasks.d", "apply")
    assert code == 1 and err == f"error: {reason}\n" and "Apply complete" not in out
    code, out, err = cli(dsn, repo / "tasks.d", "apply", "--revision", "v1")  # a name does not make it committed
    assert code == 1 and err == f"error: {reason}\n"
    assert history(dsn) == []

    code, out, err = cli(dsn, repo / "tasks.d", "plan", "--allow-dirty", "--detailed-exitcode")
    assert code == 2 and "refused" not in out and err.startswith("warning: uncommitted changes in 12 file(s)")
    code, out, err = cli(dsn, repo / "tasks.d", "apply", "--allow-dirty")
    assert code == 0 and "Apply complete: 14 change(s) written." in out and f"recorded as {head[:7]}-dirty" in err
    message = "uncommitted changes: notifiers.d/n00.toml, notifiers.d/n01.toml, notifiers.d/n02.toml and 9 more"
    assert history(dsn) == [(f"{head}-dirty", message)]

    # An explicit --revision is the operator's statement: recorded as given, and the warning says so.
    (repo / "notifiers.d" / "n00.toml").unlink()
    code, out, err = cli(dsn, repo / "tasks.d", "apply", "--allow-dirty", "--revision", "release-7")
    assert code == 0 and "recorded as release-7 (--revision)" in err, err
    assert history(dsn)[-1] == ("release-7", None)


def test_a_repository_without_a_commit_and_declared_dirs_elsewhere_cannot_be_dirty(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    fresh = tmp_path / "fresh"
    write_tasks(fresh / "tasks.d", {"a": cron("http://127.0.0.1:9/a")})
    git(tmp_path, "init", "-q", str(fresh))  # no commit yet: nothing a revision could name
    code, _, err = cli(dsn, fresh / "tasks.d", "apply")
    assert code == 0 and err == "", err
    plain = tmp_path / "plain"  # no repository at all
    write_tasks(plain / "tasks.d", {"a": cron("http://127.0.0.1:9/a")})
    code, _, err = cli(dsn, plain / "tasks.d", "plan")
    assert code == 0 and err == "", err


async def test_watch_records_a_dirty_tree_without_a_word(
    store: Store, dsn: str, repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CI", "1")  # watch and up are for the working tree: not refused even so
    head = git(repo, "rev-parse", "HEAD")
    write_tasks(repo / "tasks.d", {"b": cron("http://127.0.0.1:9/b")})
    files = FilesOptions.beside(str(repo / "tasks.d"))
    await apply_files(store, WatchOptions(files))
    assert "Plan: 2 to create" in capsys.readouterr().out
    assert history(dsn) == [(f"{head}-dirty", "uncommitted changes: tasks.d/b.toml")]
    write_tasks(repo / "tasks.d", {"c": cron("http://127.0.0.1:9/c")})
    await apply_files(store, WatchOptions(files))  # each apply of `up` says what it held
    assert history(dsn)[-1] == (f"{head}-dirty", "uncommitted changes: tasks.d/b.toml, tasks.d/c.toml")


@pytest.mark.parametrize(
    ("value", "on_ci"),
    [("true", True), ("1", True), ("yes", True), ("TRUE", True), ("", False), ("false", False), ("0", False)],
)
def test_what_counts_as_ci(value: str, on_ci: bool) -> None:
    assert under_ci({"CI": value}) is on_ci
    assert under_ci({"GITHUB_ACTIONS": value}) is on_ci
    assert under_ci({}) is False


def test_no_verdict_when_git_cannot_tell() -> None:
    assert dirty_verdict(WorkingTree(), ci=True, allow_dirty=False) == (None, None)
    assert dirty_verdict(WorkingTree("0" * 40), ci=True, allow_dirty=False) == (None, None)
