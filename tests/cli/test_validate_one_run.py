"""`validate` as a user meets it: every error of every file and kind in one run (the references of a file with
other errors too), each on its own line of its file, sorted by file then line; readable paths in its summary; and a
warning for a calendar or limit that no task names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.builders import cli, run_reconciler

FILES = {
    "calendars.d/us.toml": 'kind = "business_days"\nweekend = ["sat", "sun"]\n',
    "calendars.d/freeze.toml": """kind = "blackout"
timezone = "Europe/Berlin"

[[window]]
from = 2026-10-25T02:30:00
until = 2026-10-26T00:00:00

[[window]]
cron = "0 22 * * 5"
duration = "56x"

[[window]]
from = 2026-11-01T00:00:00
until = 2026-10-01T00:00:00
""",
    "limits.d/api.toml": "max_in_flight = 2\n",
    "tasks.d/a.toml": """[trigger]
kind = "cron"
expr = "0 9 * * *"
business_days = "nope"

[target]
url = "http://127.0.0.1:9/a"
timeout_seconds = -5

[policy]
limits = ["ghost", "api"]
""",
    "tasks.d/b.toml": """[trigger]
kind = "cron"
expr = "0 9 * * *"

[target]
url = "http://127.0.0.1:9/b"
methd = "GET"

[policy]
blackouts = ["us", "freeze"]
""",
}
# (file:line, key, a piece of the message), in the order validate prints them
EXPECTED = [
    ("calendars.d/freeze.toml:5", "window.0.from", "happens twice (DST overlap)"),
    ("calendars.d/freeze.toml:10", "window.1.duration", "is not a positive duration"),
    ("calendars.d/freeze.toml:12", "window.2", "until (2026-10-01T00:00:00) must be after from"),
    ("tasks.d/a.toml:4", "trigger.business_days", "no calendar 'nope' in calendars.d"),
    ("tasks.d/a.toml:8", "target.timeout_seconds", "must be more than 0"),
    ("tasks.d/a.toml:11", "policy.limits", "no limit 'ghost' in limits.d"),
    ("tasks.d/b.toml:7", "target.methd", "did you mean 'method'?"),
    ("tasks.d/b.toml:10", "policy.blackouts", "calendar 'us' is a business_days calendar"),
]


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_every_error_of_every_file_and_kind_in_one_run_on_its_line_in_file_order(tmp_path: Path) -> None:
    write(tmp_path, FILES)
    done = run_reconciler("validate", cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == "8 error(s) in tasks.d, calendars.d and limits.d; nothing was changed", done.stderr
    assert len(lines) == len(EXPECTED) + 1, done.stderr
    for line, (where, key, piece) in zip(lines, EXPECTED, strict=False):
        assert line.startswith(f"{where}: {key}: ") and piece in line, line


def test_the_line_of_the_nth_table_of_an_array_of_tables(tmp_path: Path) -> None:
    text = 'kind = "blackout"\n[[window]]\nfrom = 2026-01-01\nuntil = 2026-01-02\n\n[[window]]\nfrom = "x"\n'
    write(tmp_path, {"calendars.d/f.toml": text, "tasks.d/t.toml": FILES["tasks.d/a.toml"]})
    code, _, err = cli(None, tmp_path / "tasks.d", "validate")
    assert code == 1 and re.search(r"calendars\.d/f\.toml:7: window\.1\.from: ", err), err


@pytest.mark.parametrize("where", ["tasks.d/billing", "tasks.d"])
def test_validate_names_the_tasks_directory_readably(tmp_path: Path, where: str) -> None:
    write(
        tmp_path, {"tasks.d/billing/x.toml": '[trigger]\nkind = "cron"\nexpr = "@daily"\n[target]\nurl = "http://h/"\n'}
    )
    (tmp_path / ".git").mkdir()
    done = run_reconciler("validate", cwd=tmp_path / where)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"1 task file(s) in {tmp_path.resolve() / 'tasks.d'} are valid"), done.stdout


def test_a_calendar_or_limit_no_task_names_is_a_warning(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "calendars.d/spare.toml": FILES["calendars.d/us.toml"],
            "limits.d/api.toml": "max_in_flight = 2\n",
            "tasks.d/t.toml": '[trigger]\nkind = "cron"\nexpr = "@daily"\n[target]\nurl = "http://h/"\n',
        },
    )
    done = run_reconciler("validate", cwd=tmp_path)
    assert done.returncode == 0 and "(2 warning(s) on stderr)" in done.stdout, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "calendars.d/spare.toml:0: warning: (file): no task names calendar 'spare'; delete it, or name it in a "
        "task's trigger.business_days or policy.blackouts",
        "limits.d/api.toml:0: warning: (file): no task names limit 'api'; delete it, or name it in a task's "
        "policy.limits",
    ]


def test_the_docs_say_watch_applies_nothing_while_a_file_is_invalid() -> None:
    docs = (Path(__file__).parent.parent.parent / "docs" / "cli.md").read_text()
    [row] = [line for line in docs.splitlines() if line.startswith("| `reconciler watch")]
    assert "reported and skipped" not in row
    assert "while any file is invalid, nothing is applied" in row
