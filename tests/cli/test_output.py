"""Consistent text output (issue 12): one instant format, 24-hour schedules, intervals in words,
a status that shows last runs, disabled and overdue tasks, run history with response excerpts,
unknown ids as errors, and colour only where a terminal wants it."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from io import StringIO
from pathlib import Path

import psycopg
import pytest

from reconciler.output.text import colour_wanted
from reconciler.schedule.describe import describe_trigger, interval_words
from reconciler.spec.task import TaskSpec
from tests.builders import cli, reconciler_argv, run_reconciler, task_text, write_tasks

INSTANT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d|\d\d:\d\d:\d\d\.\d")  # ISO text, or fractions of a second
LONG_ID = "team-with-a-long-name/a-task-whose-id-is-longer-than-32-characters"
HOSTILE = "ok token=EXCERPTSECRET https://bob:PW@x.example/ \x1b[2J"


def toml(trigger: str, extra: str = "", name: str = "x") -> str:
    return task_text(extra.rstrip("\n"), trigger=trigger, url=f"http://127.0.0.1:9/{name}")


CRON = 'kind = "cron"\nexpr = "*/5 * * * *"'


def sql(dsn: str, statement: str, params: tuple[object, ...] = ()) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)


def add_run(dsn: str, task_id: str, **values: object) -> None:
    """A finished run row as an engine (or an older version, or a person) wrote it."""
    row: dict[str, object] = {"kind": "scheduled", "status": "succeeded", "attempt": 1, **values}
    row.setdefault("scheduled_for", "now()")
    names = ", ".join(["task_id", *row])
    marks = ", ".join(["%s", *("now()" if v == "now()" else "%s" for v in row.values())])
    sql(
        dsn,
        f"INSERT INTO scheduler.runs ({names}) VALUES ({marks})",
        (task_id, *(v for v in row.values() if v != "now()")),
    )


@pytest.fixture
def applied(dsn: str, tmp_path: Path) -> Path:
    """Tasks applied to the test database: a, off (disabled), late, patient (grace 1 h) and a long id."""
    tasks = write_tasks(
        tmp_path / "tasks.d",
        {
            "a": toml(CRON),
            "off": toml(CRON, "enabled = false\n"),
            "late": toml(CRON),
            "patient": toml(CRON) + "[policy]\nmisfire_grace_seconds = 3600\n",
            LONG_ID: toml(CRON),
        },
    )
    assert cli(dsn, tasks, "apply")[0] == 0
    return tasks


# ---------------------------------------------------------------- one instant format


def test_next_writes_instants_as_every_other_command_does(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path, {"b": toml('kind = "cron"\nexpr = "30 2 * * *"', 'timezone = "Europe/Berlin"\n')})
    code, out, _ = cli(None, tasks, "next", "--count", "2", "--after", "2026-12-02T12:00:00Z")
    assert code == 0
    assert out.splitlines()[1:] == [
        "  2026-12-03 02:30:00 CET (2026-12-03 01:30:00 UTC)",
        "  2026-12-04 02:30:00 CET (2026-12-04 01:30:00 UTC)",
    ]
    code, out, _ = cli(None, tasks, "next", "--count", "1", "--after", "2026-12-02T12:00:00Z", "--format", "json")
    assert json.loads(out)[0]["fire_times"] == ["2026-12-03T02:30:00+01:00"]  # json keeps ISO with an offset


def test_text_outputs_share_one_instant_format_to_the_second(applied: Path, dsn: str) -> None:
    assert cli(dsn, applied, "trigger", "a")[0] == 0  # a manual run: requested now, with microseconds
    add_run(dsn, "a", finished_at="now()", started_at="now()", http_status=200)
    for command in (["status"], ["runs"], ["runs", "--verbose"], ["explain", "a"], ["history"], ["plan"]):
        code, out, err = cli(dsn, applied, *command)
        assert code == 0, (command, err)
        assert not ISO.search(out), (command, out)
        if command != ["plan"]:  # a plan without changes names no instant
            assert INSTANT.search(out), (command, out)
    code, out, _ = cli(dsn, applied, "runs", "--format", "json")
    assert all(re.fullmatch(r"\d{4}-.*\+00:00", run["scheduled_for"]) for run in json.loads(out))


# ---------------------------------------------------------------- schedules in words


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("30 2 * * *", "At 02:30 (UTC)"),
        ("0 0 * * *", "At 00:00 (UTC)"),
        ("0 9,17 * * 1-5", "At 09:00 and 17:00, Monday through Friday (UTC)"),
    ],
)
def test_cron_descriptions_use_a_24_hour_clock(expr: str, words: str) -> None:
    spec = TaskSpec.model_validate({"trigger": {"kind": "cron", "expr": expr}, "target": {"url": "http://x.y/"}})
    assert describe_trigger(spec) == words


def test_cron_descriptions_are_english_24_hour_whatever_the_locale(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path, {"b": toml('kind = "cron"\nexpr = "0 0 * * *"')})
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k != "LANG"}
    for locale in ({}, {"LC_ALL": "C"}, {"LANG": "de_DE.UTF-8"}):
        done = run_reconciler("--tasks-dir", str(tasks), "next", "--count", "1", env={**env, **locale}, timeout=60)
        assert done.returncode == 0 and done.stderr == "", (locale, done.stderr)
        assert done.stdout.startswith("b  — At 00:00 (UTC)\n"), (locale, done.stdout)


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (1, "every second"),
        (60, "every minute"),
        (90, "every 1 minute 30 seconds"),
        (900, "every 15 minutes"),
        (3600, "every hour"),
        (5400, "every 1 hour 30 minutes"),
        (21_600, "every 6 hours"),
        (86_400, "every day"),
        (172_800, "every 2 days"),
        (93_784, "every 1 day 2 hours 3 minutes 4 seconds"),
    ],
)
def test_intervals_in_words(seconds: int, words: str) -> None:
    assert interval_words(seconds) == words


def test_interval_description_says_elapsed_time() -> None:
    spec = TaskSpec.model_validate({"trigger": {"kind": "interval", "every": "1m"}, "target": {"url": "http://x.y/"}})
    assert describe_trigger(spec) == "every minute (elapsed time)"


# ---------------------------------------------------------------- status


def test_status_shows_disabled_last_run_overdue_and_fits_long_ids(applied: Path, dsn: str) -> None:
    sql(dsn, "UPDATE scheduler.tasks SET next_run_at = now() WHERE id = 'off'")  # a hand edit: still no next run
    sql(dsn, "UPDATE scheduler.tasks SET next_run_at = now() - interval '5 minutes' WHERE id IN ('late', 'patient')")
    add_run(dsn, "a", scheduled_for="2026-12-02 12:05:00.123456+00", status="failed", http_status=500)
    code, out, _ = cli(dsn, applied, "status")
    assert code == 0
    lines = out.splitlines()
    header = next(ln for ln in lines if ln.startswith("TASK"))
    rows = {
        ln.split()[0]: ln for ln in lines if ln.split() and ln.split()[0] in {"a", "off", "late", "patient", LONG_ID}
    }
    assert len(rows) == 5
    columns = ["NEXT RUN (UTC)", "NEXT RUN (local)", "LAST RUN (UTC)", "LAST STATUS", "FLAGS"]
    starts = [header.index(name) for name in columns]
    for row in rows.values():  # every column starts where its header does, the long id's row too
        assert all(row[start - 2 : start] == "  " and row[start] != " " for start in starts[:4]), (header, row)
    assert rows["off"][starts[0] :].startswith("disabled  ")
    assert rows["off"][starts[1] :].startswith("- ")
    assert rows["a"][starts[2] :].startswith("2026-12-02 12:05:00 UTC  failed")
    assert rows["late"].endswith("OVERDUE")
    assert "OVERDUE" not in rows["patient"]  # late by 5 minutes, inside its misfire grace of an hour
    assert "OVERDUE" not in rows["a"] and "OVERDUE" not in rows["off"]


def test_status_json_has_overdue_and_last_run_at(applied: Path, dsn: str) -> None:
    sql(dsn, "UPDATE scheduler.tasks SET next_run_at = now() - interval '5 minutes' WHERE id = 'late'")
    sql(dsn, "UPDATE scheduler.tasks SET next_run_at = now() WHERE id = 'off'")
    add_run(dsn, "a", scheduled_for="2026-12-02 12:05:00+00", finished_at="2026-12-02 12:05:01+00")
    code, out, _ = cli(dsn, applied, "status", "--format", "json")
    assert code == 0
    tasks = {t["id"]: t for t in json.loads(out)["tasks"]}
    assert {k: tasks["a"][k] for k in ("last_run_at", "last_status", "last_finished_at", "overdue")} == {
        "last_run_at": "2026-12-02T12:05:00+00:00",
        "last_status": "succeeded",
        "last_finished_at": "2026-12-02T12:05:01+00:00",
        "overdue": False,
    }
    assert tasks["late"]["overdue"] is True and tasks["late"]["last_run_at"] is None
    assert tasks["off"]["next_run_at"] is None and tasks["off"]["overdue"] is False


# ---------------------------------------------------------------- runs and explain


def test_runs_columns_stay_aligned_with_manual_runs_and_long_ids(applied: Path, dsn: str) -> None:
    assert cli(dsn, applied, "trigger", LONG_ID)[0] == 0
    add_run(dsn, "a", status="failed", http_status=503, error="HTTP 503")
    code, out, _ = cli(dsn, applied, "runs")
    assert code == 0
    header, *rows = out.splitlines()
    assert len(rows) == 2
    for name in ("TASK", "SCHEDULED FOR (UTC)", "KIND", "STATUS"):  # each starts where its header does
        start = header.index(name)
        assert all(row[start - 2 : start] == "  " and row[start] != " " for row in rows), (name, out)
    for name in ("RUN", "TRY", "HTTP"):  # numbers are right-aligned: each ends where its header does
        end = header.index(name) + len(name)
        assert all(row[end : end + 2] in ("  ", "") and row[end - 1] != " " for row in rows), (name, out)
    assert rows[0].endswith("  HTTP 503") and rows[0].index("HTTP 503") == header.index("ERROR")
    scheduled = [row[header.index("SCHEDULED FOR (UTC)") :][:23] for row in rows]
    assert all(INSTANT.fullmatch(value) for value in scheduled), scheduled


def test_response_excerpt_is_shown_masked_and_escaped(applied: Path, dsn: str) -> None:
    add_run(dsn, "a", kind="manual", http_status=200, response_excerpt=HOSTILE, engine_id="e1", duration_ms=12)
    shown = "response: ok token=*** https://***@x.example/ \\x1b[2J"
    code, plain, _ = cli(dsn, applied, "runs")
    assert code == 0 and "response:" not in plain  # only with --verbose
    code, verbose, _ = cli(dsn, applied, "runs", "a", "--verbose")
    assert code == 0 and f"    {shown}" in verbose.splitlines()
    assert any(ln.startswith("    engine e1, claimed ") and ln.endswith(", 12 ms") for ln in verbose.splitlines())
    code, out, _ = cli(dsn, applied, "runs", "--format", "json")
    assert json.loads(out)[0]["response_excerpt"] == "ok token=*** https://***@x.example/ \x1b[2J"
    code, explained, _ = cli(dsn, applied, "explain", "a")
    assert code == 0 and f"      {shown}" in explained.splitlines()
    for text in (verbose, out, explained):
        assert "EXCERPTSECRET" not in text and "PW@" not in text and "\x1b" not in text


def test_runs_of_an_unknown_id_is_an_error(applied: Path, dsn: str) -> None:
    code, out, err = cli(dsn, applied, "runs", "nope")
    assert code == 1 and out == ""
    assert err.strip().count("\n") == 0 and err.startswith("error: unknown task 'nope'")
    code, out, _ = cli(dsn, applied, "runs", "a")  # known, never ran
    assert code == 0 and out == "no runs of a recorded yet\n"
    code, out, _ = cli(dsn, applied, "runs", "--status", "failed")
    assert code == 0 and out == "no failed runs recorded yet\n"


def test_runs_of_a_deleted_task_are_still_shown(applied: Path, dsn: str) -> None:
    add_run(dsn, "gone", status="failed", error="boom")  # the history of a task deleted since
    code, out, _ = cli(dsn, applied, "runs", "gone")
    assert code == 0 and "gone" in out.splitlines()[1] and out.splitlines()[1].endswith("boom")
    code, out, _ = cli(dsn, applied, "runs", "gone", "--status", "succeeded")  # known id, no such runs
    assert code == 0 and out == "no succeeded runs of gone recorded yet\n"


# ---------------------------------------------------------------- colour


def on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """`reconciler ARGV` with its stdout on a pseudo-terminal; what it wrote there."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(reconciler_argv(*argv), stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode()


