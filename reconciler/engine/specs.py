"""The engine's compiled specs: each task's stored spec validated once per stored text, with its schedule.

A claim reads the 64-bit hash of every due row's stored text (`spec_key`) and the text itself of only those
not compiled yet: a burst's claim result is a tenth of the bytes, which a busy event loop reads in as many
fewer turns. The text's hash, not spec_hash, decides whether a cached spec is the row's (a hand edit of `spec`
alone changes no spec_hash). Tasks that share a schedule share its compiled form and what it has computed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.errors import one_line
from reconciler.schedule.base import Schedule
from reconciler.schedule.catchup import SharedSchedule
from reconciler.schedule.triggers import compile_schedule, schedule_key
from reconciler.spec.task import TaskSpec
from reconciler.targets.http import parsed_url

MAX_COMPILED = 50_000  # validated specs kept per engine (tasks' specs, not runs: a bound on memory)


@dataclass(frozen=True)
class Compiled:
    """A task's stored spec, validated, and the schedule it gives."""

    spec: TaskSpec
    schedule: Schedule


@dataclass(frozen=True)
class Invalid:
    """A task's stored spec that does not validate (a hand edit): its runs fail with this reason."""

    reason: str


Compiling = Compiled | Invalid


class SpecCache:
    """task id → (hash of the stored text, its compiled spec), at most MAX_COMPILED of them."""

    def __init__(self) -> None:
        self._compiled: dict[str, tuple[int, Compiled]] = {}
        self._schedules: dict[str, SharedSchedule] = {}  # schedule_key → the schedule its tasks share

    def cold(self, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """The ids of rows (id, spec_key) whose stored spec is not the one compiled."""
        return [r["id"] for r in rows if self._key_of(r["id"]) != r["spec_key"]]

    def _key_of(self, task_id: str) -> int | None:
        found = self._compiled.get(task_id)
        return found[0] if found is not None else None

    def compile(self, task_id: str, spec_key: int, texts: Mapping[str, str]) -> Compiled:
        """The task's spec and schedule, validated once per stored text (a changed task replaces its entry);
        `texts` holds the stored text of every task `cold` named. Raises what validation raises."""
        cached = self._compiled.get(task_id)
        if cached is not None and cached[0] == spec_key:
            return cached[1]
        spec = TaskSpec.model_validate_json(texts[task_id])
        with contextlib.suppress(ValueError):  # one the client refuses fails its run when fired
            parsed_url(spec.target.url)  # parsed here, in idle time when warming, not per request
        if cached is None and len(self._compiled) >= MAX_COMPILED:
            for old in list(self._compiled)[: MAX_COMPILED // 2]:  # the oldest half: recompiled when due
                del self._compiled[old]
        key = schedule_key(spec)
        shared = self._schedules.get(key)
        if shared is None:
            if len(self._schedules) >= MAX_COMPILED:
                self._schedules.clear()
            shared = self._schedules[key] = SharedSchedule(compile_schedule(spec))
        compiled = Compiled(spec, shared)
        self._compiled[task_id] = (spec_key, compiled)
        return compiled

    def attempt(self, task_id: str, spec_key: int, texts: Mapping[str, str]) -> Compiling:
        """`compile`, or why the stored spec does not validate: one task's spec never stops a claim."""
        try:
            return self.compile(task_id, spec_key, texts)
        except Exception as exc:
            return Invalid(f"invalid stored spec: {one_line(exc)}")
