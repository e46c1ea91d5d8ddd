"""Limit files (`limits.d/NAME.toml`): the limit kind, and a limits directory loaded.

A limit is owned by the source that applies it, like a calendar; a task's `[policy] limits` names limits of its
own source, and the engines hold the runs of every task naming one within its numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.files.directory import Named, load_named
from reconciler.files.kinds import Kind, NamedItem
from reconciler.files.problems import FileError
from reconciler.spec.limit import BURST_NEEDS_RATE, LimitSpec

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


class LimitKind(Kind[Limit]):
    """Limit files: named by their file, directly in limits.d; max_in_flight, rate_per_second or both."""

    name = "limit"
    directory = "limits.d"
    option = "--limits-dir"
    model = LimitSpec
    empty = f"empty limit file; {WHAT_TO_WRITE}"

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


class Limits(Named[Limit]):
    """A limits directory loaded: the valid limits by name, and an error for everything else."""


def load_limits(limits_dir: Path, display_root: str | None = None, required: bool = False) -> Limits:
    """Every `NAME.toml` directly in `limits_dir` (see load_named)."""
    return load_named(LIMITS, Limits, limits_dir, display_root, required)
