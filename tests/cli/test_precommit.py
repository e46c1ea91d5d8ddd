"""The `reconciler-validate` pre-commit hook, run by pre-commit itself on a scratch repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.cli.packaging import PROJECT, copy_project, once_per_ci, outside_env, run, tool

pytestmark = once_per_ci

GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]


def try_repo(hook_repo: Path, user_repo: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """`pre-commit try-repo` of the hook on every file of `user_repo` (a fresh hook environment each time)."""
    return subprocess.run(
        [tool("pre-commit"), "try-repo", str(hook_repo), "reconciler-validate", "--all-files", "--color=never"],
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
