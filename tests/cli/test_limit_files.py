"""Limit files and the limits tasks name, as a new user and an attacker write them: every mistake is one line
naming the file, the line, the key and the fix, all of them in one `validate` run, never a traceback; and
fuzzed limit files never crash the loader."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.files.kinds import validate
from reconciler.files.limits import LIMITS, load_limits
from reconciler.spec.limit import MAX_BURST, MAX_IN_FLIGHT, MAX_RATE, MIN_RATE
from tests.builders import run_reconciler, unnamed_mistakes, write_tasks

TARGET = '[target]\nurl = "https://example.com/x"\n'
GOOD = "max_in_flight = 4\nrate_per_second = 10.0\n"

# (file name, its text, the key its error names, a piece of the message)
BAD_LIMITS = [
    ("empty", "", "(file)", "empty limit file; write max_in_flight = N (runs at once), rate_per_second = R"),
    ("neither", 'description = "x"\n', "(file)", "a limit needs max_in_flight = N, rate_per_second = R, or both"),
    ("burst-alone", "max_in_flight = 3\nburst = 5\n", "burst", "burst is the bucket of rate_per_second; set rate"),
    ("rate-zero", "rate_per_second = 0\n", "rate_per_second", "must be at least 0.001 (got 0)"),
    ("rate-negative", "rate_per_second = -2.5\n", "rate_per_second", "must be at least 0.001 (got -2.5)"),
    ("rate-nan", "rate_per_second = nan\n", "rate_per_second", "nan is not a finite number; write a number"),
    ("rate-inf", "rate_per_second = inf\n", "rate_per_second", "inf is not a finite number; write a number"),
    ("rate-text", 'rate_per_second = "NaN"\n', "rate_per_second", "write rate_per_second = 10 or 0.5"),
    ("rate-huge", "rate_per_second = 1e300\n", "rate_per_second", "must be at most 100000.0"),
    ("in-flight-2-31", "max_in_flight = 2147483648\n", "max_in_flight", "must be at most 100000 (got 2147483648)"),
    ("in-flight-2-64", "max_in_flight = 18446744073709551616\n", "max_in_flight", "TOML integers are 64-bit"),
    ("in-flight-zero", "max_in_flight = 0\n", "max_in_flight", "must be at least 1 (got 0)"),
    ("in-flight-float", "max_in_flight = 2.5\n", "max_in_flight", "(got float); write max_in_flight = 4"),
    ("in-flight-whole", "max_in_flight = 4.0\n", "max_in_flight", "write max_in_flight = 4 (a whole number"),
    ("in-flight-text", 'max_in_flight = "4"\n', "max_in_flight", "(got str); write max_in_flight = 4"),
    ("in-flight-bool", "max_in_flight = true\n", "max_in_flight", "(got bool); write max_in_flight = 4"),
    ("burst-zero", "rate_per_second = 1\nburst = 0\n", "burst", "must be at least 1 (got 0)"),
    ("burst-float", "rate_per_second = 1\nburst = 1.5\n", "burst", "write burst = 20 (a whole number"),
    ("typo", "max_inflight = 4\n", "max_inflight", "unknown key 'max_inflight'; did you mean 'max_in_flight'?"),
    ("table", "[rate_per_second]\nvalue = 1\n", "rate_per_second", "Input should be a valid number"),
    ("nul", 'max_in_flight = 1\ndescription = "a\\u0000b"\n', "description", "NUL"),
    ("syntax", "max_in_flight = \n", "toml", "fix the TOML syntax"),
]
# (task file name, its [policy] table, the key its error names, a piece of the message)
BAD_TASKS = [
    ("unknown", 'limits = ["billing-apl"]', "policy.limits", "did you mean 'billing-api'? add "),
    ("twice", 'limits = ["billing-api", "billing-api"]', "policy.limits", "is named twice"),
    ("not-a-list", 'limits = "billing-api"', "policy.limits", "valid list"),
    ("bad-name", 'limits = ["Billing API"]', "policy.limits.0", "is not a limit name"),
    ("too-many", "limits = [" + ", ".join(f'"l{n}"' for n in range(9)) + "]", "policy.limits", "at most 8"),
    ("key", 'limit = ["billing-api"]', "policy.limit", "did you mean 'limits'?"),
]


def cron(extra: str = "") -> str:
    return '[trigger]\nkind = "cron"\nexpr = "0 9 * * *"\n' + TARGET + extra


def test_every_mistake_is_one_line_naming_file_key_and_fix_in_one_run(tmp_path: Path) -> None:
    files = {"billing-api": GOOD, "Billing API": GOOD, "nested/deep": GOOD}
    write_tasks(tmp_path / "limits.d", {**files, **{name: text for name, text, _, _ in BAD_LIMITS}})
    named = {name: cron(f"[policy]\n{policy}\n") for name, policy, _, _ in BAD_TASKS}
    # a task naming a limit whose file has errors: they are reported there, once
    tasks = write_tasks(tmp_path / "tasks.d", {**named, "invalid-one": cron('[policy]\nlimits = ["typo"]\n')})
    done = run_reconciler("--tasks-dir", str(tasks), "validate")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    for folder, cases in (("limits.d", BAD_LIMITS), ("tasks.d", BAD_TASKS)):
        assert unnamed_mistakes(done.stderr, folder, {name: (key, piece) for name, _, key, piece in cases}) == []
    assert "limits.d/Billing API.toml:0: name: a limit's file name must match" in done.stderr
    assert "rename the file" in done.stderr
    assert "limits.d/nested/deep.toml:0: (file): limit files sit directly in " in done.stderr
    assert "invalid-one.toml" not in done.stderr
    lines = done.stderr.splitlines()
    assert sum("billing-apl" in line for line in lines) == 1
    assert lines[-1].endswith("limits.d; nothing was changed"), lines[-1]
    # one line per mistake (a misspelt key also says what a limit needs), and the count
    assert len(lines) == len(BAD_LIMITS) + len(BAD_TASKS) + 4


def test_a_task_naming_a_limit_without_a_limits_directory_is_told_to_add_it(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.d"
    tasks.mkdir()
    (tasks / "a.toml").write_text(cron('[policy]\nlimits = ["billing-api"]\n'))
    done = run_reconciler("--tasks-dir", str(tasks), "validate")
    assert done.returncode == 1
    assert (
        f"a.toml:7: policy.limits: no limit 'billing-api' in {tmp_path / 'limits.d'} (used by 1 task(s): a); "
        f"add {tmp_path / 'limits.d'}/billing-api.toml, or stop naming it in those tasks"
    ) in done.stderr, done.stderr


def test_a_limits_dir_named_on_the_command_line_must_exist(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.d"
    tasks.mkdir()
    done = run_reconciler("--tasks-dir", str(tasks), "--limits-dir", str(tmp_path / "nope"), "validate")
    assert done.returncode == 1
    assert "nope:0: (file): directory not found; create it or pass another --limits-dir" in done.stderr
    (tmp_path / "file").write_text("")
    done = run_reconciler("--tasks-dir", str(tasks), "--limits-dir", str(tmp_path / "file"), "validate")
    assert "is not a directory; make it the directory of limit files, or pass --limits-dir" in done.stderr


@pytest.mark.parametrize(
    ("text", "bucket"),
    [("rate_per_second = 0.001\n", 1), ("rate_per_second = 2.5\n", 3), ("rate_per_second = 10\nburst = 50\n", 50)],
)
def test_the_bucket_is_the_burst_else_the_rate_rounded_up(text: str, bucket: int, tmp_path: Path) -> None:
    (tmp_path / "limit.toml").write_text(text)
    loaded = load_limits(tmp_path)
    assert loaded.errors == [] and loaded.by_name["limit"].spec.bucket == bucket


# ---------------------------------------------------------------- fuzzed files

KEYS = ["max_in_flight", "rate_per_second", "burst", "description", "max_inflight", "rate", "kind"]
VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 1, MAX_IN_FLIGHT, MAX_IN_FLIGHT + 1, MAX_BURST, 2**31, -(2**31)]),
    st.floats(),
    st.sampled_from([0.0, MIN_RATE, MIN_RATE / 2, MAX_RATE, MAX_RATE * 2, -0.0, 5e-324]),
    st.text(max_size=8),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=400, deadline=None)
@given(doc=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4))
def test_fuzzed_limit_files_never_crash_and_what_validates_keeps_the_bounds(doc: dict[str, Any]) -> None:
    limit, errors = validate(LIMITS, "fuzzed", "limits.d/fuzzed.toml", tomli_w.dumps(doc))  # NaN as `nan`
    assert (limit is None) == bool(errors)
    for error in errors:
        assert error.path == "limits.d/fuzzed.toml" and "\n" not in str(error) and error.key
    if limit is None:
        return
    spec = limit.spec
    assert spec.max_in_flight is not None or spec.rate_per_second is not None
    if spec.max_in_flight is not None:
        assert isinstance(spec.max_in_flight, int) and 1 <= spec.max_in_flight <= MAX_IN_FLIGHT
    if spec.rate_per_second is not None:
        assert math.isfinite(spec.rate_per_second) and MIN_RATE <= spec.rate_per_second <= MAX_RATE
        assert spec.bucket is not None and 1 <= spec.bucket <= MAX_BURST
    else:
        assert spec.burst is None and spec.bucket is None
    reloaded, _ = validate(LIMITS, "fuzzed", "limits.d/fuzzed.toml", tomli_w.dumps(limit.normalized))
    assert reloaded is not None and reloaded.spec_hash == limit.spec_hash