@pytest.fixture
def changed(dsn: str, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """A plan with a change to show (so a coloured head line), and the environment to run it in."""
    tasks = write_tasks(tmp_path / "tasks.d", {"a": toml(CRON)})
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    return ["--dsn", dsn, "--tasks-dir", str(tasks)], env


def test_plan_is_coloured_on_a_terminal_unless_no_color_is_set(changed: tuple[list[str], dict[str, str]]) -> None:
    argv, env = changed
    assert "\x1b[32m+ create a" in on_a_terminal([*argv, "plan"], env)
    assert "\x1b[" in on_a_terminal([*argv, "plan"], {**env, "NO_COLOR": ""})  # no-color.org: only a non-empty value
    plain = on_a_terminal([*argv, "plan"], {**env, "NO_COLOR": "1"})
    assert "+ create a" in plain and "\x1b" not in plain


def test_no_color_option_turns_plan_colour_off(changed: tuple[list[str], dict[str, str]]) -> None:
    argv, env = changed
    for args in ([*argv, "--no-color", "plan"], [*argv, "plan", "--no-color"]):
        plain = on_a_terminal(args, env)
        assert "+ create a" in plain and "\x1b" not in plain


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_wanted_only_on_a_terminal_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    assert colour_wanted(Terminal()) is True
    assert colour_wanted(StringIO()) is False  # a pipe or a file
    assert colour_wanted(Terminal(), no_color=True) is False  # --no-color
    monkeypatch.setenv("NO_COLOR", "")
    assert colour_wanted(Terminal()) is True
    monkeypatch.setenv("NO_COLOR", "0")  # any non-empty value, even "0"
    assert colour_wanted(Terminal()) is False
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert colour_wanted(Terminal()) is False
