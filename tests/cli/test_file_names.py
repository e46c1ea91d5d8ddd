"""File and folder names that are not UTF-8 (one pull request away): one error line each, under every command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.builders import clean_env, cli, reconciler_argv
from tests.helpers import Output, wait_until

TASK = '[trigger]\nkind = "interval"\nevery = "1h"\n[target]\nurl = "http://127.0.0.1:9/x"\n'
NOT_UTF8 = "the name is not UTF-8 text; rename it"
BAD = os.fsdecode(b"\xff")  # how Python lists the byte 0xFF in a name


def project(tmp_path: Path) -> Path:
    (tmp_path / "tasks.d").mkdir()
    (tmp_path / "tasks.d" / "a.toml").write_text(TASK)
    (tmp_path / "tasks.d" / "b.toml").write_text(TASK)
    return tmp_path / "tasks.d"


def reconciler(*args: str, cwd: Path, dsn: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        reconciler_argv(*args),
        cwd=cwd,
        env=clean_env(dsn, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def task_ids(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        try:
            return {row[0] for row in conn.execute("SELECT id FROM scheduler.tasks")}
        except psycopg.errors.UndefinedTable:
            return set()


def test_validate_names_each_file_and_folder_that_is_not_utf8(tmp_path: Path) -> None:
    tasks = project(tmp_path)
    (tasks / f"{BAD}.toml").write_text(TASK)
    (tasks / f"x{BAD}").mkdir()
    (tasks / f"x{BAD}" / "c.toml").write_text(TASK)
    (tmp_path / "notifiers.d").mkdir()
    (tmp_path / "notifiers.d" / f"{BAD}.toml").write_text('kind = "webhook"\nurl = "https://example.com/"\n')
    code, out, err = cli(None, tasks, "validate")
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"{tmp_path}/notifiers.d/\\xff.toml:0: (file): {NOT_UTF8} (ids, paths and the database are UTF-8)",
        f"{tasks}/x\\xff:0: (file): {NOT_UTF8} (ids, paths and the database are UTF-8)",
        f"{tasks}/\\xff.toml:0: (file): {NOT_UTF8} (ids, paths and the database are UTF-8)",
        f"3 error(s) in {tasks} and {tmp_path}/notifiers.d; nothing was changed",
    ]


@pytest.mark.parametrize(
    ("option", "args"),
    [("--tasks-dir", ["validate"]), ("PLANFILE", ["apply", BAD]), ("--out-dir", ["export", "--out-dir", BAD])],
)
def test_a_path_option_that_is_not_utf8_is_a_usage_error(tmp_path: Path, option: str, args: list[str]) -> None:
    (tmp_path / BAD).mkdir()
    tasks = tmp_path / (BAD if option == "--tasks-dir" else "tasks.d")
    code, _, err = cli(None, tasks, *args)  # argparse's usage exit
    assert code == 1
    shown = f"{tmp_path}/\\xff" if option == "--tasks-dir" else "\\xff"
    assert err.splitlines()[-1].endswith(f"{option} {shown}: the path is not UTF-8 text; rename it")


def test_plan_and_apply_refuse_a_name_that_is_not_utf8_and_prune_nothing(dsn: str, tmp_path: Path) -> None:
    tasks = project(tmp_path)
    assert cli(dsn, tasks, "apply")[0] == 0
    (tasks / "b.toml").rename(tasks / f"{BAD}.toml")  # b's file is still there, under a name that cannot be read
    for command in ("plan", "apply"):
        code, out, err = cli(dsn, tasks, command)
        assert code == 1 and "delete" not in out, (out, err)
        assert f"{tasks}/\\xff.toml:0: (file): {NOT_UTF8}" in err
    assert task_ids(dsn) == {"a", "b"}


@pytest.mark.parametrize("command", ["watch", "up"])
def test_watch_and_up_report_a_name_that_is_not_utf8_and_keep_watching(dsn: str, tmp_path: Path, command: str) -> None:
    tasks = project(tmp_path)
    (tasks / f"{BAD}.toml").write_text(TASK)
    proc = reconciler(
        command, "--debounce-ms", "100", *(["--max-sleep", "1"] if command == "up" else []), cwd=tmp_path, dsn=dsn
    )
    out, errors = Output(proc.stdout), Output(proc.stderr)
    try:
        assert wait_until(lambda: any("nothing applied, still watching" in line for line in errors.lines), 60), (
            out.lines,
            errors.lines,
        )
        (tasks / f"{BAD}.toml").unlink()
        assert wait_until(lambda: task_ids(dsn) == {"a", "b"}, 30), (out.lines, errors.lines)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        out.join()
        errors.join()
    assert code == 0, errors.lines
    assert f"tasks.d/\\xff.toml:0: (file): {NOT_UTF8} (ids, paths and the database are UTF-8)" in errors.lines
    assert "Traceback" not in "\n".join(errors.lines)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_up_stops_with_a_one_line_error_when_its_watcher_dies(dsn: str, tmp_path: Path, log_format: str) -> None:
    tasks = project(tmp_path)
    proc = reconciler(
        "--log-format", log_format, "up", "--debounce-ms", "100", "--max-sleep", "1", cwd=tmp_path, dsn=dsn
    )
    out, errors = Output(proc.stdout), Output(proc.stderr)
    try:
        assert wait_until(lambda: task_ids(dsn) == {"a", "b"}, 60), (out.lines, errors.lines)
        with psycopg.connect(dsn) as conn:  # a fault no apply expects: the next one raises
            conn.execute("ALTER TABLE scheduler.tasks RENAME TO tasks_gone")
        (tasks / "c.toml").write_text(TASK)
        assert wait_until(lambda: proc.poll() is not None, 60), (out.lines, errors.lines)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        out.join()
        errors.join()
    assert code == 1, errors.lines
    if log_format == "text":
        last = errors.lines[-1]
        assert last.startswith("error: the file watcher stopped ("), errors.lines
    else:
        events = [json.loads(line) for line in errors.lines]  # one JSON object per line, tracebacks included
        [failed] = [e for e in events if e["message"] == "the file watcher failed"]
        trace = failed["exception"].splitlines()  # the whole stack in one field, not its last line only
        assert trace[0] == "Traceback (most recent call last):", trace
        assert any(line.startswith("psycopg.errors.UndefinedTable") for line in trace), trace
        assert any("cli/watch.py" in frame for frame in trace), trace
        last = events[-1]["message"]
    assert "the file watcher stopped (" in last and "`up` stopped with it: restart it" in last
