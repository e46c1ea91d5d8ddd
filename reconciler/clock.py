"""The injectable clock (the only place that reads the wall clock), and the one way text writes an instant.

One clock decides: the database's. Statements that judge time (what is due, lease expiry, misfire
lateness, `late`) read the database's own `now()`; the instants an engine records (a run's start and
end, a retry time) are its own clock corrected by the offset it last measured from the database
(`DatabaseClock`), so replicas whose clocks disagree never fire early, twice, or expire a live lease.
"""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo


class Clock(Protocol):
    """Something that tells the current instant as an aware UTC datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock:
    """A clock that stands still until moved; for tests and replays."""

    def __init__(self, at: datetime) -> None:
        if at.tzinfo is None:
            raise ValueError("FixedClock needs an aware datetime")
        self._at = at

    def now(self) -> datetime:
        return self._at

    def set(self, at: datetime) -> None:
        """Move the clock to `at`."""
        self._at = at


class DatabaseClock:
    """The database's clock as this process estimates it: the system clock plus the offset (database
    minus this machine, in seconds) last measured (`measure`). One per process: the offset belongs to
    this machine's clock, whichever engine measured it."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.measured = False

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    def timestamp(self) -> float:
        """now() as a POSIX timestamp."""
        return time.time() + self.offset

    def measure(self, sent: datetime, database: datetime, received: datetime) -> float:
        """Take the offset from a reading of the database's clock between two readings of ours (utcnow()
        before the query was sent and after its answer came): off by at most half the round trip."""
        self.offset = (database - sent).total_seconds() - (received - sent).total_seconds() / 2
        self.measured = True
        return self.offset


SYSTEM = SystemClock()
DATABASE = DatabaseClock()


def statement_now(clock: Clock) -> datetime | None:
    """The `now` given to a statement that judges time: None, so that it reads the database's own
    `now()`, on the database's clock; the instant a test clock was set to otherwise (run_once(now))."""
    return None if isinstance(clock, DatabaseClock) else clock.now()


def utcnow() -> datetime:
    """The current instant from the system clock (aware, UTC)."""
    return SYSTEM.now()


@functools.lru_cache(maxsize=4096)  # the engine logs every run: many share one scheduled instant
def utc_text(moment: datetime | None) -> str:
    """`2026-12-03 09:55:00 UTC`, the one way text output writes an instant (to the second); `-` for none."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "-"


@functools.lru_cache(maxsize=4096)
def utc_iso(moment: datetime) -> str:
    """`2026-12-03T09:55:00+00:00`: an instant in a header or a JSON log field."""
    return moment.astimezone(UTC).isoformat()


@functools.lru_cache(maxsize=4096)
def utc_stamp(moment: datetime) -> str:
    """`2026-12-03T09:55:00Z`: an instant inside an identifier (the Idempotency-Key)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def local_text(moment: datetime, zone: ZoneInfo) -> str:
    """`2026-12-03 10:55:00 CET`: the wall-clock time in `zone`, with its abbreviation."""
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def when_text(moment: datetime, zone: ZoneInfo) -> str:
    """`2026-12-03 10:55:00 CET (2026-12-03 09:55:00 UTC)`, or the UTC text alone when the zone is UTC."""
    local, utc = local_text(moment, zone), utc_text(moment)
    return utc if local == utc else f"{local} ({utc})"
