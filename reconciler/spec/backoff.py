"""The one back-off formula: a wait that doubles with each attempt, capped, or longer if the server asks.

A run's retries (retry_backoff_seconds), a notification's (NOTIFY_BACKOFF) and the engine's own
reconnects (0.5 s, at most 10 s) all wait `base · 2^(attempt-1)`; only base and cap differ. It lives
with the file models because validation bounds a task's retries by the sum of those waits.
"""

from __future__ import annotations

import math


def backoff_delay(base: float, attempt: int, retry_after: float | None = None, cap: float = math.inf) -> float:
    """`base · 2^(attempt-1)`, at most `cap`, or the server's Retry-After when it asks for longer."""
    delay = min(float(base) * 2.0 ** (attempt - 1), cap)
    return max(delay, retry_after) if retry_after is not None else delay


def backoff_total(retries: int, base: float) -> float:
    """Every wait of `retries` retries together (uncapped, no Retry-After): `base · (2^retries − 1)`."""
    return float(base) * float(2**retries - 1)
