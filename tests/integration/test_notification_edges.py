"""Notifications at their edges: a notifier that hangs, a stop mid-send, a redirect, a notifier deleted
with events pending, subscriptions that change while a task fails, `late` with no misfire grace."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.notify.events import late_scan
from tests.builders import write_tasks
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW
from tests.integration.test_notifications import apply_dirs, outbox, webhook

TASK = '[trigger]\nkind = "interval"\nseconds = 60\n[target]\nurl = "{url}/t"\n'


def state(dsn: str) -> dict[str, bool]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT task_id, failing FROM scheduler.notify_state").fetchall())


def events(dsn: str) -> list[tuple[str, str]]:
    return [(str(r["notifier"]), str(r["event"])) for r in outbox(dsn)]


async def test_a_hung_notifier_holds_back_no_other_and_is_released_at_stop(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/t", statuses=[500])
    rec.script("/hang", delay=120)  # answers after the notifier's 60 s timeout: never, for this test
    write_tasks(
        tmp_path,
        {
            "notifiers.d/hang": webhook(f"{url}/hang") + "timeout_seconds = 60\n",
            "notifiers.d/oncall": webhook(f"{url}/hook"),
            "tasks.d/job": TASK.format(url=url) + '[notify]\nfailure = ["hang", "oncall"]\n',
        },
    )
    now = datetime.now(UTC)
    await apply_dirs(store, tmp_path, now - timedelta(seconds=61))
    engine = Engine(store, EngineConfig("edges", drain_seconds=0.5))
    await engine.run_once(now)  # the run fails: one event per notifier, both due now
    assert sorted(events(dsn)) == [("hang", "failure"), ("oncall", "failure")]
    stop = asyncio.Event()
    serving = asyncio.create_task(engine.serve(stop))

    def row(notifier: str) -> dict[str, object]:
        return next(r for r in outbox(dsn) if r["notifier"] == notifier)

    try:
        # oncall's outcome is recorded while the hung send is still in flight (claimed with it).
        assert await async_wait_until(lambda: row("oncall")["status"] == "delivered", 50), outbox(dsn)
        assert await async_wait_until(lambda: rec.paths("/hang"), 50)
        assert row("hang")["status"] == "pending" and row("hang")["attempts"] == 1
    finally:
        stop.set()
        await serving
    # The stop cut the hung send off after the drain and gave its row back: due now, the attempt not counted.
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        hung = conn.execute(
            "SELECT status, attempts, engine_id, next_attempt_at <= now() AS due FROM scheduler.notifications"
            " WHERE notifier = 'hang'"
        ).fetchone()
    assert hung == {"status": "pending", "attempts": 0, "engine_id": None, "due": True}


async def test_a_redirect_and_a_deleted_notifier_are_final_at_once_with_the_fix(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/t", statuses=[500])
    rec.script("/old", statuses=[301], headers={"Location": "/new?token=SECRETTOKEN"})
    rec.script("/slack/T0/B0/SLACKSECRET", statuses=[302], headers={"Location": "?moved=1"})
    subscribed = TASK.format(url=url) + '[notify]\nfailure = ["moved", "dropped", "chat"]\n'
    write_tasks(
        tmp_path,
        {
            "notifiers.d/chat": 'kind = "slack"\nurl = { env = "SLACK_URL" }\n',
            "notifiers.d/moved": webhook(f"{url}/old"),
            "notifiers.d/dropped": webhook(f"{url}/dropped"),
            "tasks.d/job": subscribed,
        },
    )
    await apply_dirs(store, tmp_path, NOW)
    engine = Engine(store, EngineConfig("edges"))
    engine.deliverer.firer.env = {"SLACK_URL": f"{url}/slack/T0/B0/SLACKSECRET"}
    try:
        await engine.run_once(NOW + timedelta(seconds=61))
        # The event is pending when its notifier goes, with the task's subscription to it.
        (tmp_path / "notifiers.d/dropped.toml").unlink()
        write_tasks(tmp_path, {"tasks.d/job": subscribed.replace(', "dropped"', "")})
        await apply_dirs(store, tmp_path, NOW + timedelta(seconds=62))
        assert await engine.deliverer.deliver_due(wait=True) == 2  # the apply ended dropped's
    finally:
        await engine.deliverer.close()
        await engine.firer.close()
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        rows = {
            r["notifier"]: r
            for r in conn.execute("SELECT notifier, status, attempts, http_status, error FROM scheduler.notifications")
        }
    assert rows["moved"]["status"] == "failed" and rows["moved"]["attempts"] == 1
    assert rows["moved"]["http_status"] == 301
    assert f"redirects to {url}/new, which is not followed: set the url to it" in str(rows["moved"]["error"])
    assert "SECRETTOKEN" not in str(rows["moved"]["error"])
    assert rows["dropped"]["status"] == "failed" and rows["dropped"]["attempts"] == 0
    assert "'dropped' is no longer in notifiers.d of source 'default'" in str(rows["dropped"]["error"])
    assert rec.paths("/dropped") == [] and len(rec.paths("/old")) == 1
    # A Slack URL is a secret: its redirect says where to look, not where it points.
    assert rows["chat"]["status"] == "failed"
    assert rows["chat"]["error"] == "HTTP 302: a redirect, not followed; check the URL in $SLACK_URL"


async def test_deleting_a_notifier_ends_its_pending_events_in_the_same_apply(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    """An event waiting an hour for its retry (Retry-After: 3600) ends with the apply that deletes its notifier."""
    url, rec = http
    rec.script("/t", statuses=[500])
    rec.script("/busy", statuses=[503], headers={"Retry-After": "3600"})
    subscribed = TASK.format(url=url) + '[notify]\nfailure = ["busy", "oncall"]\n'
    write_tasks(
        tmp_path,
        {
            "notifiers.d/busy": webhook(f"{url}/busy"),
            "notifiers.d/oncall": webhook(f"{url}/hook"),
            "tasks.d/job": subscribed,
        },
    )
    now = datetime.now(UTC)
    await apply_dirs(store, tmp_path, now - timedelta(seconds=61))
    engine = Engine(store, EngineConfig("edges"))
    try:
        await engine.run_once(now)
        assert await engine.deliverer.deliver_due(wait=True) == 2
    finally:
        await engine.deliverer.close()
        await engine.firer.close()
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        waiting = conn.execute(
            "SELECT status, next_attempt_at > now() + interval '50 minutes' AS later FROM scheduler.notifications"
            " WHERE notifier = 'busy'"
        ).fetchone()
    assert waiting == {"status": "pending", "later": True}
    (tmp_path / "notifiers.d/busy.toml").unlink()
    write_tasks(tmp_path, {"tasks.d/job": subscribed.replace('"busy", ', "")})
    await apply_dirs(store, tmp_path, now)
    rows = {str(r["notifier"]): r for r in outbox(dsn)}
    assert rows["busy"]["status"] == "failed" and rows["oncall"]["status"] == "delivered"
    with psycopg.connect(dsn) as conn:
        error = conn.execute("SELECT error FROM scheduler.notifications WHERE notifier = 'busy'").fetchone()
    assert error is not None and "'busy' is no longer in notifiers.d of source 'default'" in error[0]
    assert "deleted by an apply" in error[0]


async def test_a_task_whose_failure_subscribers_change_starts_its_state_afresh(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/t", statuses=[500, 500, 200])
    task = TASK.format(url=url)
    write_tasks(
        tmp_path,
        {
            "notifiers.d/oncall": webhook(f"{url}/hook"),
            "notifiers.d/pager": webhook(f"{url}/pager"),
            "tasks.d/job": task + '[notify]\nfailure = ["oncall"]\nrecovery = ["oncall"]\n',
            "tasks.d/other": task.replace("seconds = 60", "seconds = 3600"),
        },
    )
    await apply_dirs(store, tmp_path, NOW)
    engine = Engine(store, EngineConfig("edges"))
    try:
        await engine.run_once(NOW + timedelta(seconds=61))
        assert state(dsn) == {"job": True} and events(dsn) == [("oncall", "failure")]
        # An edit that leaves the failure subscribers alone keeps the state: no second failure.
        late = '[notify]\nfailure = ["oncall"]\nrecovery = ["oncall"]\nlate = ["pager"]\n'
        write_tasks(tmp_path, {"tasks.d/job": task + late})
        await apply_dirs(store, tmp_path, NOW + timedelta(seconds=62))
        assert state(dsn) == {"job": True}
        # The same subscribers in another order (or named twice) are the same: still failing, no page.
        write_tasks(tmp_path, {"tasks.d/job": task + late.replace('"oncall"]', '"oncall", "oncall"]')})
        await apply_dirs(store, tmp_path, NOW + timedelta(seconds=62))
        assert state(dsn) == {"job": True}
        # Unsubscribed while failing, then subscribed again: pager heard of no failure, so the
        # success that follows is no `recovery`; the failure in between is a `failure` for it.
        write_tasks(tmp_path, {"tasks.d/job": task})
        await apply_dirs(store, tmp_path, NOW + timedelta(seconds=63))
        assert state(dsn) == {}
        write_tasks(tmp_path, {"tasks.d/job": task + '[notify]\nfailure = ["pager"]\nrecovery = ["pager"]\n'})
        await apply_dirs(store, tmp_path, NOW + timedelta(seconds=64))
        await engine.run_once(NOW + timedelta(seconds=121))  # fails: a failure for pager
        await engine.run_once(NOW + timedelta(seconds=181))  # succeeds: its recovery
        # Deleting the task removes its state.
        (tmp_path / "tasks.d/job.toml").unlink()
        await apply_dirs(store, tmp_path, NOW + timedelta(seconds=182))
    finally:
        await engine.deliverer.close()
        await engine.firer.close()
    assert events(dsn) == [("oncall", "failure"), ("pager", "failure"), ("pager", "recovery")]
    assert state(dsn) == {}


async def test_late_waits_at_least_a_minute_when_the_misfire_grace_is_zero(
    store: Store, engine: Engine, dsn: str, tmp_path: Path
) -> None:
    task = TASK.format(url="http://127.0.0.1:9")
    grace0 = "[policy]\nmisfire_grace_seconds = 0\n[notify]\nlate = ['oncall']\n"
    write_tasks(
        tmp_path,
        {
            "notifiers.d/oncall": webhook("http://127.0.0.1:9/hook"),
            "tasks.d/claimed": task + grace0,
            "tasks.d/scanned": task + grace0,
        },
    )
    await apply_dirs(store, tmp_path, NOW)
    due = NOW + timedelta(seconds=60)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE scheduler.tasks SET enabled = false WHERE id = 'scanned'")
    await engine.run_once(due + timedelta(seconds=5))  # an ordinary lag of a claim: not late
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE scheduler.tasks SET enabled = true WHERE id = 'scanned'")
    assert await late_scan(store, due + timedelta(seconds=59)) == 0
    assert await late_scan(store, due + timedelta(seconds=61)) == 1
    assert [(r["task_id"], r["event"]) for r in outbox(dsn)] == [("scanned", "late")]
    payload = outbox(dsn)[0]["payload"]
    assert isinstance(payload, dict) and payload["late_seconds"] == 61


async def test_one_notifier_never_takes_more_than_its_share_of_an_engines_slots(
    store: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    from reconciler.notify.delivery import PER_NOTIFIER

    url, rec = http
    rec.script("/hang", delay=120)  # past the notifier's timeout: cut off by the stop
    write_tasks(
        tmp_path,
        {
            "notifiers.d/hang": webhook(f"{url}/hang") + "timeout_seconds = 60\n",
            "notifiers.d/ok": webhook(f"{url}/ok"),
            "tasks.d/job": TASK.format(url=url) + '[notify]\nfailure = ["hang", "ok"]\n',
        },
    )
    await apply_dirs(store, tmp_path, NOW)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for notifier in ["hang"] * 8 + ["ok"] * 2:  # hang's are older: first in line
            conn.execute(
                "INSERT INTO scheduler.notifications (source, notifier, task_id, event, payload, next_attempt_at)"
                " VALUES ('default', %s, 'job', 'failure', '{}', now() - interval '1 hour')",
                (notifier,),
            )

    def in_flight() -> dict[str, int]:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT notifier, count(*) FROM scheduler.notifications"
                " WHERE engine_id IS NOT NULL AND status = 'pending' GROUP BY 1"
            )
            return dict(rows.fetchall())

    engine = Engine(store, EngineConfig("edges"))
    try:
        assert await engine.deliverer.deliver_due() == PER_NOTIFIER + 2
        assert await async_wait_until(lambda: in_flight() == {"hang": PER_NOTIFIER}, 50), in_flight()
        assert await engine.deliverer.deliver_due() == 0  # hang has its share in flight already
    finally:
        await engine.deliverer.finish()
        await engine.firer.close()
    assert in_flight() == {}  # released at stop
    assert [r["status"] for r in outbox(dsn) if r["notifier"] == "ok"] == ["delivered", "delivered"]
