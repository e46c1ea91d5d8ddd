"""The database's state as an engine sees it, logged once per change: unavailable, still unavailable
every STILL_DOWN_SECONDS while it lasts, reachable again. The claim loop and the start-up wait report
every try to it; the tries themselves (and psycopg_pool's own warnings, see db/errors.py) log nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from reconciler.errors import DatabaseUnavailable, one_line

# Its own logger, so that `up` (which shows people only warnings) can show the "reachable" line too.
log = logging.getLogger("reconciler.engine.database")

STILL_DOWN_SECONDS = 60.0


def _reason(exc: BaseException) -> str:
    """The error in one line; whole when it is the store's own (one_line's cut would drop its end: the fix)."""
    if isinstance(exc, DatabaseUnavailable) and str(exc).strip():
        return str(exc).strip().splitlines()[0]
    return one_line(exc)


class Outage:
    """Whether the database answered at the last try, and since when it has not; `clock` is monotonic
    seconds (a test gives its own)."""

    def __init__(self, still_every: float = STILL_DOWN_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.still_every = still_every
        self.clock = clock
        self.since: float | None = None  # when the first failed try of this outage was; None: no outage
        self._told = 0.0  # when the last line about it was logged

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> None:
        """A try failed on the database: a line if this starts an outage, or if the last line is
        `still_every` old."""
        now, reason = self.clock(), _reason(exc)
        if self.since is None:
            self.since = self._told = now
            log.warning(
                "database unavailable: %s; retrying (a line every %g s until it answers)",
                reason,
                self.still_every,
                extra={"fields": {"database": "unavailable"}},
            )
        elif now - self._told >= self.still_every:
            self._told = now
            down = now - self.since
            log.warning(
                "database still unavailable after %.0f s: %s; retrying",
                down,
                reason,
                extra={"fields": {"database": "unavailable", "down_seconds": round(down, 1)}},
            )

    def answered(self) -> None:
        """A try went through: a line if that ends an outage."""
        if self.since is None:
            return
        down, self.since = self.clock() - self.since, None
        log.info(
            "database reachable after %.1f s unavailable",
            down,
            extra={"fields": {"database": "reachable", "down_seconds": round(down, 1)}},
        )
