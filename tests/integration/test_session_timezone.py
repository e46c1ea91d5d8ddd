"""A server whose TimeZone is not UTC (initdb takes the host's): the claim's arithmetic on the database's
`now()` and `next_run_at` holds across a fall-back night, because every timestamp comes back in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from reconciler.db.store import Store
from reconciler.engine.claim import Claimer
from tests.builders import cron
from tests.integration.engine_support import runs, setup

FALL_BACK = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)  # Europe/Berlin: 03:00 CEST becomes 02:00 CET


async def test_a_claim_in_a_berlin_session_on_a_fall_back_night_fires_the_latest(
    store: Store, dsn: str, tmp_path: Path
) -> None:
    first = FALL_BACK + timedelta(minutes=28)  # 02:28 CET, the second pass of that wall time
    await setup(store, tmp_path, {"m": cron("http://127.0.0.1:9/m", "* * * * *")}, now=first - timedelta(seconds=30))
    berlin = f"{dsn} options='-c TimeZone=Europe/Berlin'"
    async with Store(berlin) as session:
        async with session.connection() as conn:
            assert (await (await conn.execute("SHOW TimeZone")).fetchone())["TimeZone"] == "Europe/Berlin"
        report = await Claimer(session, "berlin", 10).claim(first + timedelta(minutes=2, milliseconds=500))
    assert [(r["scheduled_for"], r["status"]) for r in runs(dsn)] == [
        (first, "missed"),
        (first + timedelta(minutes=1), "missed"),
        (first + timedelta(minutes=2), "running"),
    ]
    assert report.fired == 1 and report.runs[0].scheduled_for.utcoffset() == timedelta(0)
