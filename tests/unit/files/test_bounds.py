"""Input bounds (docs/files.md, "Input bounds"): each limit holds at its edge; no schedule leaves datetime's range."""

from __future__ import annotations

import argparse
import errno
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from reconciler.cli.argtypes import COUNT, KEEP_DAYS, SECONDS, host_port
from reconciler.files.problems import FileError
from reconciler.files.scan import scan
from reconciler.files.tasks import load_dir
from reconciler.files.text import hostile_values
from reconciler.schedule.base import FLOOR, HORIZON
from reconciler.schedule.preview import upcoming
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec.target import check_url, is_credential_name
from reconciler.spec.task import MAX_KEEP_RUNS, MAX_MISFIRE_GRACE_SECONDS, TaskSpec
from reconciler.spec.trigger import MAX_CALENDAR_EVERY, MAX_INTERVAL_SECONDS

TARGET = {"url": "http://127.0.0.1:9/"}
CRON = {"kind": "cron", "expr": "* * * * *"}


def task(**fields: Any) -> dict[str, Any]:
    """A valid task document with `fields` merged in (tables replace tables)."""
    return {"trigger": CRON, "target": TARGET} | fields


def errors_of(doc: dict[str, Any]) -> list[str]:
    try:
        TaskSpec.model_validate(doc)
    except ValidationError as exc:
        return [".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in exc.errors()]
    return []


@pytest.mark.parametrize(
    ("largest", "doc"),
    [
        (MAX_INTERVAL_SECONDS, lambda n: task(trigger={"kind": "interval", "seconds": n})),
        (MAX_INTERVAL_SECONDS // 86_400, lambda n: task(trigger={"kind": "interval", "every": f"{n}d"})),
        (
            MAX_CALENDAR_EVERY,
            lambda n: task(
                trigger={"kind": "calendar", "every": n, "unit": "years", "at": "09:00", "start_at": "2026-01-01"}
            ),
        ),
        (MAX_KEEP_RUNS, lambda n: task(policy={"keep_runs": n})),
        (MAX_MISFIRE_GRACE_SECONDS, lambda n: task(policy={"misfire_grace_seconds": n})),
        (1000, lambda n: task(policy={"max_running_instances": n})),
        (3600, lambda n: task(policy={"jitter_seconds": n})),
        (3600, lambda n: task(target=TARGET | {"timeout_seconds": n})),
    ],
    ids=["seconds", "every", "calendar-every", "keep_runs", "misfire", "instances", "jitter", "timeout"],
)
def test_numeric_bound_holds_at_its_edge(largest: int, doc: Any) -> None:
    assert errors_of(doc(largest)) == []
    assert errors_of(doc(largest + 1)) != []


def test_retry_backoffs_of_one_run_wait_at_most_a_day() -> None:
    assert errors_of(task(policy={"retries": 10, "retry_backoff_seconds": 84})) == []  # 85,932 s
    assert errors_of(task(policy={"retries": 10, "retry_backoff_seconds": 85})) != []  # 86,955 s
    assert errors_of(task(policy={"retries": 20, "retry_backoff_seconds": 0})) == []


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://127.0.0.1:9/x?y=1#f", True),
        ("https://billing.internal/run", True),
        ("http://[::1]:65535/", True),
        ("http://[fe80::1%25eth0]/", True),
        ("http://host_name.local./", True),
        ("http://xn--bcher-kva.example/pfad/äö", True),
        ("http://u:p@host/", False),
        ("http://u@host/", False),
        ("http://host:0/", False),
        ("http://host:65536/", False),
        ("http://host:abc/", False),
        ("http://[::1/x", False),
        ("http://[::g]/", False),
        ("http://::1/", False),
        ("http://999.1.1.1/", False),
        ("http://-bad-.example/", False),
        ("http://bücher.example/", False),
        ("http:///path", False),
        ("ftp://host/", False),
        ("http://host/a b", False),
        ("http://host/\x7f", False),
        ("http://" + "a" * 8000 + "/", False),
    ],
)
def test_url_table(url: str, ok: bool) -> None:
    if ok:
        assert check_url(url) == url
    else:
        with pytest.raises(ValueError) as caught:
            check_url(url)
        assert "p@" not in str(caught.value)  # never echo credentials


