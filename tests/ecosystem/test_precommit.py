"""The `reconciler-validate` pre-commit hook, run by pre-commit itself on a scratch repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.ecosystem.packaging import PROJECT, copy_project, once_per_ci, outside_env, run, tool

pytestmark = once_per_ci

GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]


def try_repo(hook_repo: Path, user_repo: Path, home: Path, *files: str) -> subprocess.CompletedProcess[str]:
    """`pre-commit try-repo` of the hook on `files` of `user_repo` (default: every file), as a commit of
    those files runs it (a fresh hook environment per PRE_COMMIT_HOME)."""
    chosen = ["--files", *files] if files else ["--all-files"]
    return subprocess.run(
        [tool("pre-commit"), "try-repo", str(hook_repo), "reconciler-validate", *chosen, "--color=never"],
        cwd=user_repo,
        env=outside_env(PRE_COMMIT_HOME=str(home)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=180,
    )


def test_hook_passes_good_task_files_and_fails_a_bad_one_naming_it(tmp_path: Path) -> None:
    # The hook repository at one commit: try-repo then installs exactly these files, not main's git state.
    hook_repo = copy_project(tmp_path / "hook-repo")
    run([*GIT, "init", "-q"], hook_repo)
    run([*GIT, "add", "-A"], hook_repo)
    run([*GIT, "commit", "-q", "-m", "hook"], hook_repo)

    user_repo = tmp_path / "user-repo"
    (user_repo / "tasks.d" / "ops").mkdir(parents=True)
    good = PROJECT / "tasks.d" / "ops" / "ping.toml"
    shutil.copy2(good, user_repo / "tasks.d" / "ops" / "ping.toml")
    run([*GIT, "init", "-q"], user_repo)
    run([*GIT, "add", "-A"], user_repo)

    passed = try_repo(hook_repo, user_repo, tmp_path / "pre-commit-home")
    assert passed.returncode == 0, passed.stdout
    assert "reconciler validate" in passed.stdout and "Passed" in passed.stdout, passed.stdout

    (user_repo / "tasks.d" / "ops" / "broken.toml").write_text(good.read_text() + "bogus = 1\n")
    run([*GIT, "add", "-A"], user_repo)

    failed = try_repo(hook_repo, user_repo, tmp_path / "pre-commit-home")
    assert failed.returncode != 0, failed.stdout
    assert "Failed" in failed.stdout, failed.stdout
    errors = [line for line in failed.stdout.splitlines() if line.startswith("tasks.d/ops/broken.toml:")]
    assert len(errors) == 1 and "unknown key 'bogus'" in errors[0], failed.stdout

    # A commit that changes only a notifier file runs the hook too (its `files` names every declared
    # directory), and a broken notifier fails it, as `validate` does.
    (user_repo / "tasks.d" / "ops" / "broken.toml").unlink()
    oncall = 'kind = "webhook"\nurl = "http://127.0.0.1:9/x"\n'
    (user_repo / "notifiers.d").mkdir()
    (user_repo / "notifiers.d" / "oncall.toml").write_text(oncall)
    run([*GIT, "add", "-A"], user_repo)
    notifier = try_repo(hook_repo, user_repo, tmp_path / "pre-commit-home", "notifiers.d/oncall.toml")
    assert notifier.returncode == 0 and "Passed" in notifier.stdout, notifier.stdout
    (user_repo / "notifiers.d" / "oncall.toml").write_text(oncall + "bogus = 1\n")
    run([*GIT, "add", "-A"], user_repo)
    broken = try_repo(hook_repo, user_repo, tmp_path / "pre-commit-home", "notifiers.d/oncall.toml")
    assert broken.returncode != 0 and "Failed" in broken.stdout, broken.stdout
    assert "Skipped" not in broken.stdout, broken.stdout
    errors = [line for line in broken.stdout.splitlines() if line.startswith("notifiers.d/oncall.toml:")]
    assert len(errors) == 1 and "unknown key 'bogus'" in errors[0], broken.stdout
