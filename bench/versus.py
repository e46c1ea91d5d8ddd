"""One engine's fires/s now against a baseline revision's, in one run: `python -m bench.versus [REVISION]`.

bench.engine's (a) scenario (1 engine, 10,000 due one-shot tasks, one local sink) alternates ROUNDS times between
an engine process of the current tree and one of REVISION (default BASELINE: the commit before the house's
step 2), checked out into a temporary folder and put first on the engine's PYTHONPATH. The harness (files,
apply, sink, measuring) is the current tree's for both, so only the engine differs. The medians and their ratio
are printed and written to bench/results/versus.json; a ratio within the rounds' spread is "the same".

`python -m bench.versus REVISION --traced` adds a third side, alternated with the two: the current engine with the
OTEL_* variables set (OpenTelemetry exporting a span per run and per attempt over OTLP/HTTP to the sink, as
bench.engine's (h)); written to bench/results/versus-tracing.json.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import write_results
from bench.engine import BATCH, CONCURRENCY, TASKS, free_port, load_average, once_soon, scenario, traced
from bench.reconcile import fresh_database
from reconciler.cli.parser import tune_gc
from reconciler.db.embedded import embedded_dsn

BASELINE = "0bc7f08"
ROUNDS = 5
ROOT = Path(__file__).resolve().parents[1]


def checkout(revision: str, into: Path) -> Path:
    """The package of `revision`, unpacked into `into` (git archive: no work tree of ours is touched)."""
    into.mkdir(parents=True, exist_ok=True)
    files = ["reconciler", "schemata.toml"]  # the package reads schemata.toml through a symlink to the root one
    archive = subprocess.run(["git", "archive", revision, *files], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def one_round(
    dsn: str, url: str, workdir: Path, name: str, tree: Path | None, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The 1-engine scenario with the engine of `tree` (None: the current one). The engine starts in `workdir`:
    `python -m` puts its working directory first on the path, and the repository's would shadow `tree`."""
    saved, here = os.environ.get("PYTHONPATH"), Path.cwd()
    if tree is not None:
        os.environ["PYTHONPATH"] = str(tree)
    os.chdir(workdir)
    try:
        args = ("--concurrency", str(CONCURRENCY), "--batch", str(BATCH))
        return scenario(dsn, url, workdir, name, 1, TASKS, once_soon, *args, extra_env=extra_env)
    finally:
        os.chdir(here)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def package_of(tree: Path | None, workdir: Path) -> str:
    """Where an engine started as one_round starts it imports `reconciler` from."""
    env = {**os.environ, **({"PYTHONPATH": str(tree)} if tree is not None else {})}
    probe = [sys.executable, "-c", "import reconciler; print(reconciler.__file__)"]
    return subprocess.run(probe, cwd=workdir, env=env, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    tune_gc()
    arguments = [arg for arg in sys.argv[1:] if arg != "--traced"]
    tracing = "--traced" in sys.argv[1:]
    revision = arguments[0] if arguments else BASELINE
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    sink = subprocess.Popen([sys.executable, "-m", "bench.sink", str(free_port())], stdout=subprocess.PIPE, text=True)
    assert sink.stdout is not None
    url = sink.stdout.readline().strip()
    load_before = load_average()
    rates: dict[str, list[float]] = {"baseline": [], "now": [], **({"traced": []} if tracing else {})}
    cpu: dict[str, list[float]] = {side: [] for side in rates}  # the engine's CPU ms per fire
    postgres: dict[str, list[float]] = {side: [] for side in rates}  # PostgreSQL's, in the same window
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tree = checkout(revision, Path(tmp) / "baseline")
            sides = {"baseline": package_of(tree, Path(tmp)), "now": package_of(None, Path(tmp))}
            assert sides["baseline"].startswith(str(tree)) and sides["now"].startswith(str(ROOT)), sides
            print(f"engines import: {sides}", flush=True)
            for index in range(ROUNDS):
                # Every other round in the reverse order: no side always follows another's writes.
                for side in list(rates)[:: 1 if index % 2 == 0 else -1]:
                    dsn = fresh_database(admin, f"reconciler_bench_versus_{side}_{index}")
                    path, extra = (tree if side == "baseline" else None), (traced(url) if side == "traced" else None)
                    row = one_round(dsn, url, Path(tmp), f"{side}-{index}", path, extra)
                    rates[side].append(row["fires_per_second"])
                    cpu[side].append(row["engine_cpu_ms_per_fire"])
                    postgres[side].append(row["neighbours_cpu_ms_per_fire"]["postgres"])
                    print(
                        f"round {index + 1}: {side} {row['fires_per_second']} fires/s, CPU ms/fire: engine "
                        f"{row['engine_cpu_ms_per_fire']}, PostgreSQL {postgres[side][-1]}",
                        flush=True,
                    )
    finally:
        sink.kill()
    medians = {side: statistics.median(values) for side, values in rates.items()}
    spread = {side: round((max(v) - min(v)) / statistics.median(v), 3) for side, v in rates.items()}
    ratio = round(medians["now"] / medians["baseline"], 3)
    print(
        f"1 engine, {TASKS} tasks: now {medians['now']} fires/s, {revision} {medians['baseline']} fires/s: "
        f"ratio {ratio} (medians of {ROUNDS} alternated rounds; spread of the rounds: {spread})"
    )
    results: dict[str, Any] = {
        "baseline_revision": revision,
        "rounds": rates,
        "medians": medians,
        "ratio": ratio,
        "spread": spread,
        "engine_cpu_ms_per_fire": {side: statistics.median(values) for side, values in cpu.items()},
        "postgres_cpu_ms_per_fire": {side: statistics.median(values) for side, values in postgres.items()},
        "cpu_rounds": {"engine": cpu, "postgres": postgres},
    }
    print(
        f"CPU ms per fire (medians): engine {results['engine_cpu_ms_per_fire']}, PostgreSQL "
        f"{results['postgres_cpu_ms_per_fire']}"
    )
    if tracing:
        results["traced_vs_now"] = round(medians["traced"] / medians["now"], 3)
        results["traced_vs_baseline"] = round(medians["traced"] / medians["baseline"], 3)
        print(
            f"tracing on: {medians['traced']} fires/s: {results['traced_vs_now']} of now with tracing off, "
            f"{results['traced_vs_baseline']} of {revision}"
        )
    load = {"load_average_before": load_before, "load_average_after": load_average()}
    print(f"load average {load_before} → {load['load_average_after']}")
    print(f"wrote {write_results('versus-tracing' if tracing else 'versus', {**load, **results})}")


if __name__ == "__main__":
    main()
