"""`validate --check-env`: every `{ env = NAME }` not set here, one line each; values never shown."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.builders import run_reconciler

ROOT = Path(__file__).parent.parent.parent
TASK = """\
[trigger]
kind = "cron"
expr = "0 3 * * *"

[target]
url = "http://127.0.0.1:9/hook"
headers = { X-Tenant = "eu", X-Api-Key = { env = "T_API_KEY" } }
query = { sig = { env = "T_SIGNATURE" } }

[target.auth]
kind = "basic"
username = { env = "T_USER" }
password = { env = "T_PASSWORD" }
"""
NAMES = ("T_API_KEY", "T_SIGNATURE", "T_USER", "T_PASSWORD")
SECRET = "s3cret-value-never-shown"


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks.d"
    (folder / "billing").mkdir(parents=True)
    (folder / "billing" / "invoices.toml").write_text(TASK)
    (folder / "plain.toml").write_text(
        '[trigger]\nkind = "interval"\nevery = "1h"\n[target]\nurl = "http://127.0.0.1:9/"\n'
    )
    return folder


def validate(tasks: Path, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`reconciler validate OPTIONS` run from the project folder with exactly the T_* variables given."""
    dropped = ("RECONCILER_DSN", "DATABASE_URL")
    base = {k: v for k, v in os.environ.items() if not k.startswith("T_") and k not in dropped}
    return run_reconciler("validate", *options, cwd=tasks.parent, env={**base, **env}, timeout=60)


def test_each_unset_variable_is_one_line_naming_file_key_and_variable(tasks: Path) -> None:
    done = validate(tasks, "--check-env", T_USER="storefront")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "storefront" not in done.stderr + done.stdout
    assert done.stderr.splitlines() == [
        "tasks.d/billing/invoices.toml:7: target.headers.X-Api-Key: environment variable T_API_KEY is not set",
        "tasks.d/billing/invoices.toml:8: target.query.sig: environment variable T_SIGNATURE is not set",
        "tasks.d/billing/invoices.toml:13: target.auth.password: environment variable T_PASSWORD is not set",
        "3 error(s) in tasks.d: variables not set in this environment",
    ]


def test_all_variables_set_passes_without_showing_values(tasks: Path) -> None:
    done = validate(tasks, "--check-env", **dict.fromkeys(NAMES, SECRET))
    assert done.returncode == 0, done.stderr
    assert "2 task file(s) in tasks.d are valid" in done.stdout
    assert SECRET not in done.stdout + done.stderr


def test_an_empty_value_counts_as_set(tasks: Path) -> None:
    # Set but empty is the engine's business (it sends what it reads); --check-env reports what is missing.
    assert validate(tasks, "--check-env", **dict.fromkeys(NAMES, "")).returncode == 0


def test_without_the_flag_unset_variables_are_not_checked(tasks: Path) -> None:
    done = validate(tasks)
    assert done.returncode == 0 and done.stderr == ""


def test_check_env_and_env_policy_report_together(tasks: Path) -> None:
    env = dict.fromkeys(("T_API_KEY", "T_SIGNATURE", "T_USER"), SECRET)
    done = validate(tasks, "--check-env", "--env-policy", "--allow-env", "T_API_KEY,T_SIGNATURE,T_PASSWORD", **env)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert (
        "tasks.d/billing/invoices.toml:12: target.auth.username: environment variable T_USER is not allowed"
        in (lines[0])
    )
    assert lines[1] == (
        "tasks.d/billing/invoices.toml:13: target.auth.password: environment variable T_PASSWORD is not set"
    )
    assert lines[2:] == [
        "1 error(s) in tasks.d: variables the engines will not let tasks read",
        "1 error(s) in tasks.d: variables not set in this environment",
    ]
    assert SECRET not in done.stdout + done.stderr


def test_invalid_files_are_reported_before_any_environment_check(tasks: Path) -> None:
    (tasks / "broken.toml").write_text('[trigger]\nkind = "cron"\nexpr = "61 * * * *"\n[target]\nurl = "x"\n')
    done = validate(tasks, "--check-env")
    assert done.returncode == 1
    assert "broken.toml" in done.stderr and "is not set" not in done.stderr
