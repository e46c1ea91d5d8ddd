"""Which git revision the declared files come from, whether a checkout contains the live one, and whether
the working tree holds changes no commit does.

`apply` records the revision it applied (scheduler.applies); `plan` and `apply` refuse a
checkout that git can tell is behind the live revision, so an old branch cannot silently
revert merged work. A working tree with uncommitted changes in the declared directories is
recorded as `<sha>-dirty` (no commit holds what was applied), with a warning, and refused
under CI unless --allow-dirty. Every git call is bounded and never raises: no git, no
repository or a shallow clone only means "cannot tell".
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from reconciler.clock import utc_text
from reconciler.files.problems import printable

GIT_TIMEOUT = 10.0
# The commit variables of common CI systems, in order: GitHub Actions, GitLab, Buildkite,
# CircleCI, Jenkins, Azure Pipelines.
CI_COMMIT_VARIABLES = (
    "GITHUB_SHA",
    "CI_COMMIT_SHA",
    "BUILDKITE_COMMIT",
    "CIRCLE_SHA1",
    "GIT_COMMIT",
    "BUILD_SOURCEVERSION",
)
MAX_FIELD = 200  # characters kept of an author or a commit subject
_PR_REF = re.compile(r"refs/pull/(\d+)/")
# Set (non-empty, not false) on CI systems: GitHub Actions sets both, GitLab, CircleCI, Buildkite and others CI.
CI_VARIABLES = ("CI", "GITHUB_ACTIONS")
DIRTY = "-dirty"  # after a commit id: that commit plus uncommitted changes (as `git describe --dirty` says)
DIRTY_SHOWN = 10  # changed files named in a warning or a refusal


@dataclass(frozen=True)
class Revision:
    """What an apply records about where its files came from."""

    revision: str | None
    author: str | None = None
    message: str | None = None
    reference: str | None = None  # e.g. "PR #42" or "refs/heads/main"


@dataclass(frozen=True)
class LiveRevision:
    """The revision last applied for a source."""

    revision: str | None  # None: the newest apply did not know its revision
    applied_at: datetime

    @property
    def short(self) -> str:
        return short(self.revision) if self.revision else "(none)"


def short(revision: str) -> str:
    """abc1234 for a full commit id (abc1234-dirty for one with uncommitted changes); other names as they are."""
    found = re.fullmatch(rf"([0-9a-f]{{40}}|[0-9a-f]{{64}})((?:{DIRTY})?)", revision)
    return found[1][:7] + found[2] if found else revision


def _git(directory: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    """One git command in `directory`; None when git is missing or hangs."""
    try:
        return subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _clip(text: str | None) -> str | None:
    if not text:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:MAX_FIELD] or None


def detect(
    tasks_dir: Path, explicit: str | None, env: Mapping[str, str] = os.environ, dirty: Sequence[str] = ()
) -> Revision:
    """--revision, else `git rev-parse HEAD` of the tasks directory (`<sha>-dirty` when the declared
    directories hold uncommitted changes, the paths in `dirty`), else a CI system's commit variable. A
    --revision is the operator's statement: recorded as given. An apply of uncommitted changes says which
    files changed, not HEAD's subject (which would repeat on every apply `up` makes)."""
    reference = _reference(env)
    author = env.get("GITHUB_ACTOR") or env.get("GITLAB_USER_LOGIN")
    message = None
    revision = explicit
    head = _git(tasks_dir, "log", "-1", "--format=%H%x00%an%x00%s", "HEAD")
    if head is not None and head.returncode == 0 and head.stdout.count("\0") == 2:
        sha, git_author, subject = head.stdout.strip("\n").split("\0")
        if revision is None or revision == sha:  # the checkout's own HEAD: what the ancestry check compares
            revision, author = revision or sha + (DIRTY if dirty else ""), author or git_author
            message = uncommitted(tasks_dir, dirty) if dirty else subject
    if revision is None:  # no git here (an archive, a container): the CI system's commit
        revision = next((env[name] for name in CI_COMMIT_VARIABLES if env.get(name)), None)
    return Revision(_clip(revision), _clip(author), _clip(message), reference)


def uncommitted(tasks_dir: Path, paths: Sequence[str], shown: int = 3) -> str:
    """`uncommitted changes: tasks.d/a.toml, notifiers.d/b.toml and 2 more` (from the project's folder): what
    an apply of a working tree holds."""
    project = tasks_dir.resolve().parent
    names = [os.path.relpath(Path(path).resolve(), project) for path in paths[:shown]]
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return f"uncommitted changes: {', '.join(names)}{more}"


def _reference(env: Mapping[str, str]) -> str | None:
    ref = env.get("GITHUB_REF") or env.get("CI_MERGE_REQUEST_IID") or env.get("CI_COMMIT_REF_NAME")
    if not ref:
        return None
    found = _PR_REF.match(ref)
    return f"PR #{found[1]}" if found else _clip(ref)


@dataclass(frozen=True)
class Ancestry:
    """Whether the checkout contains the live revision: True, False, or None with why git cannot tell."""

    contains: bool | None
    why: str = ""


