"""An engine's settings (`reconciler engine`'s options)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    engine_id: str
    batch: int = 100
    concurrency: int = 100
    max_sleep: float = 30.0
    drain_seconds: float = 30.0
    lease_margin: float = 30.0
    heartbeat_seconds: float = 10.0
    keep_runs_days: float | None = None  # global retention of finished runs; policy.keep_runs caps per task
    prune_seconds: float = 60.0  # how often serve() starts a pass over the run history (see prune_runs)
    prune_batch: int = 2000  # rows deleted per statement: short transactions, no long locks
    allow_env: tuple[str, ...] = ()  # globs of variables tasks may read; empty: all but the engine's own
    sources: tuple[str, ...] = ()  # claim only these sources' tasks (`engine --source`); empty: every source
    listen_dsn: str | None = None  # LISTEN's own connection (a direct one, past a pooler); None: the engine's DSN
    max_clock_offset: float = 5.0  # warn when this machine's clock is further than this off the database's
    # The address targets reach this fleet's engines at (`engine --public-url`): the base of a job's callback URL
    # (docs/jobs.md). None: a callback task's run fails, saying so.
    public_url: str | None = None
