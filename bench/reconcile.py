"""plan and apply for 100, 1,000 and 10,000 task files against the embedded PostgreSQL.

For each size: load only, first apply, no-op re-plan (load + plan), and plan/apply with 1 %
of files changed. The no-op plan is compared with just loading the same files (target: at
most 2×); both are best of three.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg import sql

from bench.common import task_text, write_results, write_tasks
from reconciler.apply import apply_tasks, read_plan
from reconciler.cli import tune_gc
from reconciler.embedded import embedded_dsn
from reconciler.loader import load_dir
from reconciler.store import Store

SIZES = (100, 1_000, 10_000)
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def fresh_database(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(admin)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})


def timed(func):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = func()
    return value, time.perf_counter() - start


async def measure(dsn: str, root: Path, size: int) -> dict[str, float]:
    write_tasks(root, size)
    loaded, load_s = timed(lambda: load_dir(root))
    assert not loaded.errors
    async with Store(dsn) as store:
        await store.init_schema()
        start = time.perf_counter()
        first = await apply_tasks(store, loaded.tasks, "default", NOW)
        first_s = time.perf_counter() - start
        assert first.written == size
        # Best of three, alternating with bare loads, so heap growth and GC hit both alike.
        noop_s = float("inf")
        for _ in range(3):
            load_s = min(load_s, timed(lambda: load_dir(root))[1])
            start = time.perf_counter()
            again = load_dir(root)
            noop = await read_plan(store, again.tasks, "default", NOW)
            noop_s = min(noop_s, time.perf_counter() - start)
            assert not noop.has_changes
        changed = max(1, size // 100)
        for index in range(changed):
            (root / f"team{index // 100:03d}" / f"task{index:05d}.toml").write_text(task_text(index, variant=7))
        start = time.perf_counter()
        edited = load_dir(root)
        plan = await read_plan(store, edited.tasks, "default", NOW)
        plan_changed_s = time.perf_counter() - start
        start = time.perf_counter()
        result = await apply_tasks(store, edited.tasks, "default", NOW)
        apply_changed_s = time.perf_counter() - start
        assert result.written == changed == plan.summary["update"], plan.summary
    return {
        "files": size,
        "load_s": round(load_s, 4),
        "first_apply_s": round(first_s, 4),
        "noop_plan_s": round(noop_s, 4),
        "noop_plan_vs_load": round(noop_s / load_s, 2),
        "plan_1pct_changed_s": round(plan_changed_s, 4),
        "apply_1pct_changed_s": round(apply_changed_s, 4),
    }


def main() -> None:
    tune_gc()  # as the CLI does
    admin = embedded_dsn(Path(tempfile.gettempdir()) / "reconciler-bench-pg")
    rows = []
    for size in SIZES:
        dsn = fresh_database(admin, f"reconciler_bench_{size}")
        with tempfile.TemporaryDirectory() as tmp:
            row = asyncio.run(measure(dsn, Path(tmp) / "tasks.d", size))
        rows.append(row)
        print(
            f"{size:>6} files: load {row['load_s']:.3f}s  first apply {row['first_apply_s']:.3f}s  "
            f"no-op plan {row['noop_plan_s']:.3f}s ({row['noop_plan_vs_load']:.2f}× load)  "
            f"1% changed: plan {row['plan_1pct_changed_s']:.3f}s apply {row['apply_1pct_changed_s']:.3f}s"
        )
    print(f"wrote {write_results('reconcile', {'now': NOW.isoformat(), 'sizes': rows})}")


if __name__ == "__main__":
    main()
