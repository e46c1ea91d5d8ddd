"""Notifications end to end: notifiers.d in plan and apply, events in the outbox written with what
caused them, delivery with retries and one Idempotency-Key per event, late occurrences."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from reconciler.files.notifiers import NOTIFIERS, load_notifiers
from reconciler.files.tasks import load_dir
from reconciler.notify.events import late_scan
from reconciler.output.plan_json import plan_dict
from reconciler.output.plan_text import plan_text
from reconciler.reconcile.apply import apply_tasks, read_plan
from tests.builders import run_reconciler, start_engines, stop, wait_registered, write_tasks
from tests.helpers import wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW


async def apply_dirs(store: Store, root: Path, now: datetime) -> int:
    loaded = load_dir(root / "tasks.d", "tasks.d")
    assert loaded.errors == [], loaded.errors
    notifiers = load_notifiers(root / "notifiers.d", "notifiers.d")
    assert notifiers.errors == [], notifiers.errors
    return (await apply_tasks(store, loaded.tasks, "default", now, declared=[notifiers])).written


def outbox(dsn: str) -> list[dict[str, object]]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(
            "SELECT id, notifier, task_id, event, status, attempts, scheduled_for, payload"
            " FROM scheduler.notifications ORDER BY id"
        ).fetchall()


def webhook(url: str) -> str:
    return f'kind = "webhook"\nurl = "{url}"\nheaders = {{ X-Team = "ops" }}\n'


async def test_fail_fail_succeed_across_three_engines_notifies_one_failure_and_one_recovery(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/target", statuses=[500, 500, 200])
    rec.script("/flaky", statuses=[500, 500, 200])
    write_tasks(
        tmp_path,
        {
            "notifiers.d/oncall": webhook(f"{url}/hook"),
            "notifiers.d/flaky": webhook(f"{url}/flaky"),
            "tasks.d/job": f'[trigger]\nkind = "interval"\nseconds = 1\n[target]\nurl = "{url}/target"\n'
            '[notify]\nfailure = ["oncall", "flaky"]\nrecovery = ["oncall"]\n',
        },
    )
    procs = start_engines(dsn, ["n-0", "n-1", "n-2"], tmp_path)
    try:
        wait_registered(dsn, procs)
        await apply_dirs(store, tmp_path, datetime.now(UTC))

        def settled() -> bool:
            rows = outbox(dsn)
            return len(rows) == 3 and {r["status"] for r in rows} == {"delivered"} and len(rec.paths("/target")) >= 6

        assert wait_until(settled, 90), (outbox(dsn), [p.output()[-2000:] for p in procs])
    finally:
        results = stop(procs)
    assert [code for code, _ in results] == [0, 0, 0], [err[-2000:] for _, err in results]
    rows = outbox(dsn)
    assert Counter((r["notifier"], r["event"]) for r in rows) == {
        ("oncall", "failure"): 1,
        ("flaky", "failure"): 1,
        ("oncall", "recovery"): 1,
    }
    hook = rec.paths("/hook")
    assert [json.loads(r.body)["event"] for r in hook] == ["failure", "recovery"]
    assert len({r.headers["Idempotency-Key"] for r in hook}) == 2
    assert all(r.headers["X-Team"] == "ops" for r in hook)
    first = json.loads(hook[0].body)
    assert first["task_id"] == "job" and first["status"] == "failed" and first["http_status"] == 500
    flaky = rec.paths("/flaky")
    assert len(flaky) == 3 and len({r.headers["Idempotency-Key"] for r in flaky}) == 1
    assert next(r["attempts"] for r in rows if r["notifier"] == "flaky") == 3


async def test_an_occurrence_no_engine_claimed_raises_late_once(
    store: Store, engine: Engine, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    late = '[notify]\nlate = ["oncall"]\nlate_after_seconds = 30\n'
    write_tasks(
        tmp_path,
        {
            "notifiers.d/oncall": webhook(f"{url}/hook"),
            "tasks.d/claimed": f'[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "{url}/t"\n{late}',
            "tasks.d/scanned": f'[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "{url}/t"\n{late}',
        },
    )
    await apply_dirs(store, tmp_path, NOW)
    due = NOW + timedelta(seconds=60)
    assert await late_scan(store, due + timedelta(seconds=29)) == 0  # not late yet
    # No engine ran for 31 s past the due time: any engine's scan raises it, once.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE scheduler.tasks SET enabled = false WHERE id = 'claimed'")
    assert await late_scan(store, due + timedelta(seconds=31)) == 1
    assert await late_scan(store, due + timedelta(seconds=40)) == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE scheduler.tasks SET enabled = true WHERE id = 'claimed'")
    # The claim that finally takes the other one raises it too; claiming again does not.
    await engine.run_once(due + timedelta(seconds=45))
    await engine.run_once(due + timedelta(seconds=46))
    assert await late_scan(store, due + timedelta(seconds=47)) == 0
    rows = outbox(dsn)
    assert Counter((r["task_id"], r["event"]) for r in rows) == {("scanned", "late"): 1, ("claimed", "late"): 1}
    assert {r["scheduled_for"] for r in rows} == {due}
    assert await engine.deliverer.deliver_due(wait=True) == 2
    assert {r["status"] for r in outbox(dsn)} == {"delivered"}
    assert sorted(json.loads(r.body)["task_id"] for r in rec.paths("/hook")) == ["claimed", "scanned"]


async def test_notifiers_are_planned_applied_and_checked_against_subscriptions(
    store: Store, dsn: str, tmp_path: Path
) -> None:
    task = '[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "https://api.example.com/x"\n'
    write_tasks(
        tmp_path,
        {
            "notifiers.d/oncall": webhook("https://hooks.example.com/a"),
            "notifiers.d/chat": 'kind = "slack"\nurl = { env = "SLACK_URL" }\n',
            "tasks.d/job": task + '[notify]\nfailure = ["oncall", "chat"]\n',
        },
    )
    loaded = load_dir(tmp_path / "tasks.d", "tasks.d")
    notifiers = load_notifiers(tmp_path / "notifiers.d", "notifiers.d")
    plan = await read_plan(store, loaded.tasks, "default", NOW, declared=[notifiers])
    text = plan_text(plan)
    assert "+ notifier chat" in text and "slack (URL from $SLACK_URL" in text and "+ notifier oncall" in text
    assert [n["name"] for n in plan_dict(plan)["notifiers"]] == ["chat", "oncall"]  # type: ignore[index]
    assert await apply_dirs(store, tmp_path, NOW) == 3
    again = await read_plan(store, loaded.tasks, "default", NOW, declared=[notifiers])
    assert not again.has_changes and "notifiers" not in plan_dict(again)
    # A changed notifier is an update with its field diff; a subscription to a deleted one is refused.
    (tmp_path / "notifiers.d/oncall.toml").write_text(webhook("https://hooks.example.com/b"))
    (tmp_path / "notifiers.d/chat.toml").unlink()
    notifiers = load_notifiers(tmp_path / "notifiers.d", "notifiers.d")
    loaded = load_dir(tmp_path / "tasks.d", "tasks.d")
    plan = await read_plan(store, loaded.tasks, "default", NOW, declared=[notifiers])
    assert [(n.op, n.name) for n in plan.changes_of(NOTIFIERS)] == [("delete", "chat"), ("update", "oncall")]
    assert any("notify.failure: no notifier 'chat' in notifiers.d" in r for r in plan.refused), plan.refused
    assert "hooks.example.com/b" in plan_text(plan)


def test_the_cli_reads_notifiers_beside_the_tasks_and_applies_them(dsn: str, tmp_path: Path) -> None:
    task = '[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "https://api.example.com/x"\n'
    write_tasks(tmp_path, {"tasks.d/job": task + '[notify]\nfailure = ["oncall"]\n'})
    tasks = str(tmp_path / "tasks.d")
    refused = run_reconciler("--tasks-dir", tasks, "validate")
    assert refused.returncode == 1
    assert "job.toml:7: notify.failure: no notifier 'oncall' in " in refused.stderr
    write_tasks(tmp_path, {"notifiers.d/oncall": webhook("https://hooks.example.com/a")})
    assert "1 task file(s)" in run_reconciler("--tasks-dir", tasks, "validate", dsn=dsn, ok=True).stdout
    planned = run_reconciler("--tasks-dir", tasks, "plan", dsn=dsn, ok=True).stdout
    assert "+ notifier oncall" in planned and "webhook POST https://hooks.example.com/a" in planned
    assert (
        "Apply complete: 2 change(s) written." in run_reconciler("--tasks-dir", tasks, "apply", dsn=dsn, ok=True).stdout
    )
    assert "No changes." in run_reconciler("--tasks-dir", tasks, "plan", dsn=dsn, ok=True).stdout
    write_tasks(tmp_path, {"notifiers.d/chat": 'kind = "slack"\nurl = { env = "RECONCILER_DSN" }\n'})
    checked = run_reconciler("--tasks-dir", tasks, "validate", "--env-policy", "--check-env")
    assert checked.returncode == 1
    assert "notifiers.d/chat.toml:2: url: environment variable RECONCILER_DSN is not allowed" in checked.stderr
    assert "notifiers.d/chat.toml:2: url: environment variable RECONCILER_DSN is not set" in checked.stderr


async def test_an_event_that_cannot_be_written_never_costs_a_run_its_result(
    store: Store, engine: Engine, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/t", statuses=[500])
    notify = '[notify]\nfailure = ["oncall"]\n'
    write_tasks(
        tmp_path,
        {
            "notifiers.d/oncall": webhook(f"{url}/hook"),
            "tasks.d/job": f'[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "{url}/t"\n{notify}',
        },
    )
    await apply_dirs(store, tmp_path, NOW)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE scheduler.notifications")
    report = await engine.run_once(NOW + timedelta(seconds=61))
    assert report.failed == 1
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT status, http_status FROM scheduler.runs").fetchall() == [("failed", 500)]


async def test_retention_prunes_old_finished_notifications_and_keeps_pending_ones(
    store: Store, dsn: str, tmp_path: Path
) -> None:
    from reconciler.engine.config import EngineConfig

    old, new = NOW - timedelta(days=40), NOW - timedelta(days=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for created, status in [(old, "delivered"), (old, "failed"), (old, "pending"), (new, "delivered")]:
            conn.execute(
                "INSERT INTO scheduler.notifications (source, notifier, task_id, event, payload, status, created_at)"
                " VALUES ('default', 'oncall', 'job', 'failure', '{}', %s, %s)",
                (status, created),
            )
    pruner = Engine(store, EngineConfig("pruner", keep_runs_days=30))
    assert await pruner.prune_runs(NOW) == 2
    left = sorted((r["status"], r["attempts"]) for r in outbox(dsn))
    assert left == [("delivered", 0), ("pending", 0)]
    await pruner.firer.close()


async def test_slack_gets_a_readable_message_from_its_secret_url_and_a_refusal_is_final(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    from reconciler.engine.config import EngineConfig
    from reconciler.targets.http import Firer

    url, rec = http
    rec.script("/t", statuses=[503])
    rec.script("/gone", statuses=[404])
    notify = '[notify]\nfailure = ["chat", "gone", "unset"]\n'
    write_tasks(
        tmp_path,
        {
            "notifiers.d/chat": 'kind = "slack"\nurl = { env = "SLACK_URL" }\n',
            "notifiers.d/gone": webhook(f"{url}/gone"),
            "notifiers.d/unset": 'kind = "slack"\nurl = { env = "NOT_SET_ANYWHERE" }\n',
            "tasks.d/job": f'[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "{url}/t"\n{notify}',
        },
    )
    await apply_dirs(store, tmp_path, NOW)
    secret_url = f"{url}/services/T000/B000/XXXXSECRET"
    engine = Engine(store, EngineConfig("slack"), Firer(concurrency=4))
    engine.deliverer.firer.env = {"SLACK_URL": secret_url}
    try:
        await engine.run_once(NOW + timedelta(seconds=61))
        assert await engine.deliverer.deliver_due(wait=True) == 3
    finally:
        await engine.firer.close()
        await engine.deliverer.close()
    [message] = rec.paths("/services")
    text = json.loads(message.body)["text"]
    assert text.startswith(":red_circle: *job* failed") and "HTTP 503" in text
    by_notifier = {r["notifier"]: r for r in outbox(dsn)}
    assert by_notifier["chat"]["status"] == "delivered"
    assert by_notifier["gone"]["status"] == "failed" and by_notifier["gone"]["attempts"] == 1  # a 404 is final
    with psycopg.connect(dsn) as conn:
        errors = [r[0] for r in conn.execute("SELECT error FROM scheduler.notifications WHERE error IS NOT NULL")]
    assert any("NOT_SET_ANYWHERE" in e for e in errors), errors
    assert by_notifier["unset"]["status"] == "pending"  # retried: the variable may be set on another engine
    assert all("XXXXSECRET" not in e for e in errors)
