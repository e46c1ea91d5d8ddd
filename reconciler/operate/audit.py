"""Who did what: the operator behind an action (actor and reason) and its row in scheduler.audit.

Every operator action (apply, trigger, cancel, pause, resume; backfill to come) writes one row, in the
action's own transaction: no action without its row, no row without its action. The actor is `--actor`,
else `GITHUB_ACTOR`, else `user@host`; the reason is the operator's `--reason`. Both are user text,
stored as given within bounds: at most MAX_TEXT characters, no control characters (they would reach
every terminal that lists them); anything else is a one-line error naming where the text came from.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.db import operator_queries
from reconciler.db.rows import Conn
from reconciler.errors import UserError

MAX_TEXT = 500
# C0 and C1 controls (newline and tab included), DEL, and the bidi overrides that reorder a line.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def checked(text: str, where: str) -> str:
    """`text` as given when it is 1 to MAX_TEXT characters without control characters; else a UserError
    naming `where` (the option or variable it came from)."""
    if not text.strip():
        raise UserError(f"{where}: empty; say who or why in a few words")
    if len(text) > MAX_TEXT:
        raise UserError(f"{where}: {len(text)} characters, more than {MAX_TEXT}; shorten it")
    found = _CONTROL.search(text)
    if found:
        shown = found[0].encode("unicode_escape").decode("ascii")
        raise UserError(f"{where}: control character {shown} at position {found.start()}; write it on one line")
    return text


def whoami() -> str:
    """`user@host` of this process (`uid N@host` where the user has no name)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container); 3.13 raises OSError, earlier KeyError
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class Operator:
    """Who takes an action, and why (None: no reason given)."""

    actor: str
    reason: str | None = None

    @classmethod
    def resolve(cls, actor: str | None, reason: str | None, env: Mapping[str, str] = os.environ) -> Operator:
        """`--actor`, else GITHUB_ACTOR, else user@host; each checked, like `--reason`."""
        if actor is not None:
            name = checked(actor, "--actor")
        elif env.get("GITHUB_ACTOR"):
            name = checked(env["GITHUB_ACTOR"], "GITHUB_ACTOR")
        else:
            name = checked(whoami(), "user@host (give --actor instead)")
        return cls(name, None if reason is None else checked(reason, "--reason"))


def one_source(sources: Sequence[str]) -> str | None:
    """The source of an action's tasks, None when they belong to several (or none)."""
    distinct = set(sources)
    return distinct.pop() if len(distinct) == 1 else None


async def record(
    conn: Conn,
    operator: Operator,
    action: str,
    source: str | None,
    task_ids: Sequence[str],
    details: Mapping[str, Any] | None = None,
) -> int:
    """The action's row of scheduler.audit, in the caller's transaction; its id."""
    [row] = await operator_queries.audit_insert(
        conn,
        actor=operator.actor,
        action=action,
        source=source,
        task_ids=task_ids,
        reason=operator.reason,
        details=details or {},
    )
    return row["id"]