def contains(tasks_dir: Path, live: str) -> Ancestry:
    """`git merge-base --is-ancestor LIVE HEAD` in the tasks directory (for `<sha>-dirty`, its commit)."""
    live = live.removesuffix(DIRTY) if re.fullmatch(rf"[0-9a-f]{{40,64}}{DIRTY}", live) else live
    top = _git(tasks_dir, "rev-parse", "--is-shallow-repository")
    if top is None:
        return Ancestry(None, "git is not installed")
    if top.returncode != 0:
        return Ancestry(None, f"{tasks_dir} is not in a git repository")
    shallow = top.stdout.strip() == "true"
    known = _git(tasks_dir, "cat-file", "-e", f"{live}^{{commit}}")
    if known is None or known.returncode != 0:
        why = "the clone is shallow" if shallow else "git does not know that commit"
        return Ancestry(None, f"{why}; fetch more history (e.g. fetch-depth: 0)")
    answer = _git(tasks_dir, "merge-base", "--is-ancestor", live, "HEAD")
    if answer is None or answer.returncode not in (0, 1):
        return Ancestry(None, "git merge-base failed")
    if answer.returncode == 1 and shallow:
        return Ancestry(None, "the clone is shallow; fetch more history (e.g. fetch-depth: 0)")
    return Ancestry(answer.returncode == 0)


def verdict(tasks_dir: Path, live: LiveRevision | None, allow_older: bool) -> tuple[str | None, str | None]:
    """(refusal, warning) about applying this checkout over the live revision."""
    if live is None:
        return None, None
    when = utc_text(live.applied_at)
    if live.revision is None:  # worth a word only where there is a revision to compare
        in_git = _git(tasks_dir, "rev-parse", "--git-dir")
        if in_git is None or in_git.returncode != 0:
            return None, None
        return None, f"the live tasks were applied without a revision at {when}; this checkout cannot be checked"
    found = contains(tasks_dir, live.revision)
    if found.contains is None:
        return None, (
            f"cannot tell whether this checkout contains the live revision {live.short} (applied {when}): {found.why}"
        )
    if found.contains:
        return None, None
    if allow_older:
        return None, f"this checkout is behind the live revision {live.short}; applying it anyway (--allow-older)"
    return (
        f"this checkout is behind the live revision {live.short} applied at {when}; "
        "rebase onto it (or pass --allow-older to roll back on purpose)"
    ), None


# ---------------------------------------------------------------- uncommitted changes


@dataclass(frozen=True)
class WorkingTree:
    """The uncommitted changes below the declared directories: files modified, staged or untracked (not
    ignored), each shown below its directory as given (`tasks.d/a.toml`); none when git cannot tell (no git,
    no repository, no commit yet) or a directory is outside the tasks directory's repository."""

    head: str | None = None
    changed: tuple[str, ...] = ()


def working_tree(tasks_dir: Path, directories: Sequence[Path]) -> WorkingTree:
    """`git status` of the declared directories that lie in the tasks directory's repository."""
    top = _git(tasks_dir, "rev-parse", "--show-toplevel")
    head = _git(tasks_dir, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if top is None or top.returncode != 0 or head is None or head.returncode != 0:
        return WorkingTree()
    root = Path(top.stdout.strip()).resolve()
    inside: dict[str, Path] = {}  # each directory's path in the repository → as given
    for directory in directories:
        try:
            inside[directory.resolve().relative_to(root).as_posix()] = directory
        except ValueError:  # another repository's, or none's: this one's history does not name it
            continue
    if not inside:
        return WorkingTree(head.stdout.strip())
    # --no-optional-locks: a status from a read-only checkout must not try to refresh the index.
    pathspecs = [f":(literal){path or '.'}" for path in inside]
    status = _git(
        root, "--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *pathspecs
    )
    if status is None or status.returncode != 0:
        return WorkingTree(head.stdout.strip())
    entries = iter(status.stdout.split("\0"))
    changed = []
    for entry in entries:
        if len(entry) > 3:
            changed.append(_below(entry[3:], inside))
            if entry[0] in "RC":  # a rename or copy: its old path follows
                next(entries, None)
    return WorkingTree(head.stdout.strip(), tuple(sorted(changed)))


def _below(path: str, inside: Mapping[str, Path]) -> str:
    """A path of the repository as the user names it: below the given declared directory that holds it."""
    for prefix, given in sorted(inside.items(), key=lambda item: -len(item[0])):
        if not prefix or path.startswith(prefix + "/"):
            return (given / path[len(prefix) :].lstrip("/")).as_posix()
    return path


def under_ci(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this runs on a CI system: CI or GITHUB_ACTIONS set to anything but empty, false, 0 or no."""
    return any(env.get(name, "").strip().lower() not in ("", "false", "0", "no") for name in CI_VARIABLES)


def dirty_verdict(
    tree: WorkingTree, ci: bool, allow_dirty: bool, explicit: str | None = None
) -> tuple[str | None, str | None]:
    """(refusal, warning) about applying a working tree with uncommitted changes (`explicit`: a --revision,
    recorded as given); the files are named, the first DIRTY_SHOWN of them."""
    if not tree.changed or tree.head is None:
        return None, None
    named = ", ".join(printable(path) for path in tree.changed[:DIRTY_SHOWN])
    if len(tree.changed) > DIRTY_SHOWN:
        named += f" and {len(tree.changed) - DIRTY_SHOWN} more"
    files = f"uncommitted changes in {len(tree.changed)} file(s) of the declared directories ({named})"
    if ci and not allow_dirty:
        return (
            f"{files} on CI: no commit holds what would be applied; commit them (or run on a clean checkout), "
            "or pass --allow-dirty to apply the working tree"
        ), None
    recorded = f"as {printable(explicit)} (--revision)" if explicit else f"as {short(tree.head)}{DIRTY}"
    return None, f"{files}: the apply is recorded {recorded}; commit them so the history names what was applied"
