"""Limit files (`limits.d/NAME.toml`): the limit kind, and a limits directory loaded.

A limit is owned by the source that applies it, like a calendar; a task's `[policy] limits` names limits of its
own source, and the engines hold the runs of every task naming one within its numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.files.directory import load_named
from reconciler.files.kinds import Named, NamedItem, NamedKind
from reconciler.files.problems import FileError, FileWarning
from reconciler.files.references import missing, spec_of, unused, users_of
from reconciler.spec.limit import BURST_NEEDS_RATE, LimitSpec

if TYPE_CHECKING:
    from reconciler.files.tasks import Task, Unparsed

KEY = "policy.limits"

WHAT_TO_WRITE = "write max_in_flight = N (runs at once), rate_per_second = R (requests a second), or both"
# What to write instead of a value of the wrong type (a quoted number, a fraction of a run, a boolean).
EXAMPLES = {
    "max_in_flight": "max_in_flight = 4 (a whole number, no quotes)",
    "rate_per_second": "rate_per_second = 10 or 0.5 (a number, no quotes)",
    "burst": "burst = 20 (a whole number, no quotes)",
    "description": 'description = "what the limit protects"',
}


class Limit(NamedItem[LimitSpec]):
    """A valid limit file."""


class LimitKind(NamedKind[Limit]):
    """Limit files: named by their file, directly in limits.d; max_in_flight, rate_per_second or both. Apply keeps
    them in scheduler.limits, whose numbers and bucket the engines' claims read under the row's lock."""

    name = "limit"
    directory = "limits.d"
    option = "--limits-dir"
    model = LimitSpec
    empty = f"empty limit file; {WHAT_TO_WRITE}"
    title = "reconciler limit file"
    description = (
        "One TOML file in limits.d/: how many runs of the tasks that name it may be in flight at once "
        "(max_in_flight) and how many may start a second (rate_per_second, burst). Checks keys, types and ranges; "
        "`reconciler validate` checks the rest (one of max_in_flight and rate_per_second, burst only with a rate, "
        "the tasks' names of limits)."
    )
    table = "limits"
    # A claim holds its task rows, then writes its limits' buckets: an apply that wrote a limit's row first and then
    # waited for a task row the claim holds would deadlock with it. (One transaction: nobody sees a task naming a
    # limit before the limit.)
    after_tasks = True

    def columns(self, item: Limit) -> dict[str, Any]:
        spec = item.spec  # the burst: the bucket's size, else the rate rounded up (None: no rate)
        return {"max_in_flight": spec.max_in_flight, "rate_per_second": spec.rate_per_second, "burst": spec.bucket}

    on_write = "limit_bucket_capped"  # a changed limit keeps its tokens, at most its new bucket

    def created_columns(self, item: Limit) -> dict[str, Any]:
        """A new limit starts with a full bucket (a changed one keeps its tokens: `on_write`)."""
        return {"tokens": float(item.spec.bucket or 0)}

    def summary(self, spec: Mapping[str, Any]) -> str:
        """`at most 4 in flight; 10 a second, bursts of 10`."""
        parts = []
        if isinstance(spec.get("max_in_flight"), int):
            parts.append(f"at most {spec['max_in_flight']:,} in flight")
        rate = spec.get("rate_per_second")
        if isinstance(rate, int | float):
            burst = spec.get("burst") or max(1, math.ceil(rate))
            parts.append(f"{rate:g} a second, bursts of {burst:,}")
        return "; ".join(parts) or "no numbers"

    def references(
        self, tasks: Sequence[Task | Unparsed], loaded: Named[Limit], stored: Mapping[str, Mapping[str, Any]] | None
    ) -> list[FileError]:
        """Every limit a task names that limits.d lacks; the error names every task using it, so a limit deleted
        while tasks name it is refused so."""
        named: list[tuple[Task | Unparsed, str]] = []
        for task in tasks:
            named += [(task, name) for name in limits_named(spec_of(task, stored))]
        users = users_of((task.id, name) for task, name in named)
        return [
            FileError(
                task.path,
                task.line_of(*KEY.split(".")),
                KEY,
                missing("limit", name, users[name], loaded.by_name, loaded.root),
            )
            for task, name in named
            if name not in loaded.names  # an invalid one's errors are in its file
        ]

    def unused(
        self, tasks: Sequence[Task], loaded: Named[Limit], stored: Mapping[str, Mapping[str, Any]] | None
    ) -> list[FileWarning]:
        """A limit file no task names: it holds nothing back."""
        used = {name for task in tasks for name in limits_named(spec_of(task, stored))}
        return unused("limit", loaded.by_name, used, KEY)

    def item(self, item_id: str, display: str, source: str, spec: Any, digest: str | None) -> Limit:
        return Limit(item_id, display, spec, source)

    def model_error(self, found: FileError) -> FileError:
        if found.message.startswith("Input should be") and found.key in EXAMPLES:
            return FileError(found.path, found.line, found.key, f"{found.message}; write {EXAMPLES[found.key]}")
        return found

    def rewrite(self, loc: tuple[str, ...], message: str) -> tuple[tuple[str, ...], str]:
        """A burst without a rate is the burst key's error (the model says it of the whole file)."""
        loc, message = super().rewrite(loc, message)
        return (("burst",) if message == BURST_NEEDS_RATE else loc), message


LIMITS = LimitKind()


Limits = Named[Limit]


def limits_named(spec: Mapping[str, Any]) -> list[str]:
    """A normalized task spec's limits (a stored spec edited by hand into something else names none)."""
    policy = spec.get("policy")
    named = policy.get("limits") if isinstance(policy, dict) else None
    return [name for name in named if isinstance(name, str)] if isinstance(named, list) else []


def load_limits(limits_dir: Path, display_root: str | None = None, required: bool = False) -> Limits:
    """Every `NAME.toml` directly in `limits_dir` (see load_named)."""
    return load_named(LIMITS, limits_dir, display_root, required)
