"""Validation messages name the problem (issue 12): the cron field and its range, the key or zone
the user probably meant, the line of a bad byte, the duration format; every error of a file in one
pass and in line order; one line each, never a traceback."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.files.problems import FileError
from reconciler.files.tasks import load_dir, load_text
from reconciler.spec.trigger import MAX_INTERVAL_SECONDS, cron_problem, every_seconds, parse_every
from tests.builders import cron_trigger
from tests.builders import task_text as task

URL = "http://127.0.0.1:9/x"


def cron(expr: str) -> str:
    return task(trigger=cron_trigger(expr))


def errors_of(text: str) -> list[FileError]:
    task_, errors = load_text("t", "tasks.d/t.toml", text)
    assert task_ is None, "expected the file to be refused"
    return errors


def line_of(text: str, fragment: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if fragment in line)


# ---------------------------------------------------------------- cron: the field and its range


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("0 25 * * *", "cron field hour: 25 is out of range 0-23"),
        ("60 * * * *", "cron field minute: 60 is out of range 0-59"),
        ("1-60 * * * *", "cron field minute: 60 is out of range 0-59"),
        ("0 0 0 * *", "cron field day of month: 0 is out of range 1-31"),
        ("0 0 32 * *", "cron field day of month: 32 is out of range 1-31"),
        ("0 0 * 13 *", "cron field month: 13 is out of range 1-12"),
        ("0 0 * 0 *", "cron field month: 0 is out of range 1-12"),
        ("0 0 * * 8", "cron field day of week: 8 is out of range 0-7"),
        ("0 0 * * 8-9", "cron field day of week: 8 is out of range 0-7"),
        ("0 0 * foo *", "cron field month: 'foo' is not a month name (allowed: 1-12 or JAN-DEC)"),
        ("0 0 * jna *", "cron field month: 'jna' is not a month name; did you mean JUN? (allowed: 1-12 or JAN-DEC)"),
        ("0 0 * * THUR", "cron field day of week: 'THUR' is not a day of week name; did you mean THU?"),
        ("0 0 * * mno", "(allowed: 0-7 or SUN-SAT)"),
        ("*/0 * * * *", "cron field minute: step 0 in '*/0' never advances; a step is at least 1"),
        ("0 0 1-31/0 * *", "cron field day of month: step 0 in '1-31/0' never advances"),
        ("*/x * * * *", "cron field minute: step 'x' in '*/x' is not a whole number"),
        ("/5 * * * *", "cron field minute: '/5' has no value before /"),
        ("1,,2 * * * *", "cron field minute: '1,,2' has an empty list item"),
        ("1-5-7 * * * *", "cron field minute: '1-5-7' is not a value or a range A-B (allowed: 0-59)"),
        ("1- * * * *", "cron field minute: '1-' is not a value or a range A-B"),
        ("a * * * *", "cron field minute: 'a' is not a number (allowed: 0-59)"),
        ("0 0 * * 0#6", "cron field day of week: '0#6': the week of the month after # is 1-5"),
        ("0 0 * * #2", "cron field day of week: '#2' needs a weekday before #"),
        ("R * * * *", "cron field minute: R (a random value) is not supported"),
        ("0 R * * *", "cron field hour: R (a random value) is not supported"),
        ("0 0 * * 1/R", ""),  # whatever croniter says, never a crash (checked below: refused)
        ("* * * *", "'* * * *' has 4 fields; cron needs 5 fields: minute hour day-of-month month day-of-week"),
        ("@dialy", "unknown macro '@dialy'; did you mean '@daily'?"),
        ("0 0 LW * *", "is not a valid cron expression (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or"),
    ],
)
def test_cron_error_names_field_and_range(expr: str, message: str) -> None:
    text = cron(expr)
    [error] = errors_of(text)
    assert (error.key, error.line) == ("trigger.expr", line_of(text, "expr")), str(error)
    assert message in error.message, str(error)


@pytest.mark.parametrize(
    "expr",
    [
        "5-2 * * * *",  # croniter wraps a reversed range: 5-59 and 0-2
        "0 22-2 * * *",
        "0 0 * * fri-mon",
        "0 0 * * 7",
        "0 0 * * 0-7",
        "*/60 * * * *",
        "5/10 * * * *",
        "0 0 L * *",
        "0 0 15W * *",
        "0 0 * * 5#3",
        "0 0 * * L5",
        "0 0 ? * *",
        "0 0 * JAN-MAR *",
        "01 * * * *",
        "@weekly",
        "@DAILY",
    ],
)
def test_cron_accepts_what_it_accepted_before(expr: str) -> None:
    assert cron_problem(expr) is None
    task_, errors = load_text("t", "tasks.d/t.toml", cron(expr))
    assert errors == [] and task_ is not None


CRON_ITEM = st.one_of(
    st.sampled_from(["*", "?", "L", "W", "#", "R", "H", "jan", "mon", "thu", "foo", "", "-", "/", ","]),
    st.integers(-1, 65).map(str),
)
CRON_FIELD = st.lists(CRON_ITEM, min_size=1, max_size=4).map("".join)


@settings(max_examples=400, deadline=None)
@given(fields=st.lists(CRON_FIELD, min_size=5, max_size=5))
def test_cron_accepts_exactly_what_croniter_accepts_except_random(fields: list[str]) -> None:
    """The messages only explain a refusal: acceptance stays croniter's, minus its random `R`."""
    expr = " ".join(fields)
    if len(expr.split()) != 5:
        return
    problem = cron_problem(expr)
    uses_random = any(item.upper().startswith("R") for field in expr.split() for item in field.split(","))
    if uses_random:
        assert problem is not None
    else:
        assert (problem is None) == bool(croniter.is_valid(expr)), (expr, problem)
    if problem is not None:
        assert "\n" not in problem and (problem.startswith("cron field ") or "cron expression" in problem), problem


