"""Microseconds per next_fire_time per trigger kind; the cost of calendars (a business-days calendar and two
blackout windows) against the same cron without them, in one run; files/second loading 10,000 files vs bare
tomllib."""

from __future__ import annotations

import tempfile
import time
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import best_of, write_results, write_tasks
from reconciler.cli.parser import tune_gc
from reconciler.files.calendars import Calendar
from reconciler.files.scan import discover
from reconciler.files.tasks import load_dir
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.calendar import BlackoutCalendar, BusinessDaysCalendar
from reconciler.spec.task import TaskSpec

TRIGGERS = {
    "cron (Europe/Berlin, 30 2 * * 1-5)": ("Europe/Berlin", {"kind": "cron", "expr": "30 2 * * 1-5"}),
    "cron (UTC, */5 * * * *)": ("UTC", {"kind": "cron", "expr": "*/5 * * * *"}),
    "interval (15m)": ("UTC", {"kind": "interval", "every": "15m"}),
    "calendar (monthly 09:30, America/New_York)": (
        "America/New_York",
        {"kind": "calendar", "unit": "months", "at": "09:30", "start_at": "2026-01-31"},
    ),
    "once": ("UTC", {"kind": "once", "at": "2030-01-01T00:00:00Z"}),
}
CALLS = 5_000
FILES = 10_000
NEW_YORK_WEEKDAYS: dict[str, Any] = {"kind": "cron", "expr": "0 9 * * 1-5"}
BUSINESS: dict[str, Any] = {**NEW_YORK_WEEKDAYS, "business_days": "us", "on_non_business_day": "next"}
BLACKOUTS: dict[str, Any] = {"blackouts": ["freeze"], "on_blackout": "defer"}
WITH_CALENDARS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "cron (America/New_York, 0 9 * * 1-5), no calendars": (NEW_YORK_WEEKDAYS, {}),
    "… business days of US-NY (on_non_business_day = next)": (BUSINESS, {}),
    "… and two blackout windows (defer)": (BUSINESS, BLACKOUTS),
    "business_day (day = -1, 17:00)": ({"kind": "business_day", "business_days": "us", "day": -1, "at": "17:00"}, {}),
}


def calendars() -> dict[str, dict[str, Any]]:
    """A business-days calendar of US-NY, resolved as apply does, and a blackout calendar of two windows: a
    weekend freeze (a cron and a duration) and a year-end freeze (a fixed range)."""
    us = {"kind": "business_days", "holidays": {"country": "US", "subdivision": "NY"}}
    business = BusinessDaysCalendar.model_validate(us)
    freeze = {
        "kind": "blackout",
        "timezone": "America/New_York",
        "window": [
            {"cron": "0 22 * * 5", "duration": "56h"},
            {"from": "2026-12-20T00:00:00", "until": "2027-01-04T00:00:00"},
        ],
    }
    return {
        "us": Calendar("us", "us.toml", business, year=2026).normalized,
        "freeze": Calendar("freeze", "freeze.toml", BlackoutCalendar.model_validate(freeze), year=2026).normalized,
    }


def per_call_us(
    zone: str, trigger: dict[str, Any], policy: dict[str, Any] | None = None, bound: dict[str, Any] | None = None
) -> float:
    spec = TaskSpec.model_validate(
        {"timezone": zone, "trigger": trigger, "target": {"url": "http://127.0.0.1:9/"}, "policy": policy or {}}
    )
    schedule = compile_schedule(spec, bound)
    # Spread `after` over two years so DST transition days are included in proportion.
    start = datetime(2026, 1, 1, tzinfo=UTC)
    afters = [start + timedelta(minutes=211 * i) for i in range(CALLS)]

    def run() -> None:
        for after in afters:
            schedule.next_fire_time(after)

    return best_of(run) / CALLS * 1e6


def main() -> None:
    tune_gc()  # as the CLI does
    results: dict[str, object] = {"next_fire_time_us": {}}
    for name, (zone, trigger) in TRIGGERS.items():
        micros = per_call_us(zone, trigger)
        results["next_fire_time_us"][name] = round(micros, 2)  # type: ignore[index]
        print(f"next_fire_time  {name:45s} {micros:8.1f} µs/call")
    bound = calendars()
    costs: dict[str, float] = {}
    for name, (trigger, policy) in WITH_CALENDARS.items():
        costs[name] = per_call_us("America/New_York", trigger, policy, bound)
        print(f"next_fire_time  {name:56s} {costs[name]:8.1f} µs/call")
    base, full = costs[next(iter(WITH_CALENDARS))], costs["… and two blackout windows (defer)"]
    results["calendars_us"] = {name: round(micros, 2) for name, micros in costs.items()}
    results["calendars_ratio"] = round(full / base, 2)
    print(f"business days and two blackout windows cost {full / base:.2f}× the same cron without them")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tasks.d"
        write_tasks(root, FILES)
        paths = discover(root)
        bare = best_of(lambda: [tomllib.loads(p.read_text()) for p in paths], repeat=2)
        start = time.perf_counter()
        result = load_dir(root)
        loaded = time.perf_counter() - start
        assert not result.errors and len(result.tasks) == FILES, result.errors[:3]
    results["load_files"] = {
        "files": FILES,
        "reconciler_files_per_second": round(FILES / loaded),
        "bare_tomllib_files_per_second": round(FILES / bare),
        "ratio_vs_tomllib": round(loaded / bare, 2),
    }
    print(
        f"load {FILES} files: reconciler {FILES / loaded:,.0f} files/s, bare tomllib.loads {FILES / bare:,.0f} files/s "
        f"({loaded / bare:.1f}× the parse-only time)"
    )
    print(f"wrote {write_results('triggers', results)}")


if __name__ == "__main__":
    main()
