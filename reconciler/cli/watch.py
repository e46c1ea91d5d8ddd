"""`watch` (and `up`'s watcher): apply the declared files now, then after every (debounced) change to them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.cli.console import err
from reconciler.cli.declared import need_tasks_dir
from reconciler.cli.options import FilesOptions, WatchCommandOptions, WatchOptions
from reconciler.cli.runtime import stop_on_signals, with_store
from reconciler.clock import utcnow
from reconciler.errors import EXIT_OK, UserError

if TYPE_CHECKING:
    from reconciler.db.store import Store

Changes = AsyncGenerator[set[tuple[Any, str]], None]


def watch(options: WatchCommandOptions) -> int:
    """Apply the declared files now, then after every (debounced) change, until SIGTERM or Ctrl-C."""
    need_tasks_dir(options.watch.files)

    async def work(store: Store) -> int:
        # SIGINT/SIGTERM end the watch cleanly (exit 0, like `up` and `engine`); a KeyboardInterrupt
        # would leave the file watcher's thread running and the process waiting for it.
        await watch_files(store, options.watch, stop_on_signals())
        return EXIT_OK

    return with_store(options.database, work)


async def apply_files(store: Store, options: WatchOptions) -> None:
    """One apply of the declared files for watch/up: errors are reported and nothing is applied."""
    from reconciler.files.declared import load_declared
    from reconciler.operate.audit import Operator
    from reconciler.output.plan_lines import summary_line
    from reconciler.reconcile.apply import ApplyOptions, apply_tasks, load_files
    from reconciler.reconcile.revision import detect, working_tree

    stamp = utcnow().strftime("%H:%M:%S")
    files = options.files
    try:
        # Loading reads the database too (unchanged files are not parsed): a lost connection is reported alike.
        loaded = load_declared(files.dirs, await load_files(store, Path(files.tasks_dir), files.tasks_dir))
        if loaded.errors:
            for error in loaded.errors:
                err(str(error))
            err(f"[{stamp}] {len(loaded.errors)} error(s); nothing applied, still watching")
            return
        # No revision check, and uncommitted changes neither warn nor refuse: the working tree is what `watch`
        # and `up` are for (docs/gitops.md, "Revisions"). They are recorded as such (`<sha>-dirty`).
        dirty = working_tree(Path(files.tasks_dir), files.dirs.listed()).changed
        revision = detect(Path(files.tasks_dir), None, dirty=dirty)
        verdict = ApplyOptions(prune=options.prune, revision=revision, operator=Operator.resolve(options.actor, None))
        result = await apply_tasks(store, loaded.tasks, files.source, None, verdict, list(loaded.named.values()))
    except UserError as exc:
        err(f"[{stamp}] apply refused: {exc}; still watching")
        return
    print(f"[{stamp}] {summary_line(result.plan)}", flush=True)


def _present(files: FilesOptions) -> frozenset[Path]:
    return frozenset(path for path in files.dirs.listed() if path.is_dir())


def _watchers(options: WatchOptions, stop: asyncio.Event) -> tuple[list[Changes], frozenset[Path]]:
    """The file watchers of the declared directories there, and which are there. While one is not (an
    optional one: --tasks-dir must be), its parent is watched (not below) for it to appear; then the
    watchers are made anew."""
    from watchfiles import awatch

    common: dict[str, Any] = {"debounce": options.debounce_ms, "step": 50, "stop_event": stop}
    dirs = options.files.dirs.listed()
    present = _present(options.files)
    watchers = [awatch(*[str(path) for path in dirs if path in present], recursive=True, **common)]
    for missing in (path for path in dirs if path not in present):
        parent = missing.absolute().parent
        if parent.is_dir():

            def appears(_: Any, path: str, name: str = missing.name) -> bool:
                return Path(path).name == name

            watchers.append(awatch(parent, recursive=False, watch_filter=appears, **common))
    return watchers, present


async def watch_files(store: Store, options: WatchOptions, stop: asyncio.Event | None = None) -> None:
    """Apply now, then after every (debounced) change below a declared directory until `stop` is set."""
    stop = stop or asyncio.Event()
    while True:
        # The watchers of this round end when `ended` is set (never by cancelling one: a cancelled
        # watchfiles watcher sets its stop event, which is the engine's too under `up`).
        ended = asyncio.Event()
        relay = asyncio.ensure_future(_set_when(stop, ended))
        watchers, present = _watchers(options, ended)
        # Each watcher's first step creates it; let them run before the apply, so an edit made while
        # that apply runs is seen (it waits in the watcher) instead of lost.
        steps: dict[asyncio.Future[Any], Changes] = {asyncio.ensure_future(anext(w)): w for w in watchers}
        await asyncio.sleep(0)
        try:
            await apply_files(store, options)
            anew = await _apply_on_changes(store, options, steps, present)
        finally:
            ended.set()
            relay.cancel()
            await asyncio.gather(*steps, return_exceptions=True)
            for watcher in watchers:
                with contextlib.suppress(Exception):
                    await watcher.aclose()
        if not anew or stop.is_set():
            return
        if not Path(options.files.tasks_dir).is_dir():  # the directory was removed while watched
            err(f"{options.files.tasks_dir} is gone; no longer watching it (the database keeps what was applied)")
            return


async def _set_when(first: asyncio.Event, then: asyncio.Event) -> None:
    await first.wait()
    then.set()


async def _apply_on_changes(
    store: Store, options: WatchOptions, steps: dict[asyncio.Future[Any], Changes], present: frozenset[Path]
) -> bool:
    """Apply after each change any watcher reports; False once every watcher stopped (`stop`), True when
    the watchers must be made anew (a declared directory appeared or went, or a watched one is gone)."""
    while steps:
        done, _ = await asyncio.wait(steps, return_when=asyncio.FIRST_COMPLETED)
        anew = changed = False
        for step in done:
            watcher = steps.pop(step)
            try:
                step.result()
            except StopAsyncIteration:  # stopped
                continue
            except FileNotFoundError:
                anew = True
                continue
            except Exception as exc:
                if not _undecodable(exc):
                    raise
                anew = True  # that watcher ended; the next round applies, which reports the name
                continue
            changed = True
            steps[asyncio.ensure_future(anext(watcher))] = watcher
        if anew or _present(options.files) != present:
            return True
        if changed:
            await apply_files(store, options)
    return False


def _undecodable(exc: Exception) -> bool:
    """Whether a watcher failed on a changed path that is not UTF-8, which watchfiles cannot name (its
    error comes alone or, from its task group, in a group)."""
    found = exc.exceptions if isinstance(exc, ExceptionGroup) else (exc,)
    return any(isinstance(one, RuntimeError) and "decode path" in str(one) for one in found)