def test_non_ascii_host_error_suggests_punycode() -> None:
    with pytest.raises(ValueError, match=r"xn--bcher-kva\.example"):
        check_url("http://bücher.example/")


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("Proxy-Authorization", True),
        ("Cookie", True),
        ("X-Api-Key", True),
        ("X-Auth-Token", True),
        ("X-Client-Secret", True),
        ("X-Password", True),
        ("api_key", True),
        ("sig", True),
        ("X-Amz-Signature", True),
        ("X-Tenant", False),
        ("Accept", False),
        ("page", False),
        ("signal", False),
    ],
)
def test_credential_names(name: str, secret: bool) -> None:
    assert is_credential_name(name) is secret
    headers = task(target=TARGET | {"headers": {name: "literal"}})
    query = task(target=TARGET | {"query": {name: "literal"}})
    assert bool(errors_of(headers)) is secret
    assert bool(errors_of(query)) is secret
    assert errors_of(task(target=TARGET | {"headers": {name: {"env": "X"}}, "query": {name: {"env": "X"}}})) == []


def test_query_round_trips_and_is_absent_when_empty() -> None:
    spec = TaskSpec.model_validate(task(target=TARGET | {"query": {"page": "2", "token": {"env": "T"}}}))
    stored = spec.normalized()
    assert stored["target"]["query"] == {"page": "2", "token": {"env": "T"}}
    assert TaskSpec.model_validate(json.loads(json.dumps(stored))).normalized() == stored
    assert "query" not in TaskSpec.model_validate(task()).normalized()["target"]


@pytest.mark.parametrize("year", [1969, 9001, 9999])
def test_years_outside_1970_to_9000_are_errors(year: int) -> None:
    for trigger in (
        {"kind": "once", "at": f"{year}-06-01T00:00:00"},
        CRON | {"start_at": f"{year}-06-01T00:00:00"},
        {"kind": "calendar", "unit": "days", "at": "09:00", "start_at": f"{year}-06-01"},
    ):
        assert errors_of(task(trigger=trigger)) != [], trigger


EDGE_ZONES = ["America/Los_Angeles", "Pacific/Kiritimati", "Etc/GMT+12", "Etc/GMT-14"]
EDGE_TRIGGERS: list[dict[str, Any]] = [
    {"kind": "once", "at": "9000-12-31T23:59:59"},
    {"kind": "once", "at": "1970-01-01T00:00:00"},
    {"kind": "cron", "expr": "59 23 31 12 *", "start_at": "1970-01-01T00:00:00"},
    {"kind": "cron", "expr": "0 0 29 2 *", "end_at": "9000-12-31T23:59:59"},
    {"kind": "cron", "expr": "* * * * *", "start_at": "9000-12-31T23:59:00"},
    {"kind": "interval", "seconds": MAX_INTERVAL_SECONDS, "start_at": "9000-12-31T23:59:59"},
    {"kind": "interval", "every": "1s", "start_at": "1970-01-01T00:00:00"},
    # Every calendar step size from the first and last anchors, at both ends of the day.
    *(
        {"kind": "calendar", "every": every, "unit": unit, "at": at, "start_at": anchor}
        for every in (1, MAX_CALENDAR_EVERY - 1, MAX_CALENDAR_EVERY)
        for unit in ("days", "weeks", "months", "years")
        for at in ("00:00", "23:59:59")
        for anchor in ("1970-01-01", "8999-12-31", "9000-12-31")
    ),
]
EDGE_AFTERS = [
    datetime.min.replace(tzinfo=UTC),
    FLOOR,
    datetime(2026, 1, 1, tzinfo=UTC),
    datetime(8999, 12, 31, tzinfo=UTC),
    datetime(9000, 12, 31, 23, 59, 59, tzinfo=UTC),
    HORIZON,
    datetime.max.replace(tzinfo=UTC),
]


@pytest.mark.parametrize("zone", EDGE_ZONES)
def test_schedules_at_the_year_bounds_never_overflow(zone: str) -> None:
    for trigger in EDGE_TRIGGERS:
        schedule = compile_schedule(TaskSpec.model_validate({"timezone": zone, "trigger": trigger, "target": TARGET}))
        for after in EDGE_AFTERS:
            for fire in upcoming(schedule, after, 3):
                assert FLOOR <= fire.at < HORIZON, trigger
                fire.at.astimezone(ZoneInfo(zone))  # shown in the task's zone, as `next` does
        assert schedule.next_fire_time(HORIZON) is None
        if trigger["kind"] == "once":  # the first and last second of the range, in any zone, fire
            assert schedule.next_fire_time(FLOOR) is not None


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"a": "x\0y"}, [("a",)]),
        ({"\0": 1}, [("\0",)]),
        ({"a": [1.0, float("nan"), float("-inf")]}, [("a", "1"), ("a", "2")]),
        ({"a": 2**63 - 1, "b": -(2**63), "c": 2**63, "d": -(2**63) - 1, "e": True}, [("c",), ("d",)]),
        ({"a": 1e308, "b": -0.0, "c": "\x1b[31m"}, []),
    ],
)
def test_hostile_values_are_found_by_path(value: dict[str, Any], found: list[tuple[str, ...]]) -> None:
    assert [path for path, _ in hostile_values(value)] == found


