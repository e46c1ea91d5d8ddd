"""What tasks may read from the engine's environment, and scrubbing what they read."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli.parser import main
from reconciler.spec.environment import EnvPolicy, globs
from reconciler.spec.values import EnvRef
from reconciler.targets.secrets import EnvProblem, RunSecrets, storable


@pytest.mark.parametrize(
    ("allow", "name", "allowed"),
    [
        ((), "BILLING_API_KEY", True),
        ((), "RECONCILER_DSN", False),
        ((), "DATABASE_URL", False),
        ((), "PGPASSWORD", False),
        (("BILLING_*",), "BILLING_API_KEY", True),
        (("BILLING_*",), "OTHER", False),
        (("PG*",), "PGPASSWORD", True),  # an explicit allow-list is taken at its word
    ],
)
def test_env_policy(allow: tuple[str, ...], name: str, allowed: bool) -> None:
    assert EnvPolicy(allow).allows(name) is allowed


def test_globs_split_commas_and_repeats() -> None:
    assert globs(["A_*,B", " C "]) == ("A_*", "B", "C")


def test_forbidden_and_missing_variables_name_the_variable_never_a_value() -> None:
    secrets = RunSecrets({"RECONCILER_DSN": "host=db password=hunter22"}, EnvPolicy())
    with pytest.raises(EnvProblem, match="RECONCILER_DSN") as forbidden:
        secrets.resolve(EnvRef(env="RECONCILER_DSN"), "target.headers.X")
    assert "hunter22" not in str(forbidden.value)
    with pytest.raises(EnvProblem, match="API_KEY is not set"):
        secrets.resolve(EnvRef(env="API_KEY"), "target.headers.X")


def test_scrub_covers_encoded_forms_and_basic_credentials() -> None:
    secrets = RunSecrets({"KEY": 'a b/c+d"e', "PW": "pass-word"}, EnvPolicy())
    secrets.resolve(EnvRef(env="KEY"), "k")
    secrets.remember_basic(secrets.resolve(EnvRef(env="PW"), "p"), "Basic c3ZjOnBhc3Mtd29yZA==")
    echoed = 'raw a b/c+d"e url a%20b%2Fc%2Bd%22e plus a+b%2Fc%2Bd%22e json a b/c+d\\"e basic c3ZjOnBhc3Mtd29yZA=='
    assert secrets.scrub(echoed) == ("raw [redacted] url [redacted] plus [redacted] json [redacted] basic [redacted]")
    assert secrets.scrub("short ab stays") == "short ab stays"


def test_storable_replaces_nul() -> None:
    assert storable("a\x00b") == "a\ufffdb" and storable(None) is None


def test_validate_env_policy_names_file_line_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "tasks.d"
    root.mkdir()
    (root / "a.toml").write_text(
        '[trigger]\nkind = "cron"\nexpr = "* * * * *"\n[target]\nurl = "http://127.0.0.1:9/x"\n'
        'headers = { X-Dsn = { env = "RECONCILER_DSN" }, X-App = { env = "APP_KEY" } }\n'
    )
    assert main(["--tasks-dir", str(root), "validate"]) == 0
    assert main(["--tasks-dir", str(root), "validate", "--env-policy"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"{root}/a.toml:6: target.headers.X-Dsn: environment variable RECONCILER_DSN is not allowed:"
        " tasks may not read the engine's own settings (RECONCILER_*, DATABASE_URL, PG*); see engine --allow-env"
    )
    assert main(["--tasks-dir", str(root), "validate", "--env-policy", "--allow-env", "RECONCILER_*"]) == 1
    assert "APP_KEY is not allowed: engine --allow-env lets tasks read only RECONCILER_*" in capsys.readouterr().err
    assert main(["--tasks-dir", str(root), "validate", "--env-policy", "--allow-env", "APP_*,RECONCILER_DSN"]) == 0


def test_db_grants_prints_sql_without_a_database(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "grants", "--role-engine", "eng"]) == 0
    out = capsys.readouterr().out
    assert 'GRANT SELECT, UPDATE ("next_run_at", "limit_wait") ON TABLE "scheduler"."tasks" TO "eng";' in out
    assert main(["db", "grants"]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: db grants: name at least one of --role-planner, --role-applier, --role-engine, --role-dashboard"
    )
