"""The builders every test shares, one of each: task files, the CLI (in this process or as
`python -m reconciler`), and engine subprocesses.

Task files: `task_text` is a task file's text, each argument TOML text for its table; `write_tasks`
writes files by task id into a tasks directory.

The CLI: `run_main` runs `main(argv)` in this process with stdout and stderr captured (`cli` puts
`--dsn` and `--tasks-dir` in front); `run_reconciler` runs `python -m reconciler` in a subprocess
with an environment free of the caller's RECONCILER_DSN / DATABASE_URL; `reconciler_argv` and
`clean_env` are its command line and environment, for tests that need a Popen of their own.

Engines: `start_engines` starts `reconciler engine` subprocesses, `wait_registered` waits until each
has registered, `stop` sends them SIGTERM. A schedule that subprocess engines must meet is set
relative to the moment they are all registered, never to when they were started: a loaded machine
may take seconds to start one. Their stderr goes to a file, so an unread pipe never blocks an engine.
An engine given `--metrics-addr 127.0.0.1:0` binds a port of the kernel's choosing; `listening_addr`
reads it back from the process's own listening socket (nothing is bound, closed and reused).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import psycopg

from reconciler.cli.parser import main
from tests.helpers import wait_until

# ---------------------------------------------------------------- task files

URL = "http://127.0.0.1:9/hook"
CRON = 'kind = "cron"\nexpr = "0 * * * *"'


def cron_trigger(expr: str) -> str:
    """A [trigger] table's text: a cron expression."""
    return f'kind = "cron"\nexpr = "{expr}"'


def interval_trigger(every: str) -> str:
    """A [trigger] table's text: an interval (`every = "1s"`)."""
    return f'kind = "interval"\nevery = "{every}"'


def task_text(top: str = "", *, trigger: str = CRON, target: str = "", policy: str = "", url: str = URL) -> str:
    """A task file; each argument is TOML text for its table (`top`: keys before the first table;
    `url` goes into [target]). Line 1 is `top`'s first line, or `[trigger]` without it."""
    parts = [top, "[trigger]", trigger, "[target]", f'url = "{url}"', target]
    if policy:
        parts += ["[policy]", policy]
    return "\n".join(part for part in parts if part) + "\n"


def cron(url: str = URL, expr: str = "*/5 * * * *", policy: str = "", target: str = "", top: str = "") -> str:
    """A cron task file (every five minutes by default) calling `url`."""
    return task_text(top, trigger=cron_trigger(expr), target=target, policy=policy, url=url)


def write_tasks(root: Path, files: Mapping[str, str | bytes], *, replace: bool = False) -> Path:
    """Each `id → text` as `root/ID.toml` (folders made; bytes written as they are); `replace`: every
    other .toml file under `root` is deleted first. Returns `root`."""
    root.mkdir(parents=True, exist_ok=True)
    if replace:
        for path in root.rglob("*.toml"):
            path.unlink()
    for task_id, text in files.items():
        path = root / f"{task_id}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
    return root


# ---------------------------------------------------------------- the CLI


