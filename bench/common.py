"""Helpers shared by the benchmark scripts: timing, results files, generated task files."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def best_of(func: Callable[[], object], repeat: int = 3) -> float:
    """The fastest wall time of `repeat` runs of `func`, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def write_results(name: str, data: dict[str, Any]) -> Path:
    """Write `bench/results/NAME.json` with the machine's description added."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()}, **data}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


KINDS = [
    ('[trigger]\nkind = "cron"\nexpr = "{m} {h} * * 1-5"\n', "Europe/Berlin"),
    ('[trigger]\nkind = "interval"\nevery = "{m}m"\n', "UTC"),
    (
        '[trigger]\nkind = "calendar"\nunit = "days"\nevery = 1\nat = "{h:02d}:{m:02d}"\nstart_at = 2026-01-01\n',
        "America/New_York",
    ),
    ('[trigger]\nkind = "once"\nat = 2027-01-01T{h:02d}:{m:02d}:00\n', "Asia/Kolkata"),
]


def task_text(index: int, url: str = "http://127.0.0.1:9/hook", variant: int = 0) -> str:
    """A realistic task file; `variant` changes its schedule (for 'changed' runs)."""
    trigger, zone = KINDS[index % len(KINDS)]
    minute, hour = (index + variant) % 59 + 1, (index // 60) % 24
    return (
        f'description = "generated task {index}"\ntimezone = "{zone}"\nlabels = {{ team = "t{index % 7}" }}\n\n'
        + trigger.format(m=minute, h=hour)
        + f'\n[target]\nurl = "{url}/{index}"\n'
        + f'headers = {{ X-Key = {{ env = "BENCH_KEY" }} }}\njson = {{ n = {index} }}\n'
    )


def write_tasks(root: Path, count: int, url: str = "http://127.0.0.1:9/hook") -> None:
    """Generate `count` task files below `root` (100 per directory)."""
    for index in range(count):
        folder = root / f"team{index // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"task{index:05d}.toml").write_text(task_text(index, url))
