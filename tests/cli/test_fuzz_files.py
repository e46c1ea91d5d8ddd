"""Fuzzed task files: `validate` and `plan` never crash; a bad file is always named, with exit 1.

Three kinds of input: arbitrary text; a valid task with one mutation that surely breaks it
(unknown key, wrong type, missing required key); and a valid task with raw characters
spliced into its TOML (which may or may not stay valid: then only "no crash, well-formed
lines" is required). A fourth property puts boundary values (extreme integers and floats,
the years around the supported range, NUL and control characters, deep nesting, odd URLs)
into valid tasks: whatever validates can be stored and scheduled without an exception.
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import tempfile
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from reconciler.files.tasks import load_text
from reconciler.schedule.base import FLOOR, HORIZON
from reconciler.schedule.preview import upcoming
from reconciler.schedule.triggers import compile_schedule
from reconciler.spec import task as models
from tests.builders import run_main

BASE: dict[str, Any] = {
    "description": "fuzz base",
    "timezone": "Europe/Berlin",
    "enabled": True,
    "labels": {"team": "x"},
    "trigger": {"kind": "cron", "expr": "30 2 * * 1-5", "start_at": "2026-01-01T00:00:00"},
    "target": {
        "url": "http://127.0.0.1:9/hook",
        "method": "POST",
        "headers": {"X-Key": {"env": "KEY"}},
        "body": "raw",
        "timeout_seconds": 30,
    },
    "policy": {"misfire_grace_seconds": 60, "coalesce": True, "retries": 1, "dst_gap": "shift"},
}
# (path, type) of every scalar or table in BASE whose type the model checks strictly.
TYPED: list[tuple[tuple[str, ...], type]] = [
    (("description",), str),
    (("timezone",), str),
    (("enabled",), bool),
    (("labels",), dict),
    (("trigger", "expr"), str),
    (("trigger", "kind"), str),
    (("target", "url"), str),
    (("target", "method"), str),
    (("target", "headers"), dict),
    (("target", "body"), str),
    (("target", "timeout_seconds"), float),
    (("policy", "misfire_grace_seconds"), int),
    (("policy", "coalesce"), bool),
    (("policy", "retries"), int),
]
REQUIRED = [("trigger",), ("target",), ("trigger", "kind"), ("target", "url")]
TABLES = [(), ("trigger",), ("target",), ("policy",)]
# Every key any task-file model knows (an "unknown key" mutation must avoid them all).
KNOWN = {
    key
    for model in vars(models).values()
    if isinstance(model, type) and issubclass(model, BaseModel)
    for name, field in model.model_fields.items()
    for key in (name, field.alias)
    if key
}

KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,12}", fullmatch=True)
SCALAR = st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=20), st.booleans(), st.floats(allow_nan=False))


def wrong_value(kind: type) -> st.SearchStrategy[Any]:
    """A TOML value that is surely not of `kind` (no coercion: the models are strict)."""
    if kind is str:
        return st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=3))
    if kind is bool:
        return st.one_of(st.integers(), st.text(max_size=5))
    if kind is int:
        return st.one_of(st.text(max_size=5), st.booleans(), st.floats(allow_nan=False, allow_infinity=False))
    if kind is float:  # a number of seconds: 1.5 and 2 are both fine, "2" and true are not
        return st.one_of(st.text(max_size=5), st.booleans())
    return st.one_of(st.integers(), st.text(max_size=5), st.booleans())


def set_path(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


@st.composite
def surely_bad_task(draw: st.DrawFn) -> str:
    doc = copy.deepcopy(BASE)
    how = draw(st.sampled_from(["unknown", "type", "missing"]))
    if how == "unknown":
        table = draw(st.sampled_from(TABLES))
        key = draw(KEY.filter(lambda k: k not in KNOWN))
        set_path(doc, (*table, key), draw(SCALAR)) if table else doc.__setitem__(key, draw(SCALAR))
    elif how == "type":
        path, kind = draw(st.sampled_from(TYPED))
        set_path(doc, path, draw(wrong_value(kind)))
    else:
        path = draw(st.sampled_from(REQUIRED))
        parent = doc if len(path) == 1 else doc[path[0]]
        del parent[path[-1]]
    return tomli_w.dumps(doc)


@st.composite
def spliced_task(draw: st.DrawFn) -> str:
    text = tomli_w.dumps(BASE)
    at = draw(st.integers(0, len(text)))
    return text[:at] + draw(st.text(min_size=1, max_size=8)) + text[at:]


def garbage() -> st.SearchStrategy[str]:
    # Random text is never a task: it would need [trigger] and [target] tables.
    return st.text(max_size=200).filter(lambda t: "[target]" not in t and "[trigger]" not in t)


FILES = st.lists(st.tuples(st.sampled_from(["surely_bad", "garbage", "spliced"]), st.data()), min_size=1, max_size=4)
LINE = r"^{root}/(?P<file>[^:/]+\.toml):(?P<line>\d+): (?P<key>[^:]+): .+$"


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=FILES)
def test_fuzzed_files_never_crash_and_bad_ones_are_named(files: list[tuple[str, st.DataObject]], dsn: str) -> None:
    root = Path(tempfile.mkdtemp()) / "tasks.d"
    root.mkdir()
    surely_bad: set[str] = set()
    try:
        for index, (kind, data) in enumerate(files):
            name = f"f{index}.toml"
            if kind == "surely_bad":
                text = data.draw(surely_bad_task())
                surely_bad.add(name)
            elif kind == "garbage":
                text = data.draw(garbage())
                surely_bad.add(name)
            else:
                text = data.draw(spliced_task())
            (root / name).write_text(text)
        line_format = re.compile(LINE.format(root=re.escape(str(root))))
        for command in ("validate", "plan"):
            code, _, err = run_main(["--tasks-dir", str(root), "--dsn", dsn, command])
            lines = err.splitlines()
            if code == 0:
                assert not surely_bad and not lines
                continue
            assert code == 1, (command, err)
            assert lines[-1].endswith(f"error(s) in {root}; nothing was changed"), err
            named = set()
            for line in lines[:-1]:
                match = line_format.match(line)
                assert match, f"not a one-line error: {line!r}"
                named.add(match["file"])
            assert surely_bad <= named, (surely_bad, err)
    finally:
        shutil.rmtree(root.parent)


# ---------------------------------------------------------------- boundary values

INTS = st.sampled_from([0, 1, -1, 1000, 1001, 2**31 - 1, 2**31, -(2**31), 2**63 - 1, -(2**63), 2**63, 10**20])
FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, -0.0, 0.0, 5e-324, 3600.0, 3600.5, 0.25])
YEARS = st.sampled_from([1, 1969, 1970, 2026, 8999, 9000, 9001, 9999])
ZONES = st.sampled_from(["UTC", "America/Los_Angeles", "Pacific/Kiritimati", "Europe/Berlin", "Etc/GMT+12"])
OFFSETS = st.sampled_from([None, UTC, *(timezone(timedelta(minutes=m)) for m in (-720, 840, 1439, -1439))])
DATES = st.builds(date, YEARS, st.sampled_from([1, 12]), st.sampled_from([1, 31]))
DATETIMES = st.builds(
    datetime, YEARS, st.sampled_from([1, 12]), st.sampled_from([1, 31]), st.sampled_from([0, 23]),
    st.sampled_from([0, 59]), st.sampled_from([0, 59]), tzinfo=OFFSETS,
)  # fmt: skip
CHARS = ["a", "K", "\x00", "\x01", "\r", "\n", "\t", "\x7f", "\x85", "é", " ", ":", "\u202e"]
ODD_TEXT = st.text(st.sampled_from(CHARS), max_size=8)
HOSTS = st.sampled_from(["127.0.0.1", "[::1]", "[::1", "[::g]", "999.1.1.1", "bücher.example", "-x-", "a_b.local.", ""])
PORTS = st.sampled_from(["", ":0", ":1", ":65535", ":65536", ":abc", ":", ":+80"])
USERINFO = st.sampled_from(["", "user@", "user:pw@", "@"])
URLS = st.builds(
    lambda scheme, user, host, port, rest: f"{scheme}://{user}{host}{port}/{rest}",
    st.sampled_from(["http", "https", "ftp"]), USERINFO, HOSTS, PORTS, ODD_TEXT.map(lambda t: t[:4]),
)  # fmt: skip
ENV_REFS = st.builds(lambda name: {"env": name}, st.sampled_from(["API_KEY", "1BAD", "A\x00", "x" * 300]))
NAMES = st.sampled_from(["X-Tenant", "X-Api-Key", "Authorization", "Cookie", "token", "page", "X A", "Idempotency-Key"])
STRING_MAPS = st.dictionaries(NAMES | ODD_TEXT, ODD_TEXT | ENV_REFS, max_size=3)


def deep(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


DEEP = st.integers(25, 40).map(deep)
ANY = st.one_of(INTS, FLOATS, DATES, DATETIMES, ODD_TEXT, URLS, DEEP, st.booleans())
TRIGGERS: dict[str, dict[str, Any]] = {
    "cron": {"kind": "cron", "expr": "30 2 * * *"},
    "interval": {"kind": "interval", "every": "15m"},
    "calendar": {"kind": "calendar", "every": 1, "unit": "months", "at": "09:30", "start_at": date(2026, 1, 31)},
    "once": {"kind": "once", "at": datetime(2026, 12, 24, 18, 0)},
}
# (path, values that fit the field's type there): mostly in-type extremes, so some still validate.
BOUNDARY_PATHS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("description",), ODD_TEXT),
    (("timezone",), ZONES | ODD_TEXT),
    (("labels",), STRING_MAPS),
    (("trigger", "start_at"), DATES | DATETIMES),
    (("trigger", "end_at"), DATES | DATETIMES),
    (("trigger", "at"), DATETIMES | DATES | st.sampled_from(["00:00", "23:59:59", ["00:00", "23:59:59"]])),
    (("trigger", "unit"), st.sampled_from(["days", "weeks", "months", "years"])),
    (("trigger", "every"), INTS | st.builds(lambda n, u: f"{n}{u}", INTS, st.sampled_from("smhd"))),
    (("trigger", "seconds"), INTS),
    (("trigger", "expr"), st.sampled_from(["* * * * *", "0 0 29 2 *", "59 23 31 12 *", "0 0 30 2 *"]) | ODD_TEXT),
    (("target", "url"), URLS),
    (("target", "headers"), STRING_MAPS),
    (("target", "query"), STRING_MAPS),
    (("target", "json"), ANY),
    (("target", "body"), ODD_TEXT),
    (("target", "timeout_seconds"), FLOATS | INTS),
    (("policy", "misfire_grace_seconds"), INTS),
    (("policy", "max_running_instances"), INTS),
    (("policy", "retries"), INTS),
    (("policy", "retry_backoff_seconds"), FLOATS | INTS),
    (("policy", "jitter_seconds"), INTS),
    (("policy", "keep_runs"), INTS),
]
AFTERS = [
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2026, 3, 29, 0, 30, tzinfo=UTC),
    datetime(9000, 12, 31, 23, 59, 59, tzinfo=UTC),
    HORIZON,
    datetime.max.replace(tzinfo=UTC),
]


@st.composite
def boundary_task(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["trigger"] = dict(TRIGGERS[draw(st.sampled_from(sorted(TRIGGERS)))])
    doc["target"].pop("body")
    for path, values in draw(st.lists(st.sampled_from(BOUNDARY_PATHS), min_size=1, max_size=3)):
        table = doc.setdefault(path[0], {}) if len(path) == 2 else doc
        table[path[-1]] = draw(values | ANY) if draw(st.integers(0, 9)) == 0 else draw(values)
        if path == ("trigger", "seconds"):
            table.pop("every", None)  # an interval takes one of them
    return doc


def fires_within_range(schedule: Any, zone: str) -> None:
    for after in AFTERS:
        for fire in upcoming(schedule, after, 3):
            assert FLOOR <= fire.at < HORIZON
            fire.at.astimezone(ZoneInfo(zone))


@settings(max_examples=300, deadline=None)
@given(doc=boundary_task())
def test_boundary_values_never_crash_and_what_validates_runs(doc: dict[str, Any]) -> None:
    text = tomli_w.dumps(doc)
    task, errors = load_text("t", "tasks.d/t.toml", text)
    for error in errors:  # one printable line each, whatever the input held
        assert str(error).startswith("tasks.d/t.toml:") and str(error).isprintable(), str(error)
    if task is None:
        assert errors
        return
    stored = json.dumps(task.normalized, allow_nan=False)  # strict JSON, as jsonb takes it
    assert "\\u0000" not in stored
    again = models.TaskSpec.model_validate(json.loads(stored))  # read back from the database
    assert again.normalized() == task.normalized
    fires_within_range(task.schedule, task.spec.timezone)
    fires_within_range(compile_schedule(again), again.timezone)


@settings(max_examples=25, deadline=None)
@given(doc=boundary_task())
def test_boundary_values_through_the_cli_never_raise(doc: dict[str, Any]) -> None:
    root = Path(tempfile.mkdtemp()) / "tasks.d"
    root.mkdir()
    try:
        (root / "t.toml").write_text(tomli_w.dumps(doc))
        for argv in (["validate"], ["next", "--count", "3", "--after", "9000-12-31T00:00:00Z"]):
            code, _, err = run_main(["--tasks-dir", str(root), *argv])
            assert code in (0, 1) and "Traceback" not in err
            assert all(line.startswith(str(root)) for line in err.splitlines()[:-1]), err
    finally:
        shutil.rmtree(root.parent)
