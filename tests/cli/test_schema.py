"""`reconciler schema`: the committed JSON Schema is the models' own, and a real validator (check-jsonschema)
accepts every example task file with it and refuses unknown keys, as `validate` does."""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tomllib
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

import pytest

from reconciler.cli.parser import build_parser
from reconciler.files.registry import KINDS
from reconciler.files.tasks import validate_data
from tests.builders import run_reconciler

ROOT = Path(__file__).parent.parent.parent
TASK_SCHEMA = ROOT / "schema" / "task.schema.json"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
EXAMPLES = sorted((ROOT / "tasks.d").rglob("*.toml"))


def as_json(data: dict[str, Any], path: Path) -> Path:
    """Parsed TOML as the JSON a schema validator reads: dates, date-times and times as ISO strings."""

    def iso(value: object) -> str:
        if isinstance(value, date | datetime | time):
            return value.isoformat()
        raise TypeError(f"{type(value).__name__} has no JSON form")

    path.write_text(json.dumps(data, default=iso))
    return path


def check(*files: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema, the real CLI, on `files` with the committed task schema."""
    return subprocess.run(
        [str(CHECK_JSONSCHEMA), "--verbose", "--schemafile", str(TASK_SCHEMA), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def example(name: str = "billing/invoices") -> dict[str, Any]:
    return tomllib.loads((ROOT / "tasks.d" / f"{name}.toml").read_text())


@pytest.mark.parametrize("kind", sorted(kind.name for kind in KINDS))
def test_committed_schema_is_what_reconciler_schema_prints(kind: str) -> None:
    done = run_reconciler("schema", "--kind", kind, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    command = "reconciler schema" + ("" if kind == "task" else f" --kind {kind}")
    committed = ROOT / "schema" / f"{kind}.schema.json"
    assert committed.is_file() and done.stdout == committed.read_text(), (
        f"schema/{kind}.schema.json differs from the models; regenerate it: {command} > schema/{kind}.schema.json"
    )


def test_schema_names_its_dialect_id_and_title() -> None:
    schema = json.loads(TASK_SCHEMA.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] and schema["title"] == "reconciler task file"
    assert schema["additionalProperties"] is False


def test_schema_kinds_are_the_cli_choices() -> None:
    [commands] = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    [kind] = [action for action in commands.choices["schema"]._actions if action.dest == "kind"]
    assert list(kind.choices or ()) == [found.name for found in KINDS]


def test_every_example_task_file_validates_with_check_jsonschema(tmp_path: Path) -> None:
    assert len(EXAMPLES) >= 5
    files = [
        as_json(tomllib.loads(path.read_text()), tmp_path / f"{index}-{path.stem}.json")
        for index, path in enumerate(EXAMPLES)
    ]
    done = check(*files)
    assert done.returncode == 0, done.stdout + done.stderr


# Files the loader accepts that the examples do not show: each must pass the schema too.
VALID_VARIANTS = {
    "once at an instant with an offset": 'at = 2026-12-24T09:00:00Z\nkind = "once"',
    "once at a local date-time with a space": 'at = 2026-12-24 18:00:00\nkind = "once"',
    "calendar at a TOML local time": 'kind = "calendar"\nunit = "days"\nat = 09:30:00\nstart_at = 2026-01-01',
    "calendar at several times": 'kind = "calendar"\nunit = "weeks"\nat = ["09:30", "17:00"]\nstart_at = 2026-01-01',
    "interval in seconds with a window": (
        'kind = "interval"\nseconds = 90\nstart_at = 2026-01-01T00:00:00+01:00\nend_at = 2027-01-01'
    ),
}


def test_valid_variants_pass_the_schema_and_the_loader(tmp_path: Path) -> None:
    files = []
    for index, trigger in enumerate(VALID_VARIANTS.values()):
        data = tomllib.loads(f'[trigger]\n{trigger}\n[target]\nurl = "http://127.0.0.1:9/"\n')
        task, errors = validate_data("variant", "variant.toml", data)
        assert task is not None, errors
        files.append(as_json(data, tmp_path / f"variant-{index}.json"))
    done = check(*files)
    assert done.returncode == 0, done.stdout + done.stderr


def _with(change: str) -> dict[str, Any]:
    """billing/invoices with one mistake."""
    data = example()
    edited = copy.deepcopy(data)
    if change == "top-level":
        edited["colour"] = "red"
    elif change == "trigger":
        edited["trigger"]["exprs"] = "0 3 * * *"
    elif change == "policy":
        edited["policy"]["retry"] = 3
    elif change == "env reference":
        edited["target"]["headers"]["X-Api-Key"] = {"env": "BILLING_API_KEY", "default": "x"}
    elif change == "auth":
        edited["target"]["auth"] = {"kind": "bearer", "token": {"env": "T"}, "tokn": {"env": "T"}}
    return edited


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ("top-level", "colour"),
        ("trigger", "exprs"),
        ("policy", "retry"),
        ("env reference", "default"),
        ("auth", "tokn"),
    ],
)
def test_unknown_key_fails_check_jsonschema(change: str, key: str, tmp_path: Path) -> None:
    data = _with(change)
    assert validate_data("billing/invoices", "invoices.toml", data)[0] is None  # the loader refuses it too
    done = check(as_json(data, tmp_path / "bad.json"))
    assert done.returncode != 0
    assert f"'{key}' was unexpected" in done.stdout + done.stderr


def test_unknown_kind_and_wrong_type_fail_check_jsonschema(tmp_path: Path) -> None:
    wrong_kind = example()
    wrong_kind["trigger"]["kind"] = "hourly"
    wrong_type = example()
    wrong_type["enabled"] = "yes"
    for index, data in enumerate((wrong_kind, wrong_type)):
        assert check(as_json(data, tmp_path / f"bad-{index}.json")).returncode != 0


def test_unknown_schema_kind_is_a_usage_error() -> None:
    done = run_reconciler("schema", "--kind", "alert", cwd=ROOT)
    assert done.returncode == 1 and "invalid choice" in done.stderr and "Traceback" not in done.stderr


NOTIFIER_SCHEMA = ROOT / "schema" / "notifier.schema.json"
NOTIFIERS = {
    "webhook": 'kind = "webhook"\nurl = "https://hooks.example.com/x"\nheaders = { X-Team = "ops" }\n'
    'timeout_seconds = 5\n[auth]\nkind = "bearer"\ntoken = { env = "HOOK_TOKEN" }\n',
    "slack": 'kind = "slack"\nurl = { env = "SLACK_WEBHOOK_URL" }\n',
}


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (NOTIFIERS["webhook"], True),
        (NOTIFIERS["slack"], True),
        (NOTIFIERS["webhook"].replace("timeout_seconds = 5", "json = { a = 1 }"), False),  # the event is the body
        (NOTIFIERS["slack"] + 'colour = "red"\n', False),
        ('kind = "slack"\nurl = "https://hooks.slack.com/services/x"\n', False),  # a secret only from the env
        ('kind = "email"\n', False),
    ],
)
def test_notifier_files_pass_the_notifier_schema_as_validate_says(text: str, ok: bool, tmp_path: Path) -> None:
    from reconciler.files.notifiers import validate_notifier

    assert (validate_notifier("n", "n.toml", text)[0] is not None) == ok
    done = subprocess.run(
        [
            str(CHECK_JSONSCHEMA),
            "--schemafile",
            str(NOTIFIER_SCHEMA),
            str(as_json(tomllib.loads(text), tmp_path / "n.json")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode == 0) == ok, done.stdout + done.stderr


CALENDAR_SCHEMA = ROOT / "schema" / "calendar.schema.json"
BUSINESS = 'kind = "business_days"\nweekend = ["fri", "sat"]\nholidays = { country = "US", subdivision = "NY" }\n'
FREEZE = 'kind = "blackout"\ntimezone = "Europe/Berlin"\n[[window]]\ncron = "0 22 * * 5"\nduration = "56h"\n'


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (BUSINESS, True),
        (BUSINESS + "extra_holidays = [2026-12-24]\nextra_workdays = [2026-11-28]\n", True),
        (FREEZE, True),
        (FREEZE + "[[window]]\nfrom = 2026-12-20T00:00:00\nuntil = 2027-01-04T00:00:00\n", True),
        (BUSINESS.replace('"fri"', '"friday"'), False),  # weekday names are mon..sun
        (BUSINESS + 'colour = "red"\n', False),
        (FREEZE.replace("[[window]]", "[[windows]]"), False),
        ('kind = "holiday"\n', False),
    ],
)
def test_calendar_files_pass_the_calendar_schema_as_validate_says(text: str, ok: bool, tmp_path: Path) -> None:
    from reconciler.files.calendars import CALENDARS
    from reconciler.files.kinds import validate

    assert (validate(CALENDARS, "c", "c.toml", text)[0] is not None) == ok
    data = tomllib.loads(text)
    done = subprocess.run(
        [str(CHECK_JSONSCHEMA), "--schemafile", str(CALENDAR_SCHEMA), str(as_json(data, tmp_path / "c.json"))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode == 0) == ok, done.stdout + done.stderr


LIMIT_SCHEMA = ROOT / "schema" / "limit.schema.json"


def schema_says(schema: Path, text: str, tmp_path: Path) -> bool:
    """Whether check-jsonschema, the real CLI, accepts the TOML `text` with `schema`."""
    data = as_json(tomllib.loads(text), tmp_path / "file.json")
    done = subprocess.run(
        [str(CHECK_JSONSCHEMA), "--schemafile", str(schema), str(data)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.returncode == 0


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("max_in_flight = 4\n", True),
        ('rate_per_second = 10.0\nburst = 20\ndescription = "the billing API"\n', True),
        ("max_in_flight = 4\nrate_per_second = 0.5\n", True),
        ("max_in_flight = 0\n", False),
        ("max_in_flight = 2.5\n", False),
        ('rate_per_second = "10"\n', False),
        ("rate_per_second = 0\n", False),
        ("max_in_flight = 2147483648\n", False),
        ("max_inflight = 4\n", False),
    ],
)
def test_limit_files_pass_the_limit_schema_as_validate_says(text: str, ok: bool, tmp_path: Path) -> None:
    from reconciler.files.kinds import validate
    from reconciler.files.limits import LIMITS

    assert (validate(LIMITS, "l", "l.toml", text)[0] is not None) == ok
    assert schema_says(LIMIT_SCHEMA, text, tmp_path) == ok
