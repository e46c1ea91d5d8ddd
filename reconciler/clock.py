"""The injectable clock (the only place that reads the wall clock), and the one way text writes an instant."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
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


SYSTEM = SystemClock()


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
