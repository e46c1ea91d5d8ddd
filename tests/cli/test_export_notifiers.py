"""`reconciler export` writes notifiers too, into notifiers.d beside the exported tasks, so an exported repository
plans clean: secrets stay `{ env = … }` references (an old row's literal becomes a placeholder), never a value;
the project's own notifiers.d is never written into unasked; `--source` exports one source."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from reconciler.files.kinds import spec_hash
from tests.builders import cli, cron, write_tasks

# Values the engines' environment holds: an export must never write them, only the names.
SECRET_VALUES = {"ONCALL_TOKEN": "tok-Qz81-never-exported", "CHAT_WEBHOOK": "https://hooks.example/T0/B0/never"}
ONCALL = """kind = "webhook"
url = "http://127.0.0.1:9/oncall"
method = "PUT"
headers = { X-Team = "payments", Authorization = { env = "ONCALL_TOKEN" } }
query = { channel = "ops" }
timeout_seconds = 5
"""
CHAT = 'kind = "slack"\nurl = { env = "CHAT_WEBHOOK" }\n'
PAGER = """kind = "webhook"
url = "http://127.0.0.1:9/pager"

[auth]
kind = "basic"
username = "scheduler"
password = { env = "PAGER_PASSWORD" }
"""


def repository(root: Path, notifiers: dict[str, str]) -> Path:
    """root/tasks.d (a task subscribing to every notifier, and one to none) and root/notifiers.d; returns
    tasks.d."""
    subscribed = f"[notify]\nfailure = {json.dumps(sorted(notifiers))}\nrecovery = [{json.dumps(min(notifiers))}]\n"
    tasks = write_tasks(
        root / "tasks.d",
        {
            "billing/invoices": cron("http://127.0.0.1:9/i") + subscribed,
            "ops/ping": cron("http://127.0.0.1:9/p"),
        },
    )
    write_tasks(root / "notifiers.d", notifiers)
    return tasks


def ok(dsn: str, tasks: Path | None, *args: str) -> str:
    code, out, err = cli(dsn, tasks, *args)
    assert code == 0, out + err
    return out + err


def test_export_of_a_database_with_notifiers_into_an_empty_folder_plans_no_changes(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRET_VALUES.items():
        monkeypatch.setenv(name, value)
    tasks = repository(tmp_path / "team", {"oncall": ONCALL, "chat": CHAT, "pager": PAGER})
    assert "Apply complete: 5 change(s) written." in ok(dsn, tasks, "apply")

    new = tmp_path / "new-repo"  # an empty folder: the exported repository
    code, out, err = cli(dsn, None, "export", "--out-dir", str(new / "tasks.d"))
    assert code == 0 and err == "", err
    assert out == (
        f"exported 2 task(s) to {new / 'tasks.d'} and 3 notifier(s) to {new / 'notifiers.d'}; "
        f"review them with: reconciler --dsn {shlex.quote(dsn)} plan --tasks-dir {new / 'tasks.d'}\n"
    )
    code, out, err = cli(dsn, new / "tasks.d", "plan", "--detailed-exitcode")
    assert code == 0 and "No changes." in out, out + err
    assert "notifier" not in out  # nothing to create, update or delete among them either

    written = {p.relative_to(new).as_posix(): p.read_text() for p in sorted(new.rglob("*.toml"))}
    assert sorted(written) == [
        "notifiers.d/chat.toml",
        "notifiers.d/oncall.toml",
        "notifiers.d/pager.toml",
        "tasks.d/billing/invoices.toml",
        "tasks.d/ops/ping.toml",
    ]
    for value in SECRET_VALUES.values():  # references stay references: no resolved value anywhere
        assert value not in "".join(written.values()) + out + err
    assert written["notifiers.d/chat.toml"] == CHAT
    oncall = tomllib.loads(written["notifiers.d/oncall.toml"])
    assert oncall == {
        "kind": "webhook",
        "url": "http://127.0.0.1:9/oncall",
        "method": "PUT",
        "headers": {"X-Team": "payments", "Authorization": {"env": "ONCALL_TOKEN"}},
        "query": {"channel": "ops"},
        "timeout_seconds": 5,  # the model's type (int), and only because it is not the default 10
    }
    assert written["notifiers.d/oncall.toml"].startswith('kind = "webhook"\n')  # kind first, as people write it
    assert tomllib.loads(written["notifiers.d/pager.toml"])["auth"] == {
        "kind": "basic",
        "username": "scheduler",
        "password": {"env": "PAGER_PASSWORD"},
    }


def test_export_never_writes_into_an_existing_notifiers_directory_without_force(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "team"
    tasks = repository(project, {"oncall": ONCALL})
    ok(dsn, tasks, "apply")
    mine = project / "notifiers.d" / "oncall.toml"
    mine.write_text("# the team's own file, comments and all\n" + ONCALL)
    monkeypatch.chdir(project)
    # The default --out-dir, exported.d, has the project's own notifiers.d beside it: refused, nothing written.
    code, out, err = cli(dsn, None, "export")
    assert code == 1 and out == ""
    assert err.startswith("error: export: notifiers.d already exists (export writes notifiers beside --out-dir")
    assert "--out-dir exported/tasks.d" in err and err.endswith("(nothing was written)\n")
    assert not (project / "exported.d").exists() and mine.read_text().startswith("# the team's own file")
    out = ok(dsn, None, "export", "--out-dir", "exported/tasks.d")
    assert "and 1 notifier(s) to exported/notifiers.d" in out
    assert ok(dsn, Path("exported/tasks.d"), "plan", "--detailed-exitcode").count("No changes.") == 1
    # --force writes into it (the file of the same name replaced by rename, as for tasks).
    ok(dsn, None, "export", "--force")
    assert mine.read_text() == ONCALL  # as export lays the file out (the same keys, in the stored order)


def test_export_of_old_notifier_rows_writes_placeholders_never_literal_secrets(dsn: str, tmp_path: Path) -> None:
    tasks = repository(tmp_path / "team", {"oncall": ONCALL, "chat": CHAT, "pager": PAGER})
    ok(dsn, tasks, "apply")
    # Rows as a person (or an older version) wrote them: literal credentials the model refuses.
    edits = {
        "oncall": {"headers": {"Authorization": "Bearer hunter2-header", "X-Team": "payments"}},
        "chat": {"url": "https://hooks.slack.com/services/hunter2-slack"},
        "pager": {
            "url": "http://admin:hunter2-userinfo@127.0.0.1:9/pager?api_key=hunter2-query",
            "auth": {"kind": "basic", "username": "scheduler", "password": "hunter2-password"},
        },
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, edit in edits.items():
            [(spec,)] = conn.execute("SELECT spec FROM scheduler.notifiers WHERE name = %s", (name,)).fetchall()
            spec |= edit
            conn.execute(
                "UPDATE scheduler.notifiers SET spec = %s, spec_hash = %s WHERE name = %s",
                (json.dumps(spec), spec_hash(spec), name),
            )
    out_dir = tmp_path / "new" / "tasks.d"
    code, out, err = cli(dsn, None, "export", "--out-dir", str(out_dir))
    assert code == 0 and "3 notifier(s)" in out, err
    files = "".join(p.read_text() for p in (tmp_path / "new").rglob("*.toml"))
    assert "hunter2" not in out + err + files
    warnings = err.splitlines()
    assert all(line.startswith("warning: notifier ") for line in warnings) and len(warnings) == 5, err
    assert any("notifier oncall: headers.Authorization held a literal secret" in w for w in warnings)
    assert any("notifier chat: url held a literal secret" in w for w in warnings)
    assert any("notifier pager: auth.password held a literal secret" in w for w in warnings)
    assert any("notifier pager: url held credentials before the host; dropped (use auth)" in w for w in warnings)
    notifiers = tmp_path / "new" / "notifiers.d"
    assert tomllib.loads((notifiers / "chat.toml").read_text())["url"] == {"env": "EXPORTED_NOTIFIER_CHAT_URL"}
    pager = tomllib.loads((notifiers / "pager.toml").read_text())
    assert pager["url"] == "http://127.0.0.1:9/pager"
    assert pager["query"] == {"api_key": {"env": "EXPORTED_NOTIFIER_PAGER_QUERY_API_KEY"}}
    assert pager["auth"]["password"] == {"env": "EXPORTED_NOTIFIER_PAGER_AUTH_PASSWORD"}
    code, out, err = cli(dsn, out_dir, "validate")
    assert code == 0, out + err  # every exported file is valid: the placeholders are what the model wants


def test_export_of_one_source_plans_clean_for_that_source(dsn: str, tmp_path: Path) -> None:
    for source, url in (("payments", "http://127.0.0.1:9/pay"), ("search", "http://127.0.0.1:9/search")):
        job = cron(url) + '[notify]\nfailure = ["oncall"]\n'
        tasks = write_tasks(tmp_path / source / "tasks.d", {f"{source}/job": job})
        write_tasks(tmp_path / source / "notifiers.d", {"oncall": ONCALL.replace("/oncall", f"/oncall-{source}")})
        ok(dsn, tasks, "--source", source, "apply")
    # Every source into one directory: one oncall.toml can hold only one of the two, said so.
    code, out, err = cli(dsn, None, "export", "--out-dir", str(tmp_path / "all" / "tasks.d"))
    assert code == 0 and "exported 2 task(s)" in out and "and 1 notifier(s)" in out
    assert err == (
        "warning: notifier oncall: sources 'payments', 'search' declare it differently; written from 'payments' "
        "(export one source at a time with --source SOURCE)\n"
    )
    # One source: its own tasks and notifiers, and the plan hint names the source.
    new = tmp_path / "search-repo" / "tasks.d"
    out = ok(dsn, None, "--source", "search", "export", "--out-dir", str(new))
    assert out.startswith(f"exported 1 task(s) to {new} and 1 notifier(s)")
    assert out.endswith(
        f"review them with: reconciler --dsn {shlex.quote(dsn)} plan --tasks-dir {new} --source search\n"
    )
    assert "/oncall-search" in (new.parent / "notifiers.d" / "oncall.toml").read_text()
    code, out, err = cli(dsn, new, "--source", "search", "plan", "--detailed-exitcode")
    assert code == 0 and "No changes." in out, out + err


@pytest.mark.parametrize("form", ["keyword", "uri"])
def test_exports_hint_never_shows_a_password_of_the_dsn(dsn: str, tmp_path: Path, form: str) -> None:
    """The hint repeats the --dsn export was given, but never one that carries a password (the test server trusts
    its clients: the password is carried, not checked)."""
    secret = "hunter2-of-the-dsn"
    with_password = psycopg.conninfo.make_conninfo(dsn, password=secret)
    if form == "uri":
        params = {k: str(v) for k, v in psycopg.conninfo.conninfo_to_dict(with_password).items() if v is not None}
        user, dbname = quote(params.pop("user", "postgres"), safe=""), quote(params.pop("dbname"), safe="")
        query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items() if k != "password")
        with_password = f"postgresql://{user}:{secret}@/{dbname}?{query}"
    ok(with_password, write_tasks(tmp_path / "team" / "tasks.d", {"ops/ping": cron("http://127.0.0.1:9/p")}), "apply")
    new = tmp_path / "new-repo" / "tasks.d"
    code, out, err = cli(with_password, None, "export", "--out-dir", str(new))
    assert code == 0, out + err
    assert secret not in out + err
    hint = f"review them with: reconciler --dsn DSN plan --tasks-dir {new} (DSN: the one given to export)\n"
    assert out.endswith(hint), out