# ---------------------------------------------------------------- did you mean


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        (task('descripton = "x"'), "descripton", "unknown key 'descripton'; did you mean 'description'?"),
        (task("Enabled = true"), "Enabled", "did you mean 'enabled'?"),
        (task(target="timout_seconds = 5"), "target.timout_seconds", "did you mean 'timeout_seconds'?"),
        (task(policy="retrys = 1"), "policy.retrys", "unknown key 'retrys'; did you mean 'retries'?"),
        (task(policy="misfire_grace = 1"), "policy.misfire_grace", "did you mean 'misfire_grace_seconds'?"),
        (task(trigger='kind = "cron"\nexpr = "0 * * * *"\nstart = 2026-01-01'), "trigger.start", "'start_at'?"),
        (
            task(target='[target.auth]\nkind = "bearer"\ntokn = { env = "T" }'),
            "target.auth.tokn",
            "did you mean 'token'?",
        ),
        (task(target='headers = { X-A = { evn = "A" } }'), "target.headers.X-A.evn", "did you mean 'env'?"),
        # Nothing close: the allowed keys are listed instead.
        (task("colour = 1"), "colour", "unknown key 'colour'; allowed here: description, enabled, labels"),
        (task(trigger='kind = "crn"'), "trigger.kind", "unknown kind 'crn'; did you mean 'cron'?"),
        (task(trigger='kind = "weekly"'), "trigger.kind", "unknown kind 'weekly'; use one of 'cron', 'interval'"),
        (
            task(policy='dst_gap = "shfit"'),
            "policy.dst_gap",
            "Input should be 'shift' or 'skip'; did you mean 'shift'?",
        ),
        (task(target='method = "PSOT"'), "target.method", "'PSOT' is not an HTTP method; did you mean 'POST'?"),
    ],
)
def test_unknown_names_suggest_the_closest(text: str, key: str, words: str) -> None:
    errors = errors_of(text)
    assert [e.key for e in errors] == [key], [str(e) for e in errors]
    assert words in errors[0].message, str(errors[0])
    assert errors[0].line == line_of(text, key.split(".")[-1]), str(errors[0])


@pytest.mark.parametrize(
    ("zone", "words"),
    [
        ("Europe/Berln", "unknown time zone 'Europe/Berln'; did you mean 'Europe/Berlin'?"),
        ("europe/berlin", "did you mean 'Europe/Berlin'?"),
        ("EUROPE/BERLIN", "did you mean 'Europe/Berlin'?"),
        ("America/NewYork", "did you mean 'America/New_York'?"),
        ("Berlin", "did you mean 'Europe/Berlin'?"),
        ("new york", "did you mean 'America/New_York'?"),
        ("utc", "did you mean 'UTC'?"),
        ("Mars/Olympus", "unknown time zone 'Mars/Olympus'; use an IANA name such as \"Europe/Berlin\""),
        ("Europe", "unknown time zone 'Europe'"),  # a folder of the zone database: once an IsADirectoryError
        ("../etc/passwd", "unknown time zone"),
    ],
)
def test_unknown_zone_suggests_the_closest_iana_name(zone: str, words: str) -> None:
    text = task(f'timezone = "{zone}"')
    [error] = errors_of(text)
    assert (error.key, error.line) == ("timezone", 1)
    assert words in error.message, str(error)


