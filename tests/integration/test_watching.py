"""watch_files (watch and up) in process: what it applies, and that stopping applies nothing more."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from reconciler.cli.options import FilesOptions, WatchOptions
from reconciler.cli.watch import apply_files, watch_files
from reconciler.db.store import Store
from tests.helpers import async_wait_until
from tests.integration.test_reconcile import applies

TASK = '[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "http://127.0.0.1:9/x"\n'


def options(root: Path) -> WatchOptions:
    files = FilesOptions.beside(str(root / "tasks.d"))
    return WatchOptions(files, prune=True, debounce_ms=50)


@pytest.mark.parametrize("with_notifiers", [False, True])
async def test_stopping_a_watch_applies_nothing_more(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], with_notifiers: bool
) -> None:
    """Two watchers (tasks.d and notifiers.d's parent) or one: each ending at the stop is no change."""
    (tmp_path / "tasks.d").mkdir()
    (tmp_path / "tasks.d" / "a.toml").write_text(TASK)
    if with_notifiers:
        (tmp_path / "notifiers.d").mkdir()
    stop = asyncio.Event()
    watching = asyncio.create_task(watch_files(store, options(tmp_path), stop))
    printed: list[str] = []

    def applied() -> bool:
        printed.extend(capsys.readouterr().out.splitlines())
        return any("Plan:" in line for line in printed)

    assert await async_wait_until(applied, 30)
    stop.set()
    await asyncio.wait_for(watching, 30)
    printed += capsys.readouterr().out.splitlines()
    assert [line for line in printed if "Plan:" in line] == [printed[0]], printed
    assert "Plan: 1 to create" in printed[0]


async def test_a_save_that_changes_nothing_records_no_apply(store: Store, dsn: str, tmp_path: Path) -> None:
    """watch and up apply on every save: only the saves that change something are in scheduler.applies."""
    (tmp_path / "tasks.d").mkdir()
    (tmp_path / "tasks.d" / "a.toml").write_text(TASK)
    await apply_files(store, options(tmp_path))
    await apply_files(store, options(tmp_path))
    assert applies(dsn) == 1
    (tmp_path / "notifiers.d").mkdir()
    (tmp_path / "notifiers.d" / "oncall.toml").write_text('kind = "webhook"\nurl = "http://127.0.0.1:9/n"\n')
    await apply_files(store, options(tmp_path))  # a notifier alone is a change, with its audit row
    await apply_files(store, options(tmp_path))
    assert applies(dsn) == 2