def run_main(argv: Sequence[str]) -> tuple[int, str, str]:
    """`reconciler ARGV` in this process: (exit code, stdout, stderr); argparse's usage exit is its code."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
    assert "Traceback" not in out.getvalue() + err.getvalue(), err.getvalue()
    return code, out.getvalue(), err.getvalue()


def cli(dsn: str | None, tasks: Path | None, *args: str) -> tuple[int, str, str]:
    """`reconciler [--dsn DSN] [--tasks-dir TASKS] ARGS…` in this process: (exit code, stdout, stderr)."""
    return run_main([*(["--dsn", dsn] if dsn else []), *(["--tasks-dir", str(tasks)] if tasks else []), *args])


def validate_line(root: Path, text: str) -> tuple[str, str]:
    """`validate` of one task file `root/tasks.d/etl.toml` holding `text`, which must fail: (the one line naming the
    file, the whole stderr, never a traceback)."""
    (root / "tasks.d").mkdir()
    (root / "tasks.d" / "etl.toml").write_text(text)
    code, _out, err = cli(None, root / "tasks.d", "validate")
    assert code != 0 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if "etl.toml:" in line]
    return line, err


def unnamed_mistakes(stderr: str, folder: str, cases: Mapping[str, tuple[str, str]]) -> list[str]:
    """The files of `cases` ({file name: (key, a piece of its message)}) that no line of `stderr` names as
    `…FOLDER/NAME.toml:LINE: KEY: …PIECE…`: a `validate` run reports every mistake, one line each."""
    lines = stderr.splitlines()
    return [
        name
        for name, (key, piece) in cases.items()
        if not any(f"{folder}/{name}.toml:" in line and f": {key}: " in line and piece in line for line in lines)
    ]


def reconciler_argv(*args: str) -> list[str]:
    """The command line of `python -m reconciler ARGS…` with this interpreter."""
    return [sys.executable, "-m", "reconciler", *args]


def clean_env(dsn: str | None = None, **extra: str) -> dict[str, str]:
    """This process's environment without RECONCILER_DSN and DATABASE_URL (the caller's database is
    never used by accident), with RECONCILER_DSN = `dsn` when given, and `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("RECONCILER_DSN", "DATABASE_URL")}
    if dsn:
        env["RECONCILER_DSN"] = dsn
    return {**env, **extra}


def run_reconciler(
    *args: str,
    dsn: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    ok: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python -m reconciler ARGS…` in a subprocess, text captured; `env`: the whole environment
    (default: clean_env(dsn)); `ok`: assert it exited 0."""
    done = subprocess.run(
        reconciler_argv(*args),
        cwd=cwd,
        env=dict(env) if env is not None else clean_env(dsn),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


# ---------------------------------------------------------------- engine subprocesses


@dataclass
class EngineProcess:
    engine_id: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        """What it wrote to stderr (logs)."""
        return self.log.read_text(errors="replace")

    def stdout(self) -> str:
        return self.log.with_suffix(".out").read_text(errors="replace")


def start_engines(dsn: str, ids: Sequence[str], logs: Path, *extra: str, env: dict[str, str] | None = None,
                  global_args: Sequence[str] = ()) -> list[EngineProcess]:  # fmt: skip
    """`reconciler engine` processes, one per id, polling at least every 0.5 s."""
    started = []
    for engine_id in ids:
        log = logs / f"{engine_id}.log"
        with log.open("wb") as sink, log.with_suffix(".out").open("wb") as out:
            proc = subprocess.Popen(
                reconciler_argv(*global_args, "engine", "--engine-id", engine_id, "--max-sleep", "0.5", *extra),
                env={**os.environ, "RECONCILER_DSN": dsn, **(env or {})},
                stdout=out,
                stderr=sink,
            )
        started.append(EngineProcess(engine_id, proc, log))
    return started


def registered(dsn: str) -> set[str]:
    """Engine ids with a row in scheduler.engines (none while the schema is not there yet)."""
    with psycopg.connect(dsn) as conn:
        try:
            return {row[0] for row in conn.execute("SELECT engine_id FROM scheduler.engines")}
        except psycopg.errors.UndefinedTable:
            return set()


def wait_registered(dsn: str, engines: Sequence[EngineProcess]) -> datetime:
    """Wait until every engine has registered (failing at once if one exits); returns that moment."""

    def ready() -> bool:
        dead = [e.output()[-2000:] for e in engines if e.proc.poll() is not None]
        assert not dead, f"an engine exited before registering: {dead}"
        return {e.engine_id for e in engines} <= registered(dsn)

    assert wait_until(ready, 120), "engines never registered"
    return datetime.now(UTC)


def listening_addr(engine: EngineProcess, seconds: float = 60) -> str:
    """HOST:PORT the engine listens on (its `--metrics-addr 127.0.0.1:0`, as the kernel chose it)."""
    found: list[str] = []

    def listening() -> bool:
        assert engine.proc.poll() is None, f"the engine exited: {engine.output()[-2000:]}"
        found[:] = [
            f"{conn.laddr.ip}:{conn.laddr.port}"
            for conn in psutil.Process(engine.proc.pid).net_connections(kind="tcp")
            if conn.status == psutil.CONN_LISTEN
        ]
        return bool(found)

    assert wait_until(listening, seconds), f"{engine.engine_id} never listened"
    [addr] = found
    return addr


def soon(moment: datetime, seconds: int) -> str:
    """`moment + seconds`, rounded up to a whole second, as a TOML date-time (UTC)."""
    return (moment.replace(microsecond=0) + timedelta(seconds=seconds + 1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def stop(engines: Sequence[EngineProcess], timeout: float = 120) -> list[tuple[int, str]]:
    """SIGTERM each engine and wait: [(exit code, stderr)]."""
    for engine in engines:
        if engine.proc.poll() is None:
            engine.proc.send_signal(signal.SIGTERM)
    return [(engine.proc.wait(timeout=timeout), engine.output()) for engine in engines]
