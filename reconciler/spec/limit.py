"""What a limit file (`limits.d/NAME.toml`) may say: how many of its tasks' requests may be in flight at once
(`max_in_flight`), and how many may start per second (`rate_per_second`, with `burst`); and the names a
task's `[policy] limits` gives them."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import AfterValidator, Field

from reconciler.spec.model import Model
from reconciler.spec.values import file_name

# Input bounds (docs/files.md, "Input bounds").
MAX_IN_FLIGHT = 100_000
MAX_RATE = 100_000.0  # requests per second
MIN_RATE = 0.001  # one request per 1,000 s
MAX_BURST = 100_000
MAX_LIMITS = 8  # limits one task names
NEEDS_ONE = "a limit needs max_in_flight = N, rate_per_second = R, or both"
BURST_NEEDS_RATE = "burst is the bucket of rate_per_second; set rate_per_second too, or remove burst"


class LimitSpec(Model):
    """A limit: at most `max_in_flight` of its tasks' runs at once, at most `rate_per_second` requests per second
    with bursts of up to `burst` (default: the rate rounded up), across every engine replica."""

    max_in_flight: int | None = Field(default=None, ge=1, le=MAX_IN_FLIGHT)
    rate_per_second: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)
    burst: int | None = Field(default=None, ge=1, le=MAX_BURST)
    description: str | None = Field(default=None, max_length=4096)

    cross_checks = (
        (("max_in_flight", "rate_per_second"), lambda v: None if any(x is not None for x in v.values()) else NEEDS_ONE),
        (
            ("burst", "rate_per_second"),
            lambda v: BURST_NEEDS_RATE if v["burst"] and v["rate_per_second"] is None else None,
        ),
    )

    @property
    def bucket(self) -> int | None:
        """The token bucket's size: `burst`, else the rate rounded up (None: no rate)."""
        if self.rate_per_second is None:
            return None
        return self.burst if self.burst is not None else max(1, math.ceil(self.rate_per_second))


def _unique(names: list[str]) -> list[str]:
    seen = [name for n, name in enumerate(names) if name in names[:n]]
    if seen:
        raise ValueError(f"limit {seen[0]!r} is named twice; name each limit once")
    return names


LimitName = Annotated[str, file_name("limit", "limits.d")]
LimitNames = Annotated[list[LimitName], Field(min_length=1, max_length=MAX_LIMITS), AfterValidator(_unique)]
