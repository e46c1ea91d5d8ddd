"""The documented maxima of calendars at their worst (issue 49): 20 blackout calendars of 100 windows each, every
task naming all 20, the windows together blocking every minute, so that no task ever fires. `validate`, `plan`,
`apply` and `next` run as the command line runs them (`python -m reconciler`, one subprocess each, best of
REPEAT), on that project and, as the baseline of the same run, on the same tasks without the calendars.

Targets: validate, plan and apply at most 10 s each, `next` of an all-blocked task at most 2 s. The figures, their
ratios to the baseline and the load average go to bench/results/calendars.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import write_results
from bench.reconcile import bench_database

CALENDARS, WINDOWS, TASKS = 20, 100, 10  # the documented maxima: 20 calendars a task names, 100 windows each
REPEAT = 3
TARGETS = {"validate": 10.0, "plan": 10.0, "apply": 10.0, "next": 2.0}


def blocking_calendar(index: int, windows: int = WINDOWS) -> str:
    """A blackout calendar whose windows open daily at their own minute and hour for two hours: 100 of them (24
    hours named) hold every minute of the day, so a task that names the calendar never fires."""
    lines = ['kind = "blackout"', 'timezone = "UTC"']
    for window in range(windows):
        minute, hour = (index * windows + window) % 60, window % 24
        lines += ["", "[[window]]", f'cron = "{minute} {hour} * * *"', 'duration = "2h"']
    return "\n".join(lines) + "\n"


def task_file(index: int, blackouts: list[str]) -> str:
    """A task every minute, blocked by every calendar it names (none: the baseline)."""
    named = ", ".join(f'"{name}"' for name in blackouts)
    policy = f"\n[policy]\nblackouts = [{named}]\n" if blackouts else ""
    return (
        f'timezone = "UTC"\n[trigger]\nkind = "cron"\nexpr = "* * * * *"\n'
        f'[target]\nurl = "http://127.0.0.1:9/task{index}"\n{policy}'
    )


def write_project(root: Path, calendars: int = CALENDARS, tasks: int = TASKS, blocked: bool = True) -> Path:
    """The worst case under `root`: `calendars` all-blocking calendars and `tasks` tasks naming every one of them
    (`blocked` False: the same tasks, no calendars). Returns the tasks directory."""
    names = [f"freeze{index:02d}" for index in range(calendars)] if blocked else []
    (root / "calendars.d").mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(names):
        (root / "calendars.d" / f"{name}.toml").write_text(blocking_calendar(index))
    (root / "tasks.d").mkdir(parents=True, exist_ok=True)
    for index in range(tasks):
        (root / "tasks.d" / f"task{index:02d}.toml").write_text(task_file(index, names))
    return root / "tasks.d"


def timed_cli(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "reconciler", *args], env=env, capture_output=True, text=True)
    return time.perf_counter() - start, done


def measure(tasks_dir: Path, dsn: str) -> dict[str, float]:
    """The best of REPEAT wall times of each command on one project (apply: the first into an empty database,
    then no-op applies)."""
    env = {**os.environ, "NO_COLOR": "1"}
    common = ["--tasks-dir", str(tasks_dir), "--dsn", dsn]
    commands = {
        "validate": ["--tasks-dir", str(tasks_dir), "validate"],
        "apply": [*common, "apply", "--allow-dirty"],
        "plan": [*common, "plan", "--allow-dirty"],
        "next": ["--tasks-dir", str(tasks_dir), "next", "task00", "--after", "2026-09-03T00:00:00Z"],
    }
    found: dict[str, float] = {}
    for name, args in commands.items():
        times = []
        for _ in range(REPEAT):
            seconds, done = timed_cli(args, env)
            assert done.returncode == 0, f"{name}: {done.stderr[-2000:]}"
            times.append(seconds)
        found[name] = min(times)
    return found


def main() -> None:
    load = os.getloadavg()
    results: dict[str, object] = {"calendars": CALENDARS, "windows": WINDOWS, "tasks": TASKS, "targets_s": TARGETS}
    with tempfile.TemporaryDirectory() as tmp:
        base = measure(write_project(Path(tmp) / "base", blocked=False), bench_database("bench_calendars_base"))
        worst = measure(write_project(Path(tmp) / "worst"), bench_database("bench_calendars_worst"))
    results["baseline_s"] = {name: round(value, 3) for name, value in base.items()}
    results["worst_s"] = {name: round(value, 3) for name, value in worst.items()}
    results["ratio"] = {name: round(worst[name] / base[name], 2) for name in worst}
    results["within_target"] = {name: worst[name] <= TARGETS[name] for name in worst}
    results["load_average"] = [round(value, 2) for value in (*load, *os.getloadavg())]
    for name in worst:
        print(
            f"{name:9s} {CALENDARS} calendars × {WINDOWS} windows: {worst[name]:6.2f} s "
            f"(no calendars {base[name]:5.2f} s, {worst[name] / base[name]:4.1f}×; target ≤ {TARGETS[name]:g} s)"
        )
    print(f"load average before and after: {results['load_average']}")
    print(f"wrote {write_results('calendars', results)}")


if __name__ == "__main__":
    main()