# ---------------------------------------------------------------- every error, in one pass, in line order


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # a cross-field check with a field error of the same table (pydantic skips "after" validators then)
            task(target='timout_seconds = 5\njson = { a = 1 }\nbody = "raw"'),
            [("target", "[target]"), ("target.timout_seconds", "timout")],
        ),
        (
            task(trigger='kind = "interval"\nevery = "1h"\nseconds = 60\ncolour = 1'),
            [("trigger", "[trigger]"), ("trigger.colour", "colour")],
        ),
        (
            task(trigger='kind = "calendar"\nunit = "days"\nat = "25:00"'),
            [("trigger", "[trigger]"), ("trigger.at", "at =")],
        ),
        (
            task(policy="retries = 20\nretry_backoff_seconds = 10\nkeep_run = 5"),
            [("policy", "[policy]"), ("policy.keep_run", "keep_run")],
        ),
        (  # window times are checked although another table failed; both DST problems are named
            task(
                'timezone = "Europe/Berlin"\ncolour = 1',
                trigger='kind = "cron"\nexpr = "0 * * * *"\nstart_at = 2026-03-29T02:30:00\n'
                "end_at = 2026-10-25T02:30:00",
            ),
            [("colour", "colour"), ("trigger.start_at", "start_at"), ("trigger.end_at", "end_at")],
        ),
        (
            task(trigger='kind = "cron"\nexpr = "0 * * * *"\nstart_at = 2027-01-01T00:00:00Z\nend_at = 2026-01-01'),
            [("trigger.end_at", "end_at")],
        ),
        (  # a value no model may see, and the other mistakes of the file
            task('description = "a\\u0000b"\ntimezone = "Europe/Berln"', target="timeout_seconds = nan\nbody = 1"),
            [
                ("description", "description"),
                ("timezone", "timezone"),
                ("target.timeout_seconds", "timeout"),
                ("target.body", "body"),
            ],
        ),
        (  # reported bottom-up by pydantic (nested tables last): sorted by line here
            "descripton = 1\n[target]\nurl = 5\n[policy]\nretries = -1\n"
            "[trigger]\nkind = 'cron'\nexpr = '0 25 * * *'\n",
            [("descripton", "descripton"), ("target.url", "url"), ("policy.retries", "retries"),
             ("trigger.expr", "expr")],
        ),
    ],
)  # fmt: skip
def test_every_error_of_a_file_in_one_pass_in_line_order(text: str, expected: list[tuple[str, str]]) -> None:
    errors = errors_of(text)
    assert [(e.key, e.line) for e in errors] == [(key, line_of(text, at)) for key, at in expected], [
        str(e) for e in errors
    ]


def test_errors_of_a_directory_come_file_by_file(tmp_path: Path) -> None:
    good = cron("0 * * * *")
    (tmp_path / "a.toml").write_text(good)
    (tmp_path / "b.toml").write_text('moved_from = "a"\ncolour = 1\n' + good)
    (tmp_path / "c.toml").write_text('moved_from = "a"\n' + good)
    (tmp_path / "d.toml").write_text("descripton = 1\n" + good)
    errors = load_dir(tmp_path, "tasks.d").errors
    assert [(e.path, e.line, e.key) for e in errors] == [
        ("tasks.d/b.toml", 2, "colour"),
        ("tasks.d/c.toml", 1, "moved_from"),
        ("tasks.d/d.toml", 1, "descripton"),
    ]


# ---------------------------------------------------------------- encodings


def test_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + task('description = "caf\u00e9"').encode())
    result = load_dir(tmp_path, "tasks.d")
    assert result.errors == []
    assert result.tasks[0].spec.description == "caf\u00e9"


@pytest.mark.parametrize(
    ("data", "line", "words"),
    [
        (b'description = "caf\xe9"\n', 1, "not UTF-8 text: byte 0xE9 in column 19 cannot be read as UTF-8"),
        (b'# ok\n\n[trigger]\nkind = "cron" # \xe9t\xe9\n', 4, "byte 0xE9 in column 17"),
        (b"# caf\xc3\xa9 ok\nx = '\xff'\n", 2, "byte 0xFF in column 6"),
        ("# a\n".encode("utf-16"), 1, "not UTF-8 text but UTF-16"),
    ],
)
def test_file_in_another_encoding_names_the_line_and_the_fix(
    tmp_path: Path, data: bytes, line: int, words: str
) -> None:
    (tmp_path / "t.toml").write_bytes(data)
    [error] = load_dir(tmp_path, "tasks.d").errors
    assert (error.path, error.line, error.key) == ("tasks.d/t.toml", line, "(file)")
    assert words in error.message and error.message.endswith("; save the file as UTF-8"), str(error)


