"""`reconciler backfill` against a real PostgreSQL and a real HTTP server, engines in-process with injected time.

The dry run lists exactly the brute-force oracle's occurrences (the fall-back night of Europe/Berlin included)
and exactly what the real run queues; backfill runs carry their occurrence's Idempotency-Key, fire oldest first,
never delay the task's own occurrences, and a second backfill of the same range queues nothing.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg
import pytest

from reconciler.cli.backfill import follow
from reconciler.db import backfill_queries
from reconciler.db.backfill_queries import StallRow
from reconciler.db.store import Store
from reconciler.engine.loop import Engine
from reconciler.operate.audit import Operator
from reconciler.operate.backfill import cancel
from tests.builders import cli, cron, write_tasks
from tests.helpers import async_wait_until
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, setup
from tests.integration.test_notifications import apply_dirs, outbox, webhook
from tests.unit.schedule.test_cron_oracle import Oracle

BERLIN = ZoneInfo("Europe/Berlin")


async def run(dsn: str, *args: str) -> tuple[int, str, str]:
    """`reconciler ARGS` in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(cli, dsn, None, *args)


async def backfill(dsn: str, *args: str) -> tuple[int, str, str]:
    return await run(dsn, "--actor", "alice", "backfill", *args)


async def backfill_json(dsn: str, *args: str) -> dict[str, object]:
    code, out, err = await backfill(dsn, *args, "--format", "json")
    assert code == 0, err
    found: dict[str, object] = json.loads(out)
    return found


def instants(texts: object) -> list[datetime]:
    assert isinstance(texts, list)
    return [datetime.fromisoformat(text) for text in texts]


def backfill_runs(dsn: str, backfill_id: object) -> list[dict[str, object]]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(
            "SELECT id, task_id, scheduled_for, kind, status FROM scheduler.runs WHERE backfill_id = %s ORDER BY id",
            (backfill_id,),
        ).fetchall()


@pytest.mark.parametrize("expr", ["30 2 * * *", "*/15 1-3 * * *"])
async def test_dry_run_is_the_oracle_and_the_real_run_queues_it(
    store: Store, dsn: str, tmp_path: Path, expr: str
) -> None:
    await setup(store, tmp_path, {"nightly": cron(expr=expr, top='timezone = "Europe/Berlin"')})
    start, end = datetime(2026, 10, 23, tzinfo=BERLIN), datetime(2026, 10, 28, tzinfo=BERLIN)
    minute = timedelta(minutes=1)  # the oracle steps in UTC minutes over (after, until]
    expected = Oracle(expr, BERLIN).fires((start - minute).astimezone(UTC), (end - minute).astimezone(UTC))
    assert any(moment.date().day == 25 for moment in expected)  # the fall-back night

    dry = await backfill_json(dsn, "nightly", "--from", "2026-10-23", "--to", "2026-10-28", "--dry-run")
    assert instants(dry["occurrences"]) == expected
    assert dry["already_run"] == [] and dry["excluded"] == []
    code, text, _ = await backfill(dsn, "nightly", "--from", "2026-10-23", "--to", "2026-10-28", "--dry-run")
    assert code == 0 and "dry run: nothing written" in text
    assert f"{len(expected)} to queue, 0 already run, 0 excluded." in text
    assert "(2026-10-25 00:30:00 UTC)" in text  # local and UTC, the night the clocks go back included
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM scheduler.runs").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM scheduler.backfills").fetchone() == (0,)

    real = await backfill_json(dsn, "nightly", "--from", "2026-10-23", "--to", "2026-10-28", "--reason", "outage")
    assert real["occurrences"] == dry["occurrences"]
    queued = backfill_runs(dsn, real["backfill_id"])
    assert [r["scheduled_for"] for r in queued] == expected  # oldest first, by id
    assert {r["kind"] for r in queued} == {"backfill"} and {r["status"] for r in queued} == {"queued"}

    again = await backfill_json(dsn, "nightly", "--from", "2026-10-23", "--to", "2026-10-28")
    assert again["occurrences"] == [] and again["backfill_id"] is None
    assert instants(again["already_run"]) == expected


