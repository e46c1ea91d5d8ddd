"""The one list of declared kinds, in the order they are planned and applied: a kind comes after the kinds
its files name (a task's `[notify]` names notifiers, its trigger and policy name calendars, its policy limits)."""

from __future__ import annotations

from typing import Any

from reconciler.files.calendars import CALENDARS
from reconciler.files.kinds import Kind
from reconciler.files.limits import LIMITS
from reconciler.files.notifiers import NOTIFIERS
from reconciler.files.tasks import TASKS

KINDS: tuple[Kind[Any], ...] = (CALENDARS, LIMITS, NOTIFIERS, TASKS)
