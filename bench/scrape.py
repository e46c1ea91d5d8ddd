"""What a scrape of `engine --metrics-addr` costs: its size, and the fire lag it adds.

In one run, one `reconciler engine --metrics-addr` process and one local sink (`bench/sink.py`),
everything on 127.0.0.1:

(a) FIRED one-shot tasks are fired, then /metrics is read: samples and bytes per scrape, the
    per-task samples, against the documented bound (docs/operations.md, "Series bound"): 10 L + E + 15 N + 160
    with L = min(TASK_SERIES_LIMIT, tasks), E engines, N notifiers (none here);
(b) beside those, TICKING tasks every second: the fire lag p99 with and without one scrape a
    second, in alternating rounds of ROUND_SECONDS, medians compared (the ratio).
`--quick` runs a reduced size (to check the script works). Results: bench/results/scrape.json.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.common import write_results
from bench.engine import (
    SINK,
    apply_dir,
    free_port,
    once_soon,
    percentile,
    sink_get,
    wait_for_arrivals,
    wait_for_engines,
    write_files,
)
from bench.reconcile import fresh_database
from reconciler.cli.parser import tune_gc
from reconciler.db.embedded import embedded_dsn
from reconciler.web.metrics import TASK_SERIES_LIMIT

FULL = {"fired": 20_000, "ticking": 100, "rounds": 4, "round_seconds": 20}
QUICK = {"fired": 500, "ticking": 20, "rounds": 1, "round_seconds": 6}
FIXED_SAMPLES = 160  # histograms, job callbacks, process, platform and build samples: a bound, not a count


def ticking_text(index: int, url: str) -> str:
    return f'[trigger]\nkind = "interval"\nseconds = 1\n[target]\nurl = "{url}/tick/{index}"\n'


def read_metrics(url: str) -> tuple[int, int, int, int]:
    """(samples, bytes, per-task samples, E engines) of one scrape."""
    body = SINK.get(f"{url}/metrics").text
    samples = per_task = engines = 0
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples += 1
            per_task += "task" in sample.labels
            engines += sample.name == "reconciler_engine_last_seen_timestamp_seconds"
    return samples, len(body.encode()), per_task, engines


def wait_for_health(url: str, fired: int) -> None:
    """Until the leader's per-task gauges and the runs counters cover the fired tasks (bounded)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        body = SINK.get(f"{url}/metrics").text
        if "reconciler_health_leader 1.0" in body and body.count("reconciler_task_failing{") >= min(
            fired, TASK_SERIES_LIMIT
        ):
            return
        time.sleep(0.5)
    raise RuntimeError("the per-task gauges did not appear within 120 s")


def lag_round(sink: str, metrics: str, seconds: int, scraping: bool) -> dict[str, Any]:
    """One round: `seconds` of ticking tasks, with one scrape a second or none; the sink's lags."""
    SINK.post(f"{sink}/_reset")
    started = time.monotonic()
    for tick in range(seconds):
        if scraping:
            SINK.get(f"{metrics}/metrics")
        time.sleep(max(0.0, started + tick + 1 - time.monotonic()))
    lags = sorted(sink_get(sink, "_stats")["lags"])
    return {"scraping": scraping, "fires": len(lags), "p99_s": round(percentile(lags, 0.99), 4) if lags else None}


def measure(dsn: str, sink: str, workdir: Path, size: dict[str, int]) -> dict[str, Any]:
    metrics = f"127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "reconciler", "engine", "--max-sleep", "1", "--metrics-addr", metrics]
    root = workdir / "tasks"
    results: dict[str, Any] = {"size": size}
    with (workdir / "engine.log").open("w") as log_file:
        env = {**os.environ, "RECONCILER_DSN": dsn}
        engine = subprocess.Popen([*command, "--engine-id", "scrape-0"], env=env, stdout=log_file, stderr=log_file)
        try:
            wait_for_engines(dsn, 1)
            text, at = once_soon(size["fired"])
            write_files(root / "fired", size["fired"], sink, text)
            asyncio.run(apply_dir(dsn, root))
            time.sleep(max(0.0, (at - at.now(at.tzinfo)).total_seconds()))
            wait_for_arrivals(sink, size["fired"])
            wait_for_health(f"http://{metrics}", size["fired"])
            samples, size_bytes, per_task, engines = read_metrics(f"http://{metrics}")
            limit = min(TASK_SERIES_LIMIT, size["fired"])
            bound = 10 * limit + engines + FIXED_SAMPLES
            results["scrape"] = {
                "fired_tasks": size["fired"],
                "samples": samples,
                "bytes": size_bytes,
                "per_task_samples": per_task,
                "bound_samples": bound,
                "within_bound": samples <= bound,
                "samples_per_bound": round(samples / bound, 3),
            }
            print(
                f"(a) {size['fired']:,} fired tasks: {samples:,} samples, {size_bytes / 1e6:.2f} MB a scrape "
                f"({per_task:,} per task); bound 10 L + E + 160 = {bound:,}: {samples / bound:.2f} of it"
            )
            write_files(root / "ticking", size["ticking"], sink, ticking_text)
            asyncio.run(apply_dir(dsn, root))  # the fired tasks stay: their series are what a scrape carries
            time.sleep(2)  # the first ticks' catch-up is not a round's
            rounds = [
                lag_round(sink, f"http://{metrics}", size["round_seconds"], scraping)
                for _ in range(size["rounds"])
                for scraping in (False, True)
            ]
        finally:
            engine.send_signal(signal.SIGTERM)
            engine.wait(timeout=60)
    quiet = [r["p99_s"] for r in rounds if not r["scraping"] and r["p99_s"] is not None]
    scraped = [r["p99_s"] for r in rounds if r["scraping"] and r["p99_s"] is not None]
    baseline, loaded = statistics.median(quiet), statistics.median(scraped)
    results["lag"] = {
        "rounds": rounds,
        "p99_without_scrapes_s": baseline,
        "p99_with_a_scrape_a_second_s": loaded,
        "ratio": round(loaded / baseline, 2) if baseline else None,
        "fires_without": statistics.median(r["fires"] for r in rounds if not r["scraping"]),
        "fires_with": statistics.median(r["fires"] for r in rounds if r["scraping"]),
    }
    lag = results["lag"]
    print(
        f"(b) {size['ticking']} 1-second tasks, fire lag p99: {baseline} s without scrapes, {loaded} s with one a "
        f"second ({lag['ratio']}x); fires a round {lag['fires_without']} / {lag['fires_with']}"
    )
    return results


def main() -> None:
    tune_gc()
    size = QUICK if "--quick" in sys.argv[1:] else FULL
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    sink_proc = subprocess.Popen(
        [sys.executable, "-m", "bench.sink", str(free_port())], stdout=subprocess.PIPE, text=True
    )
    assert sink_proc.stdout is not None
    sink = sink_proc.stdout.readline().strip()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results = measure(fresh_database(admin, "reconciler_bench_scrape"), sink, Path(tmp), size)
    finally:
        sink_proc.kill()
    print(f"wrote {write_results('scrape-quick' if size is QUICK else 'scrape', results)}")


if __name__ == "__main__":
    main()