async def test_backfill_runs_fire_with_the_occurrence_key_then_nothing_is_queued_again(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/h", statuses=[200, 500, 200])  # the second occurrence fails
    await setup(store, tmp_path, {"h": cron(f"{url}/h", expr="0 * * * *")})
    real = await backfill_json(dsn, "h", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T06:00:00Z")
    expected = [datetime(2026, 11, 1, hour, tzinfo=UTC) for hour in range(6)]
    assert instants(real["occurrences"]) == expected
    for _ in range(10):  # the task is due at 13:00; its backfill runs fit before that
        await engine.run_once(NOW)
    keys = [r.headers["Idempotency-Key"] for r in rec.paths("/h")]  # one at a time, oldest first
    assert keys == [f"h@{moment.strftime('%Y-%m-%dT%H:%M:%SZ')}" for moment in expected]
    statuses = [r["status"] for r in backfill_runs(dsn, real["backfill_id"])]
    assert statuses == ["succeeded", "failed", "succeeded", "succeeded", "succeeded", "succeeded"]

    code, text, _ = await backfill(dsn, "--list")
    assert code == 0 and " done " in f" {text} " and "1/6" not in text and "6/6" in text
    none = await backfill_json(dsn, "h", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T06:00:00Z")
    assert none["occurrences"] == [] and len(instants(none["already_run"])) == 6
    failed = await backfill_json(
        dsn, "h", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T06:00:00Z", "--reprocess", "failed"
    )
    assert instants(failed["occurrences"]) == [expected[1]]  # a new attempt of the failed one, same key
    await engine.run_once(NOW)
    assert rec.paths("/h")[-1].headers["Idempotency-Key"] == "h@2026-11-01T01:00:00Z"
    again = await backfill_json(
        dsn, "h", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T06:00:00Z", "--reprocess", "failed"
    )
    assert again["occurrences"] == []
    everything = await backfill_json(
        dsn, "h", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T06:00:00Z", "--reprocess", "all", "--dry-run"
    )
    assert instants(everything["occurrences"]) == expected

    code, runs_text, _ = await run(dsn, "runs", "h")
    assert f"backfill #{real['backfill_id']}" in runs_text
    code, explained, _ = await run(dsn, "explain", "h", "--at", "2026-11-01T01:00:00Z")
    assert f"backfill #{real['backfill_id']} run " in explained and "→ failed" in explained


async def test_backfill_runs_never_delay_the_schedule(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    # every 5 minutes, a run may take 60 s: a backfill run starts only when the next occurrence is 60 s away
    await setup(store, tmp_path, {"f": cron(f"{url}/f", target="timeout_seconds = 60")})
    await backfill_json(dsn, "f", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T01:00:00Z")
    report = await engine.run_once(NOW + timedelta(minutes=4, seconds=30))  # 12:05 is 30 s away
    assert report.fired == 0
    report = await engine.run_once(NOW + timedelta(minutes=5))  # the task's own occurrence, on time
    assert [r.headers["Idempotency-Key"] for r in rec.paths("/f")] == ["f@2026-12-02T12:05:00Z"]
    report = await engine.run_once(NOW + timedelta(minutes=6))  # 12:10 is 4 minutes away: room for one
    assert report.fired == 1 and rec.paths("/f")[-1].headers["Idempotency-Key"] == "f@2026-11-01T00:00:00Z"


async def test_cancel_drops_what_is_queued(store: Store, dsn: str, engine: Engine, tmp_path: Path) -> None:
    await setup(store, tmp_path, {"c": cron(expr="*/10 * * * *")})
    real = await backfill_json(dsn, "c", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T02:00:00Z")
    assert len(instants(real["occurrences"])) == 12
    code, out, err = await run(dsn, "--actor", "bob", "backfill", "--cancel", str(real["backfill_id"]), "--reason", "x")
    assert code == 0, err
    assert f"cancelled backfill {real['backfill_id']} of c: 12 queued run(s) dropped" in out
    dropped = backfill_runs(dsn, real["backfill_id"])  # kept as `skipped`, as `reconciler cancel` keeps a run
    assert len(dropped) == 12 and {r["status"] for r in dropped} == {"skipped"}
    code, _, err = await run(dsn, "backfill", "--cancel", str(real["backfill_id"]))
    assert code == 1 and "already cancelled" in err
    code, listed, _ = await backfill(dsn, "--list", "c")
    assert "cancelled  0/12 run · 12 dropped" in listed  # what it dropped adds up to what it queued
    code, audit, _ = await run(dsn, "audit", "c")
    cancelled, queued = audit.splitlines()[:2]  # newest first; each names the backfill and its count
    assert " bob cancel " in cancelled and f"(backfill {real['backfill_id']}, 12 queued run(s) dropped)" in cancelled
    assert f"(backfill {real['backfill_id']}, 12 run(s) queued over [2026-11-01 00:00:00 UTC, " in queued
    await engine.run_once(NOW)
    assert all(r["status"] == "skipped" for r in backfill_runs(dsn, real["backfill_id"]))  # none started
    # a dropped occurrence has a run (skipped): --reprocess failed queues it again, none leaves it out
    none = await backfill_json(dsn, "c", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T02:00:00Z")
    assert none["occurrences"] == [] and len(instants(none["already_run"])) == 12
    code, text, _ = await backfill(dsn, "c", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T02:00:00Z")
    assert "0 to queue, 12 already run (--reprocess failed or all re-runs them)" in text
    again = await backfill_json(
        dsn, "c", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T02:00:00Z", "--reprocess", "failed"
    )
    assert len(instants(again["occurrences"])) == 12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from", "2026-11-02", "--to", "2026-11-01"), "is not before --to"),
        (("--from", "2026-11-01", "--to", "2099-01-01"), "is in the future"),
        (("--from", "yesterday", "--to", "2026-11-01"), "--from: 'yesterday' is not an ISO date"),
        (("--from", "9999-12-31T23:59:59", "--to", "2026-11-01"), "--from"),
        (("--from", "2026-10-25T02:30", "--to", "2026-11-01"), "happens twice (a DST overlap) in Europe/Berlin"),
        (("--from", "2026-03-29T02:30", "--to", "2026-11-01"), "does not exist (a DST gap) in Europe/Berlin"),
        (
            ("--from", "2000-01-01", "--to", "2026-11-01"),  # the split point: the 10,001st occurrence
            "more than 10,000 occurrences in [1999-12-31 23:00:00 UTC, 2026-10-31 23:00:00 UTC); a backfill queues at "
            "most 10,000: backfill up to --to 2000-02-04T16:20:00+00:00 first",
        ),
    ],
)
async def test_bad_ranges_are_one_line_errors(
    store: Store, dsn: str, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    await setup(store, tmp_path, {"b": cron(expr="*/5 * * * *", top='timezone = "Europe/Berlin"')})
    code, out, err = await backfill(dsn, "b", *args, "--dry-run")
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert out == ""


async def test_unknown_task_and_missing_options(store: Store, dsn: str, tmp_path: Path) -> None:
    await setup(store, tmp_path, {"b": cron()})
    code, _, err = await backfill(dsn, "nope", "--from", "2026-11-01", "--to", "2026-11-02")
    assert code == 1 and "unknown task 'nope'" in err
    code, _, err = await backfill(dsn, "b")
    assert code == 1 and "give --from, --to" in err
    code, _, err = await backfill(dsn, "--cancel", "12345")
    assert code == 1 and "no backfill 12345" in err


async def test_a_failed_backfill_run_notifies_the_task_s_subscribers(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    rec.script("/n", statuses=[500])
    write_tasks(
        tmp_path,
        {
            "notifiers.d/oncall": webhook(f"{url}/hook"),
            "tasks.d/n": f'[trigger]\nkind = "cron"\nexpr = "0 * * * *"\n[target]\nurl = "{url}/n"\n'
            '[notify]\nfailure = ["oncall"]\n',
        },
    )
    await apply_dirs(store, tmp_path, NOW)
    await backfill_json(dsn, "n", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T01:00:00Z")
    await engine.run_once(NOW)
    [event] = outbox(dsn)
    assert event["event"] == "failure" and event["task_id"] == "n"
    assert event["scheduled_for"] == datetime(2026, 11, 1, tzinfo=UTC)


async def test_a_pause_holds_backfill_runs_until_resume(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    await setup(store, tmp_path, {"p": cron(f"{url}/p", expr="0 * * * *")})
    code, _, err = await run(dsn, "pause", "p", "--reason", "incident")
    assert code == 0, err
    code, text, _ = await backfill(dsn, "p", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T02:00:00Z")
    assert code == 0 and "p is paused by" in text and "its backfill runs wait until the pause ends" in text
    await engine.run_once(NOW)
    assert rec.paths("/p") == []  # an emergency stop holds the backfill too
    assert await engine.sleep_seconds(NOW) > 0  # and a held backfill run does not keep the engine awake
    code, _, err = await run(dsn, "resume", "p")
    assert code == 0, err
    await engine.run_once(NOW)
    await engine.run_once(NOW)
    assert [r.headers["Idempotency-Key"] for r in rec.paths("/p")] == [
        "p@2026-11-01T00:00:00Z",
        "p@2026-11-01T01:00:00Z",
    ]


async def test_a_moved_task_keeps_its_backfill_and_a_deleted_one_drops_its_queued_runs(
    store: Store, dsn: str, tmp_path: Path
) -> None:
    await setup(store, tmp_path, {"a": cron(expr="0 * * * *"), "keep": cron()})
    real = await backfill_json(dsn, "a", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T03:00:00Z")
    (tmp_path / "a.toml").unlink()
    await setup(store, tmp_path, {"b": 'moved_from = "a"\n' + cron(expr="0 * * * *")})
    code, listed, _ = await backfill(dsn, "--list", "b")
    assert code == 0 and f"{real['backfill_id']}  b " in listed and "queued" in listed
    assert {r["task_id"] for r in backfill_runs(dsn, real["backfill_id"])} == {"b"}
    (tmp_path / "b.toml").unlink()
    await setup(store, tmp_path, {})  # b deleted: its queued runs could never start
    dropped = backfill_runs(dsn, real["backfill_id"])
    assert [r["status"] for r in dropped] == ["skipped"] * 3
    rows = json.loads((await backfill(dsn, "--list", "--format", "json"))[1])
    assert rows[0]["state"] == "done" and rows[0]["dropped"] == 3


async def test_a_partly_run_cancelled_backfill_lists_what_ran_and_what_it_dropped(
    store: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await setup(store, tmp_path, {"c": cron(f"{url}/c", expr="*/10 * * * *")})
    real = await backfill_json(dsn, "c", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T02:00:00Z")
    await engine.run_once(NOW)
    await engine.run_once(NOW)
    ran = sum(r["status"] == "succeeded" for r in backfill_runs(dsn, real["backfill_id"]))
    assert 0 < ran < 12
    code, _, err = await run(dsn, "--actor", "bob", "backfill", "--cancel", str(real["backfill_id"]))
    assert code == 0, err
    code, listed, _ = await backfill(dsn, "--list")
    assert f"cancelled  {ran}/12 run · {ran} ok · {12 - ran} dropped  alice" in listed, listed
    [item] = json.loads((await backfill(dsn, "--list", "--format", "json"))[1])
    assert (item["state"], item["finished"], item["dropped"], item["pruned"]) == ("cancelled", ran, 12 - ran, 0)
    parts = ("waiting", "running", "succeeded", "unsuccessful", "dropped", "pruned")
    assert sum(item[key] for key in parts) == item["queued"] == 12


async def test_a_real_backfill_sums_up_and_a_dry_run_is_bounded(store: Store, dsn: str, tmp_path: Path) -> None:
    await setup(store, tmp_path, {"five": cron(expr="*/5 * * * *")})
    span = ("five", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z")
    code, dry, _ = await backfill(dsn, *span, "--dry-run")
    assert code == 0 and len(dry.splitlines()) < 110 and "  … 188 more (--format json lists every one)" in dry
    assert "288 to queue, 0 already run, 0 excluded." in dry
    preview = await backfill_json(dsn, *span, "--dry-run")
    assert len(instants(preview["occurrences"])) == 288  # json stays complete
    code, text, _ = await backfill(dsn, *span, "--reason", "outage")
    lines = text.splitlines()
    assert code == 0 and len(lines) < 12, text  # not 288 lines: the first and last occurrences, and the counts
    assert "2026-11-01 00:00:00" in lines[1] and "2026-11-01 23:55:00" in text
    assert "  … 283 more (--format json lists every one)" in lines and "288 to queue" in text
    assert "queued backfill " in text and ": 288 run(s), oldest first" in text


async def test_wait_says_the_one_reason_its_runs_are_held(
    store: Store, dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(dsn) as conn:  # the database's clock; one engine live
        [(clock,)] = conn.execute("SELECT now()").fetchall()
        conn.execute("INSERT INTO scheduler.engines (engine_id, host, pid) VALUES ('e-1', 'h', 1)")
    await setup(store, tmp_path, {"d": cron(expr="0 3 * * *")}, clock)  # its next occurrence hours away
    code, _, err = await run(dsn, "--actor", "alice", "pause", "d", "--reason", "incident")
    assert code == 0, err
    real = await backfill_json(dsn, "d", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-04T00:00:00Z")
    backfill_id = real["backfill_id"]
    assert isinstance(backfill_id, int)
    async with store.connection() as conn:
        [row] = await backfill_queries.backfill_stall(conn, id=backfill_id, live_seconds=30)
    assert list(row) == list(StallRow.__annotations__)  # the typed row is the statement's columns
    capsys.readouterr()
    printed: list[str] = []

    def said() -> bool:
        printed.append(capsys.readouterr().out)
        return "no run ended" in "".join(printed)

    waiting = asyncio.create_task(follow(store, backfill_id, quiet_seconds=0))
    assert await async_wait_until(said, 30)
    await cancel(store, backfill_id, Operator("bob"))
    assert await waiting == 1  # dropped: not every occurrence succeeded
    [hint] = [line for line in "".join(printed).splitlines() if "no run ended" in line]
    assert hint == (
        f"backfill {backfill_id}: no run ended in 0 s: d is paused by alice (incident): its backfill runs wait until "
        "the pause ends (`reconciler resume d`); Ctrl-C stops waiting, not the backfill"
    )


async def test_a_preview_counts_every_excluded_occurrence_past_the_listed_ones(
    store: Store, dsn: str, tmp_path: Path
) -> None:
    """A blackout of the first half of every hour over 5 hours takes away 150 minute occurrences: all counted."""
    from tests.integration.test_calendars import apply, write

    half = 'kind = "blackout"\ntimezone = "UTC"\n[[window]]\ncron = "0 * * * *"\nduration = "30m"\n'
    task = 'timezone = "UTC"\n[trigger]\nkind = "cron"\nexpr = "* * * * *"\n[target]\nurl = "http://127.0.0.1:9/"\n'
    write(tmp_path, {"minutely": task + '[policy]\nblackouts = ["half"]\n'}, {"half": half})
    await apply(store, tmp_path, NOW)
    args = ("minutely", "--from", "2026-01-05T00:00:00Z", "--to", "2026-01-05T05:00:00Z", "--dry-run")
    code, text, err = await backfill(dsn, *args)
    assert code == 0 and "150 to queue, 0 already run, 150 excluded." in text, text + err
    dry = await backfill_json(dsn, *args)
    assert dry["excluded_count"] == 150 and len(instants(dry["occurrences"])) == 150
