"""Fuzzed task files: `validate` and `plan` never crash; a bad file is always named, with exit 1.

Three kinds of input: arbitrary text; a valid task with one mutation that surely breaks it
(unknown key, wrong type, missing required key); and a valid task with raw characters
spliced into its TOML (which may or may not stay valid: then only "no crash, well-formed
lines" is required).
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from reconciler import models
from reconciler.cli import main

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


FILES = st.lists(
    st.tuples(st.sampled_from(["surely_bad", "garbage", "spliced"]), st.data()), min_size=1, max_size=4
)
LINE = r"^{root}/(?P<file>[^:/]+\.toml):(?P<line>\d+): (?P<key>[^:]+): .+$"


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


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
            code, _, err = run_cli(["--tasks-dir", str(root), "--dsn", dsn, command])
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
