"""CLI start-up: median wall times of `--version`, `--help` and `validate`, beside `python -c pass`."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import write_results, write_tasks

RUNS = 10
TASKS = 5
VERSION_GOAL_SECONDS = 0.3  # issue 13: the median of `reconciler --version`
BASELINE = "python -c pass"


def console_script() -> str:
    """The installed `reconciler` script of this interpreter's environment (what a user runs)."""
    found = shutil.which("reconciler", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit(f"no `reconciler` script next to {sys.executable}; install the project (pip install -e .)")
    return found


def commands(script: str) -> dict[str, list[str]]:
    """Each measured command line, by the name it is reported under."""
    return {
        BASELINE: [sys.executable, "-c", "pass"],
        "python -m reconciler --version": [sys.executable, "-m", "reconciler", "--version"],
        "reconciler --version": [script, "--version"],
        "reconciler --help": [script, "--help"],
        f"reconciler validate ({TASKS} files)": [script, "validate"],
    }


def with_bytecode(pycache: Path) -> dict[str, str]:
    """This environment, with compiled modules cached in `pycache`.

    An installed reconciler has its .pyc files; a checkout run with PYTHONDONTWRITEBYTECODE
    (as CI and these sessions are) compiles every module of the project at every start.
    """
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(pycache)}


def medians(argvs: dict[str, list[str]], cwd: Path, env: dict[str, str]) -> dict[str, float]:
    """Median seconds of RUNS runs of each command, a new process every time, after one unmeasured round.

    The commands take turns run by run, so a burst of load from another process on this shared
    machine lands on all of them rather than on whichever happened to be running.
    """
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(RUNS + 1):
        for name, argv in argvs.items():
            start = time.perf_counter()
            subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(seconds[1:]) for name, seconds in times.items()}  # the first round compiled


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        write_tasks(Path(tmp) / "tasks.d", TASKS)
        found = medians(commands(console_script()), Path(tmp), with_bytecode(Path(tmp) / "pycache"))
    baseline = found[BASELINE]
    for name, seconds in found.items():
        print(f"{name:36s} {seconds * 1000:7.1f} ms  {seconds / baseline:5.1f}× {BASELINE}")
    version = found["reconciler --version"]
    verdict = "met" if version <= VERSION_GOAL_SECONDS else "NOT met"
    load = os.getloadavg()
    print(f"goal: reconciler --version ≤ {VERSION_GOAL_SECONDS} s: {verdict}; load average {load[0]:.2f}")
    results = {
        "runs": RUNS,
        "load_average": [round(value, 2) for value in load],
        "median_seconds": {name: round(seconds, 4) for name, seconds in found.items()},
        "ratio_vs_python": {name: round(seconds / baseline, 2) for name, seconds in found.items()},
        "version_goal_seconds": VERSION_GOAL_SECONDS,
        "version_goal_met": version <= VERSION_GOAL_SECONDS,
    }
    print(f"wrote {write_results('startup', results)}")


if __name__ == "__main__":
    main()
