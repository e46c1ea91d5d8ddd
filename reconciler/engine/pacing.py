"""Queue pacing: how many claimed runs may wait for a slot, and when a claim may start.

The pace is what the slots sustain when kept busy, measured after each claim (not per run); the
queue holds a few claims' worth of it, so runs never wait for a slot past their lease and due
tasks are left to replicas with free slots.
"""

from __future__ import annotations

import math

# Claimed runs may queue for a slot this long at the pace the slots sustain (and longer when a
# claim takes longer): far inside the lease's margin, and long enough to ramp up in a few claims.
QUEUE_SECONDS = 1.0
CLAIMS_AT_ONCE = 2  # claim transactions serve() runs at a time


class Pacer:
    """The queue's size (`ahead`) and the room that wakes the next claim (`wake_room`), from the smoothed
    pace and claim time of an engine of `concurrency` slots claiming `batch` tasks at most."""

    def __init__(self, concurrency: int, batch: int) -> None:
        self.concurrency, self.batch = concurrency, batch
        self._pace = 0.0  # attempts per second the slots sustain when kept busy, smoothed
        self._paced_at = (0, 0.0)  # (Firer.sent, Firer.slot_seconds) when the pace was last measured
        self._claim_seconds = 0.0  # how long a claim takes, smoothed
        self.ahead = self.wake_room = 0  # the queue's size (see size)
        self.size()

    def size(self) -> None:
        """Size the queue from the smoothed pace and claim time (after each claim, not per run):
        `ahead`, how many claimed runs may wait for a slot, is about four claims' worth at the pace
        the slots sustain (a claim's time varies threefold under load) or QUEUE_SECONDS' worth, at
        least --concurrency, at most two batches: back-to-back claims of a full batch need one
        batch waiting while the next is claimed. A deeper queue would make runs wait for a slot past
        their lease, and keep due tasks from replicas with free slots. `wake_room`, the room that
        wakes the next claim, is a quarter of the queue (or half the slots), so there is no claim
        per finished run."""
        waits = max(QUEUE_SECONDS, 4 * self._claim_seconds)
        self.ahead = min(2 * self.batch, max(self.concurrency, math.ceil(self._pace * waits)))
        self.wake_room = max(1, min(self.batch, self.concurrency) // 2, self.ahead // 4)

    def room(self, holding: int, taking: int) -> int:
        """How many due tasks a claim may take now: the free slots plus the queue (`ahead`), less the
        runs in flight that hold a slot (`holding`) and what the claims running may take (`taking`)."""
        return self.concurrency + self.ahead - holding - taking

    def measure(self, seconds: float, sent_now: int, held_now: float) -> None:
        """Smooth the claim's duration (`seconds`) and the pace (for room), given Firer.sent and
        Firer.slot_seconds now (`sent_now`, `held_now`).

        The pace is what the slots sustain when kept busy (Little's law: --concurrency over the mean
        time an attempt holds its slot), not the rate runs finished: a starved engine would measure
        its own starvation and keep its queue short."""
        self._claim_seconds = 0.7 * self._claim_seconds + 0.3 * seconds if self._claim_seconds else seconds
        sent, held = self._paced_at
        if sent_now - sent >= 20:
            pace = self.concurrency * (sent_now - sent) / max(held_now - held, 1e-6)
            self._pace = pace if not self._pace else 0.5 * self._pace + 0.5 * pace
            self._paced_at = (sent_now, held_now)
        self.size()

    def may_claim(self, limit: int, claims: int, more_due: bool) -> bool:
        """Whether to start a claim of `limit` now: some room, and if a claim is already running,
        room for a good part of a claim (`wake_room`) and fewer than CLAIMS_AT_ONCE running."""
        if limit <= 0 or (claims and not more_due):
            return False
        return not claims or (limit >= self.wake_room and claims < CLAIMS_AT_ONCE)
