"""`reconciler up`: embedded database, apply, watch and engine in one process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.builders import interval_trigger, reconciler_argv, task_text
from tests.helpers import Output, wait_until
from tests.httpserver import serving
from tests.pgcontrol import needs_pgserver, stop_embedded


def task_file(url: str, path: str) -> str:
    return task_text(trigger=interval_trigger("2s"), url=f"{url}{path}")


@contextlib.contextmanager
def running_up(tmp_path: Path, env: dict[str, str], *args: str) -> Iterator[tuple[subprocess.Popen[str], Output]]:
    """`reconciler up ARGS…` in `tmp_path`, its stdout read line by line; Ctrl-C and its database stopped after."""
    proc = subprocess.Popen(
        reconciler_argv("up", *args),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "stderr.txt").open("w"),
        text=True,
    )
    out = Output(proc.stdout)
    try:
        yield proc, out
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
            out.join()
        finally:
            stop_embedded(tmp_path / ".reconciler")


@needs_pgserver
def test_up_fires_applies_edits_and_stops_on_sigint(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RECONCILER_DSN", "DATABASE_URL")}
    tasks = tmp_path / "tasks.d"
    tasks.mkdir()
    with serving() as (url, rec):
        (tasks / "ping.toml").write_text(task_file(url, "/v1"))
        with running_up(tmp_path, env, "--max-sleep", "1") as (proc, out):
            assert wait_until(lambda: len(rec.paths("/v1")) >= 1, 60), out.lines
            assert any("Plan: 1 to create" in line for line in out.lines), out.lines
            (tasks / "ping.toml").write_text(task_file(url, "/v2"))
            assert wait_until(lambda: len(rec.paths("/v2")) >= 1, 30), out.lines
            assert proc.poll() is None, "up must keep running across edits"
            assert wait_until(lambda: any("run ping @" in line and "succeeded" in line for line in out.lines), 10)
            assert any("1 to update" in line for line in out.lines), out.lines
            # the dashboard's URL (9464, or a port of the kernel's when another process holds it), serving the task
            [shown] = [line for line in out.lines if line.startswith("reconciler up: dashboard on http://127.0.0.1:")]
            page = httpx.get(shown.split()[4] + "?format=json", timeout=30).json()
            assert [task["id"] for task in page["tasks"]] == ["ping"]
        err = (tmp_path / "stderr.txt").read_text()
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        assert out.lines[-1] == "reconciler up: stopped"
        assert (tmp_path / ".reconciler" / "pgdata" / "PG_VERSION").exists()  # its own embedded database


@needs_pgserver
def test_ctrl_c_says_what_it_drains_and_a_second_one_stops_at_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RECONCILER_DSN", "DATABASE_URL")}
    tasks = tmp_path / "tasks.d"
    tasks.mkdir()
    stderr = tmp_path / "stderr.txt"
    with serving() as (url, rec):
        rec.script("/slow", delay=300)  # far longer than any wait below: only the second Ctrl-C ends the run
        (tasks / "slow.toml").write_text(
            f'[trigger]\nkind = "interval"\nevery = "2s"\n[target]\nurl = "{url}/slow"\ntimeout_seconds = 600\n'
        )
        proc = subprocess.Popen(
            reconciler_argv("up", "--max-sleep", "1", "--drain-seconds", "600"),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr.open("w"),
            text=True,
        )
        out = Output(proc.stdout)
        try:
            assert wait_until(lambda: rec.in_flight.get("/slow", 0) == 1, 60), out.lines
            proc.send_signal(signal.SIGINT)
            assert wait_until(lambda: "draining 1 run(s) (up to 600 s); Ctrl-C again" in stderr.read_text(), 30)
            assert proc.poll() is None  # still draining
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)  # far less than the 300 s the target takes: it did not wait
            out.join()
        finally:
            if proc.poll() is None:
                proc.kill()
            stop_embedded(tmp_path / ".reconciler")
    err = stderr.read_text()
    assert proc.returncode == 0, err
    assert "stopped with 1 run(s) in flight; they are recorded lost when their leases expire" in err
    assert "Traceback" not in err


@needs_pgserver
def test_up_is_the_public_address_of_its_jobs_and_prints_their_outcome(tmp_path: Path) -> None:
    """A callback task under `up` without --public-url: its job reports to up's own address, and up prints the
    outcome when it comes."""
    env = {k: v for k, v in os.environ.items() if k not in ("RECONCILER_DSN", "DATABASE_URL", "RECONCILER_PUBLIC_URL")}
    tasks = tmp_path / "tasks.d"
    tasks.mkdir()
    with serving() as (url, rec):
        rec.script("/job", statuses=[202])
        (tasks / "job.toml").write_text(
            task_text(
                trigger=interval_trigger("1h"), url=f"{url}/job", target='completion = "callback"\ndeadline = "1h"'
            )
        )
        with running_up(tmp_path, env, "--max-sleep", "1") as (proc, out):
            assert wait_until(lambda: any("Plan: 1 to create" in line for line in out.lines), 60), out.lines
            trigger = subprocess.run(reconciler_argv("trigger", "job"), cwd=tmp_path, env=env, capture_output=True)
            assert trigger.returncode == 0, trigger.stderr
            assert wait_until(lambda: rec.paths("/job"), 60), out.lines
            callback = rec.paths("/job")[0].headers["X-Reconciler-Callback"]
            [shown] = [line for line in out.lines if line.startswith("reconciler up: dashboard on http://127.0.0.1:")]
            assert callback.startswith(shown.split()[4].rstrip("/") + "/runs/"), (callback, shown)
            assert wait_until(lambda: any("run job @ manual run: accepted" in line for line in out.lines), 30)
            done = httpx.post(f"{callback}/complete", json={"status": "succeeded"}, timeout=30)
            assert done.status_code == 200, done.text
            assert wait_until(lambda: any("job job: succeeded" in line for line in out.lines), 30), out.lines
        assert proc.returncode == 0, (tmp_path / "stderr.txt").read_text()