# ---------------------------------------------------------------- intervals


@pytest.mark.parametrize(
    ("every", "seconds"),
    [
        ("90s", 90), ("15m", 900), ("6h", 21_600), ("2d", 172_800), (" 15 m ", 900),
        ("1h30m", 5_400), ("2d12h", 216_000), ("1m30s", 90), ("1d1h1m1s", 90_061), ("1h 30m", 5_400),
        ("0h30m", 1_800), ("36500d", MAX_INTERVAL_SECONDS),
    ],
)  # fmt: skip
def test_interval_units_combine_largest_first(every: str, seconds: int) -> None:
    assert parse_every(every) == seconds
    task_, errors = load_text("t", "tasks.d/t.toml", task(trigger=f'kind = "interval"\nevery = "{every}"'))
    assert errors == [] and task_ is not None
    assert task_.spec.trigger.period_seconds == seconds  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("every", "reason"),
    [
        ("30m1h", "h after m: units go largest first, each once"),
        ("1h1h", "h after h"),
        ("5 weeks", "unknown unit 'weeks'"),
        ("1H", "unknown unit 'H'; units are lower-case (h)"),
        ("1.5h", "whole numbers only"),
        ("0s", "it is zero"),
        ("0h0m", "it is zero"),
        ("h", "a number and a unit are expected"),
        ("1h30", "a number and a unit are expected"),
        ("", "no number with a unit"),
        ("99999999999999999999s", "more than 15 digits"),
    ],
)
def test_interval_garbage_names_the_format(every: str, reason: str) -> None:
    assert parse_every(every) is None
    text = task(trigger=f'kind = "interval"\nevery = "{every}"')
    [error] = errors_of(text)
    assert (error.key, error.line) == ("trigger.every", line_of(text, "every"))
    assert error.message.startswith(f"{every!r} is not a positive duration ("), str(error)
    assert reason in error.message, str(error)
    assert error.message.endswith('; write whole numbers with units d, h, m, s, largest first, e.g. "90s", "15m", '
                                  '"1h30m" or "2d12h"'), str(error)  # fmt: skip


def test_interval_keeps_its_bound() -> None:
    [error] = errors_of(task(trigger='kind = "interval"\nevery = "36499d24h1s"'))
    assert "longer than 36500d (100 years)" in error.message


# ---------------------------------------------------------------- one line, never a traceback

KEYS = st.sampled_from(
    ["description", "descripton", "timezone", "kind", "expr", "every", "seconds", "at", "start_at", "end_at", "url",
     "json", "body", "method", "timout_seconds", "retries", "retry_backoff_seconds", "unit", "dst_gap", "Enabled"]
)  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(
        ['"cron"', '"interval"', '"once"', '"calendar"', '"0 25 * * *"', '"1h30m"', '"30m1h"', '"Europe/Berln"',
         "2026-03-29T02:30:00", "2026-01-01", '"09:30"', f'"{URL}"', "{ a = 1 }", "nan", "-1", "20", '"shfit"',
         '"days"', "[1, 2]", '"a\\u0000b"', "9999-12-31T00:00:00"]
    ),
    st.integers(-(2**70), 2**70).map(str),
    st.text(string.printable, max_size=8).map(lambda t: '"' + t.replace("\\", "").replace('"', "") + '"'),
)  # fmt: skip
LINES = st.one_of(
    st.sampled_from(["[trigger]", "[target]", "[policy]", "[target.auth]", "[labels]"]),
    st.builds(lambda k, v: f"{k} = {v}", KEYS, VALUES),
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINES, max_size=14))
def test_tomlish_input_gives_one_line_errors_in_line_order(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    task_, errors = load_text("t", "tasks.d/t.toml", text)
    assert (task_ is None) == bool(errors)
    for error in errors:
        shown = str(error)
        assert shown.startswith("tasks.d/t.toml:") and shown.isprintable() and "\n" not in shown, shown
        assert "Traceback" not in shown and 0 <= error.line <= len(lines)
    assert [e.line for e in errors] == sorted(e.line for e in errors)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=12))
def test_every_seconds_never_raises(text: str) -> None:
    found = every_seconds(text)
    assert isinstance(found, str) or found > 0
