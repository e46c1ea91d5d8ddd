"""plan and apply for 100, 1,000 and 10,000 task files against the embedded PostgreSQL.

For each size, in one run: loading every file (load_dir, what `validate` does); the first apply
into an empty database, both alone (apply_tasks on loaded tasks) and as `reconciler apply` runs
it (load_files, which parses every file when no row is there, then apply_tasks); the no-op plan
as `reconciler plan` makes it (load_files parses no unchanged file, then read_plan); and plan
and apply with 1 % of the files changed. Ratios are to the load time of the same run; issue 13
asks, at 10,000 files, for a no-op plan ≤ 0.5× and a first apply ≤ 1.5× the load. Times are the
best of three (each first apply into a database of its own).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import psycopg
from psycopg import sql

from bench.common import task_text, write_results, write_tasks
from reconciler.cli.parser import tune_gc
from reconciler.db.embedded import embedded_dsn
from reconciler.db.store import Store
from reconciler.files.tasks import load_dir
from reconciler.output.plan_text import plan_text
from reconciler.reconcile.apply import apply_tasks, load_files, read_plan

SIZES = (100, 1_000, 10_000)
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
REPEAT = 3
NOOP_TARGET, FIRST_APPLY_TARGET = 0.5, 1.5
T = TypeVar("T")


def database_dsn(admin: str, name: str) -> str:
    """The DSN of database `name` on the server of `admin`."""
    params = psycopg.conninfo.conninfo_to_dict(admin)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})


def fresh_database(admin: str, name: str) -> str:
    """An empty database `name` (dropped first if there), by its DSN."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_dsn(admin, name)


def bench_database(name: str) -> str:
    """A fresh database `name` with the scheduler schema, on the benches' embedded server."""
    dsn = fresh_database(embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg"), name)

    async def init() -> None:
        async with Store(dsn) as store:
            await store.init_schema()

    asyncio.run(init())
    return dsn


def timed(func: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    value = func()
    return value, time.perf_counter() - start


async def first_apply(dsn: str, root: Path, size: int) -> dict[str, float]:
    """One first apply into the empty database `dsn`: its load_files, its apply_tasks, and printing its plan."""
    async with Store(dsn) as store:
        await store.init_schema()
        start = time.perf_counter()
        loaded = await load_files(store, root)
        parsed = time.perf_counter()
        result = await apply_tasks(store, loaded.tasks, "default", NOW)
        done = time.perf_counter()
        assert result.written == size and not loaded.errors
        # The creates' previews (next fire times, schedule in words) are made when shown, after the commit.
        render_s = timed(lambda: plan_text(result.plan))[1]
    return {"load_files": parsed - start, "apply": done - parsed, "total": done - start, "render": render_s}


async def noop_plan(store: Store, root: Path, size: int) -> float:
    """`reconciler plan` against a database that has every file: no file is parsed."""
    start = time.perf_counter()
    loaded = await load_files(store, root)
    plan = await read_plan(store, loaded.tasks, "default", NOW)
    seconds = time.perf_counter() - start
    assert not plan.has_changes and sum(task.stored is not None for task in loaded.tasks) == size
    return seconds


async def after_first(dsn: str, root: Path, size: int, load_s: float) -> dict[str, float]:
    """The no-op plan (best of three, alternating with bare loads so heap growth and GC hit both
    alike), then plan and apply with 1 % of the files changed; `load_s` comes back as the best load."""
    async with Store(dsn) as store:
        noop_s = float("inf")
        for _ in range(REPEAT):
            load_s = min(load_s, timed(lambda: load_dir(root))[1])
            noop_s = min(noop_s, await noop_plan(store, root, size))
        changed = max(1, size // 100)
        for index in range(changed):
            (root / f"team{index // 100:03d}" / f"task{index:05d}.toml").write_text(task_text(index, variant=7))
        start = time.perf_counter()
        edited = await load_files(store, root)
        plan = await read_plan(store, edited.tasks, "default", NOW)
        plan_changed_s = time.perf_counter() - start
        start = time.perf_counter()
        edited = await load_files(store, root)
        result = await apply_tasks(store, edited.tasks, "default", NOW)
        apply_changed_s = time.perf_counter() - start
        assert result.written == changed == plan.summary["update"], plan.summary
    return {"load": load_s, "noop": noop_s, "plan_changed": plan_changed_s, "apply_changed": apply_changed_s}


def measure(admin: str, root: Path, size: int) -> dict[str, float]:
    write_tasks(root, size)
    loaded, load_s = timed(lambda: load_dir(root))
    assert not loaded.errors
    del loaded
    name = f"reconciler_bench_{size}"
    firsts = []
    for _ in range(REPEAT):
        load_s = min(load_s, timed(lambda: load_dir(root))[1])
        firsts.append(asyncio.run(first_apply(fresh_database(admin, name), root, size)))
    first = {key: min(run[key] for run in firsts) for key in firsts[0]}
    rest = asyncio.run(after_first(database_dsn(admin, name), root, size, load_s))  # the last first apply's
    load_s = rest["load"]
    return {
        "files": size,
        "load_s": round(load_s, 4),
        "noop_plan_s": round(rest["noop"], 4),
        "noop_plan_vs_load": round(rest["noop"] / load_s, 3),
        "first_apply_s": round(first["apply"], 4),
        "first_apply_vs_load": round(first["apply"] / load_s, 3),
        "first_apply_load_files_s": round(first["load_files"], 4),
        "first_apply_total_s": round(first["total"], 4),
        "first_apply_total_vs_load": round(first["total"] / load_s, 3),
        "first_apply_plan_text_s": round(first["render"], 4),
        "plan_1pct_changed_s": round(rest["plan_changed"], 4),
        "apply_1pct_changed_s": round(rest["apply_changed"], 4),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    tune_gc()  # as the CLI does
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    before = load_average()
    print(f"load average {before} (2 cores shared: compare ratios, measured in the same run)")
    rows = []
    for size in SIZES:
        with tempfile.TemporaryDirectory() as tmp:
            row = measure(admin, Path(tmp) / "tasks.d", size)
        rows.append(row)
        print(
            f"{size:>6} files: load {row['load_s']:.3f}s  "
            f"no-op plan {row['noop_plan_s']:.3f}s ({row['noop_plan_vs_load']:.2f}× load)  "
            f"first apply {row['first_apply_s']:.3f}s ({row['first_apply_vs_load']:.2f}× load; "
            f"with load_files {row['first_apply_total_s']:.3f}s, {row['first_apply_total_vs_load']:.2f}×; "
            f"its plan as text {row['first_apply_plan_text_s']:.3f}s)  "
            f"1% changed: plan {row['plan_1pct_changed_s']:.3f}s apply {row['apply_1pct_changed_s']:.3f}s"
        )
    top = rows[-1]
    print(
        f"at {top['files']} files: no-op plan {top['noop_plan_vs_load']:.2f}× load (target ≤ {NOOP_TARGET}), "
        f"first apply {top['first_apply_vs_load']:.2f}× load (target ≤ {FIRST_APPLY_TARGET})"
    )
    results = {"now": NOW.isoformat(), "load_average_before": before, "load_average_after": load_average()}
    print(f"wrote {write_results('reconcile', {**results, 'sizes': rows})}")


if __name__ == "__main__":
    main()
