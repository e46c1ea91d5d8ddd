"""Work one engine does for the whole fleet, led through a lease row in scheduler.leader.

A lease is taken by an UPSERT when it is free or expired, and renewed by its holder, one
statement each time (see the leader_take query): no session state, so it works through
PgBouncer in transaction mode, where a session advisory lock would be held by whichever client
last used the server connection. Expiry is judged by the database's clock alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

from reconciler.db import queries
from reconciler.db.store import Store

LEASE_SECONDS = 30.0  # a lease not renewed for this long goes to the next engine that asks


class Lease:
    """Whether engine `engine_id` leads the work `name`: ask with renew() at least every
    `seconds`; `held` answers from the last renewal without a round trip."""

    def __init__(self, store: Store, name: str, engine_id: str, seconds: float = LEASE_SECONDS) -> None:
        self.store, self.name, self.engine_id, self.seconds = store, name, engine_id, seconds
        self._until = -math.inf  # time.monotonic() until which the last renewal holds

    @property
    def held(self) -> bool:
        return time.monotonic() < self._until

    async def renew(self) -> bool:
        """Take or renew the lease; True while this engine holds it. A database fault propagates
        and leaves `held` to run out: nobody else can take the lease before it does."""
        # Counted from before the statement: the database's expiry, from its now() during the
        # statement, comes later, so this engine stops believing it leads before another may.
        asked = time.monotonic()
        async with self.store.connection() as conn:
            taken = await queries.leader_take(conn, name=self.name, engine_id=self.engine_id, seconds=self.seconds)
        self._until = asked + self.seconds if taken else -math.inf
        return bool(taken)


def leader_only(
    store: Store, engine_id: str, name: str, work: Callable[[], Awaitable[object]], seconds: float = LEASE_SECONDS
) -> Callable[[], Awaitable[object]]:
    """`work` made to run only on the engine that holds (or takes) the lease `name`; for a loop that
    calls it more often than every `seconds`."""
    lease = Lease(store, name, engine_id, seconds)

    async def led() -> object:
        return await work() if await lease.renew() else None

    return led