def test_nesting_is_cut_at_32_levels() -> None:
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    [(path, message)] = list(hostile_values({"json": deep}))
    assert len(path) == 33 and "32 levels" in message


def test_file_error_stays_on_one_line() -> None:
    error = FileError("tasks.d/a\nb.toml", 3, "labels.x\0\n", "bad\r\nvalue \x1b[31m")
    assert str(error) == "tasks.d/a\\nb.toml:3: labels.x\\x00\\n: bad\\r\\nvalue \\x1b[31m"


def test_scan_reports_every_entry_that_is_not_a_task_file(tmp_path: Path) -> None:
    root = tmp_path / "tasks.d"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "ok.toml").write_text("x")
    (root / "dir.toml").mkdir()
    (root / "dir.toml" / "inner.toml").write_text("x")
    (root / "alias.toml").symlink_to(root / "sub" / "ok.toml")
    (root / "broken.toml").symlink_to(root / "nowhere.toml")
    (root / "loop.toml").symlink_to(root / "loop.toml")
    (root / "outside.toml").symlink_to(tmp_path / "foreign.toml")
    (tmp_path / "foreign.toml").write_text("SECRET-CONTENT")
    (root / "linked").symlink_to(root / "sub")
    (root / "_draft").symlink_to(tmp_path)  # ignored name: not reported
    (root / "notes.md").symlink_to(root / "nowhere")  # not a task file name: not reported
    problems = {entry.path.relative_to(root).as_posix(): entry.problem for entry in scan(root)}
    assert problems == {
        "alias.toml": None,
        "broken.toml": "is a broken symlink; remove it or fix its target",
        "dir.toml": "is a directory, not a task file; rename it (the files in it are loaded)",
        "dir.toml/inner.toml": None,
        "linked": "is a symlink to a directory, which is not followed; move or link the files themselves",
        "loop.toml": "is a symlink loop; remove it",
        "outside.toml": "is a symlink to a path outside the tasks directory; copy the file in instead",
        "sub/ok.toml": None,
    }
    assert "SECRET-CONTENT" not in "\n".join(str(e) for e in load_dir(root, "tasks.d").errors)


def test_unreadable_file_and_directory_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "tasks.d"
    (root / "locked").mkdir(parents=True)
    (root / "a.toml").write_text("x")
    real_open, real_scandir = os.open, os.scandir

    def deny(real: Any, name: str) -> Any:  # permissions do not stop root, so refuse as the kernel would
        def call(path: Any, *args: Any) -> Any:
            if str(path).endswith(name):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real(path, *args)

        return call

    monkeypatch.setattr(os, "open", deny(real_open, "a.toml"))
    monkeypatch.setattr(os, "scandir", deny(real_scandir, "locked"))
    assert [str(e) for e in load_dir(root, "tasks.d").errors] == [
        "tasks.d/a.toml:0: (file): cannot read file (Permission denied)",
        "tasks.d/locked:0: (file): cannot list directory (Permission denied)",
    ]


@pytest.mark.parametrize(
    ("parse", "text", "ok"),
    [
        (COUNT, "1", True),
        (COUNT, "10000", True),
        (COUNT, "0", False),
        (COUNT, "10001", False),
        (COUNT, "1.5", False),
        (KEEP_DAYS, "0.5", True),
        (KEEP_DAYS, "0", True),  # keep every run
        (KEEP_DAYS, "-1", False),
        (KEEP_DAYS, "nan", False),
        (KEEP_DAYS, "1e10", False),
        (SECONDS, "0", True),
        (SECONDS, "-0.1", False),
        (SECONDS, "inf", False),
        (host_port, "127.0.0.1:9100", True),
        (host_port, ":0", True),
        (host_port, "[::1]:65535", True),
        (host_port, "localhost:notaport", False),
        (host_port, "localhost:65536", False),
        (host_port, "localhost", False),
        (host_port, "[::1:80", False),
        (host_port, "[::g]:80", False),
    ],
)
def test_option_types(parse: Any, text: str, ok: bool) -> None:
    if ok:
        parse(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_metrics_address_drops_ipv6_brackets() -> None:
    assert host_port("[::1]:9100") == "::1:9100"
