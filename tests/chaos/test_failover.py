"""Failovers, read-only flips and a transaction pooler, with real servers (tests/replication.py):
three engine processes fire ten tasks every second at a recording target while the database's
primary is killed and its synchronous standby promoted, or the primary turns read-only before the
standby takes over, or everything goes through PgBouncer in transaction mode.

Every run row's status changes are logged by a trigger with the database's clock, so "skipped
while nothing was running" is checked against what the database held at that moment.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.builders import EngineProcess, run_reconciler, start_engines, stop, wait_registered
from tests.helpers import expected_occurrences, settled, wait_until
from tests.httpserver import Recorded, Recorder
from tests.pgcontrol import needs_pgserver
from tests.replication import Bouncer, Cluster, Node, needs_pgbouncer

pytestmark = [pytest.mark.chaos, needs_pgserver]

TASKS = 10
ENGINES = 3
FAILOVER_AT = 10.0  # seconds into the schedule
TOLERANCE = timedelta(seconds=1)  # a claim's snapshot against another run's end: see false_skips

# Test only: each run's status changes, stamped with the database's clock as they were made.
TRANSITIONS = """
CREATE TABLE public.transitions (run_id bigint, task_id text, status text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.log_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        INSERT INTO public.transitions (run_id, task_id, status) VALUES (NEW.id, NEW.task_id, NEW.status);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER log_transition AFTER INSERT OR UPDATE ON scheduler.runs
    FOR EACH ROW EXECUTE FUNCTION public.log_transition();
"""

# Skips of a task at a moment no other run of it was running by the database (from its insert to
# its final status), give or take TOLERANCE: a claim reads the leases at its start, and a run that
# ended meanwhile stamped its end before the skip was written.
FALSE_SKIPS = """
WITH spans AS (
    SELECT r.run_id, r.task_id, r.at AS began,
           (SELECT min(e.at) FROM public.transitions e WHERE e.run_id = r.run_id AND e.status <> 'running') AS ended
      FROM public.transitions r WHERE r.status = 'running'
)
SELECT s.task_id, s.at FROM public.transitions s
 WHERE s.status = 'skipped'
   AND NOT EXISTS (
       SELECT 1 FROM spans p
        WHERE p.task_id = s.task_id AND p.run_id <> s.run_id
          AND p.began <= s.at + %(tolerance)s AND coalesce(p.ended, 'infinity') >= s.at - %(tolerance)s)
 ORDER BY s.at
"""


def write_tasks(root: Path, url: str, start: datetime, end: datetime) -> None:
    """TASKS tasks every second in [start, end), max_running_instances = 1 (the default)."""
    root.mkdir(exist_ok=True)
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    for index in range(TASKS):
        (root / f"t{index}.toml").write_text(
            f'[trigger]\nkind = "interval"\nseconds = 1\n'
            f"start_at = {start.strftime(stamp)}\nend_at = {end.strftime(stamp)}\n"
            f'[target]\nurl = "{url}/t/{index}"\ntimeout_seconds = 2\n'
            "[policy]\nmisfire_grace_seconds = 3600\nmax_running_instances = 1\n"
        )


class Scenario:
    """A database (`dsn`: what engines and commands connect to), the target's recorder and the
    schedule: TASKS tasks every second for `seconds`, starting once the engines are up."""

    def __init__(self, dsn: str, rec: Recorder, url: str, home: Path) -> None:
        self.dsn, self.rec, self.url, self.home = dsn, rec, url, home
        self.root = home / "tasks.d"
        self.start = self.end = datetime.now(UTC)
        self.expected: set[tuple[str, datetime]] = set()

    def init(self, direct_dsn: str | None = None) -> None:
        run_reconciler("db", "init", dsn=self.dsn, ok=True)
        with psycopg.connect(direct_dsn or self.dsn, autocommit=True) as conn:
            conn.execute(TRANSITIONS)  # several statements: a simple query (no parameters)

    @contextmanager
    def engines(self, *extra: str) -> Iterator[list[EngineProcess]]:
        """ENGINES engine processes (JSON logs), registered; stopped (SIGTERM) at the end."""
        ids = [f"failover-{n}" for n in range(ENGINES)]
        json_logs = ["--log-format", "json"]
        fleet = start_engines(self.dsn, ids, self.home, "--drain-seconds", "10", *extra, global_args=json_logs)
        try:
            wait_registered(self.dsn, fleet)
            yield fleet
        finally:
            stop(fleet, timeout=60)

    def schedule(self, seconds: int) -> None:
        """Apply the tasks, starting in 3 s, and wait for the start."""
        self.start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
        self.end = self.start + timedelta(seconds=seconds)
        write_tasks(self.root, self.url, self.start, self.end)
        run_reconciler("--tasks-dir", str(self.root), "apply", dsn=self.dsn, ok=True)
        self.expected = expected_occurrences(self.root, self.start, self.end)
        assert len(self.expected) == TASKS * seconds
        wait_until(lambda: datetime.now(UTC) >= self.start, 30, step=0.05)

    def at(self, seconds: float) -> None:
        """Wait until `seconds` into the schedule."""
        moment = self.start + timedelta(seconds=seconds)
        wait_until(lambda: datetime.now(UTC) >= moment, seconds + 30, step=0.05)

    def settle(self, fleet: Sequence[EngineProcess]) -> None:
        """Wait for the end of the schedule and every occurrence recorded, none in flight; no engine exited."""
        self.at((self.end - self.start).total_seconds())
        assert wait_until(lambda: settled(self.dsn, len(self.expected)), 90, step=0.5), self.statuses()
        exited = [(e.engine_id, e.proc.returncode, e.output()[-2000:]) for e in fleet if e.proc.poll() is not None]
        assert not exited, exited

    def requests(self) -> list[Recorded]:
        return self.rec.paths("/t/")

    def rows(self) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, row_factory=dict_row) as conn:
            return conn.execute("SELECT id, task_id, scheduled_for, status, error FROM scheduler.runs").fetchall()

    def statuses(self) -> Counter[str]:
        return Counter(row["status"] for row in self.rows())

    def false_skips(self) -> list[tuple[str, datetime]]:
        with psycopg.connect(self.dsn) as conn:
            return [(t, at) for t, at in conn.execute(FALSE_SKIPS, {"tolerance": TOLERANCE})]

    def check(self) -> dict[str, Any]:
        """What every test asserts: one run row per occurrence, each attempt sent once, no false skip.
        Returns the figures the test prints."""
        rows = self.rows()
        occurrences = Counter((row["task_id"], row["scheduled_for"]) for row in rows)
        keys = Counter((r.headers["Idempotency-Key"], r.headers["X-Reconciler-Attempt"]) for r in self.requests())
        figures = {
            "occurrences": len(self.expected),
            "requests": len(self.requests()),
            "statuses": dict(Counter(row["status"] for row in rows)),
            "duplicate keys": sum(n - 1 for n in keys.values()),
            "false skips": self.false_skips(),
        }
        print(f"\n{figures}")
        assert figures["duplicate keys"] == 0, figures
        assert set(occurrences) == self.expected and max(occurrences.values()) == 1, figures
        assert figures["false skips"] == [], figures
        return figures

    def resumed_after(self, since: float) -> float | None:
        """Seconds from `since` (time.time()) to the first request of an occurrence due after it."""
        due_after = datetime.fromtimestamp(since, UTC)
        firsts = [r.at for r in self.requests() if scheduled_for(r) > due_after and r.at >= since]
        return min(firsts) - since if firsts else None


def scheduled_for(request: Recorded) -> datetime:
    return datetime.fromisoformat(request.headers["X-Reconciler-Scheduled-For"])


def log_lines(fleet: Sequence[EngineProcess]) -> list[dict[str, Any]]:
    """Every JSON line the engines logged, with the engine's id."""
    lines = []
    for engine in fleet:
        for line in engine.output().splitlines():
            if line.startswith("{"):
                lines.append({**json.loads(line), "engine": engine.engine_id})
    return lines


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path / "cluster") as started:
        yield started


def test_the_primary_killed_and_its_synchronous_standby_promoted(
    cluster: Cluster, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    scenario = Scenario(cluster.dsn, rec, url, tmp_path)
    scenario.init()
    with scenario.engines() as fleet:
        scenario.schedule(30)
        scenario.at(FAILOVER_AT)
        assert scenario.requests(), "nothing fired before the failover"
        cluster.primary.kill()
        cluster.standby.promote()
        promoted = time.time()
        assert wait_until(lambda: scenario.resumed_after(promoted) is not None, 10), "not firing within 10 s"
        resumed = scenario.resumed_after(promoted)
        scenario.settle(fleet)
    figures = scenario.check()
    print(f"firing again {resumed:.1f} s after the promotion")
    assert [e.proc.returncode for e in fleet] == [0] * ENGINES
    assert figures["statuses"].get("lost", 0) == 0, figures  # results and claims in doubt were kept


def test_the_primary_turned_read_only_then_the_standby_promoted(
    cluster: Cluster, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = http
    scenario = Scenario(cluster.dsn, rec, url, tmp_path)
    scenario.init()
    old = cluster.primary
    with scenario.engines() as fleet:
        scenario.schedule(30)
        scenario.at(FAILOVER_AT)
        old.read_only()
        time.sleep(2)  # the engines meet the read-only primary: nothing takes writes
        cluster.standby.promote()
        promoted = time.time()
        assert wait_until(lambda: scenario.resumed_after(promoted) is not None, 10), "not firing within 10 s"
        resumed = scenario.resumed_after(promoted)
        scenario.settle(fleet)
        left = wait_until(lambda: not old.pids(usename="postgres"), 15)
        assert left, f"connections left on the old primary: {old.pids()}"
    scenario.check()
    print(f"firing again {resumed:.1f} s after the promotion")
    late = [
        line for line in log_lines(fleet)
        if "read-only" in line["message"] and datetime.fromisoformat(line["ts"]).timestamp() > promoted + 5
    ]  # fmt: skip
    assert late == [], late[:5]
    # Every request the target received has its result: none lost, none left running.
    status = {(row["task_id"], row["scheduled_for"]): (row["status"], row["error"]) for row in scenario.rows()}
    received = {(r.headers["X-Reconciler-Task"], scheduled_for(r)) for r in scenario.requests()}
    unfinished = {key: status.get(key) for key in received if status.get(key, ("?", None))[0] != "succeeded"}
    assert unfinished == {}, unfinished


@needs_pgbouncer
@pytest.mark.parametrize("listen", ["pooled", "direct"])
def test_behind_pgbouncer_in_transaction_mode(listen: str, http: tuple[str, Recorder], tmp_path: Path) -> None:
    url, rec = http
    with Node(tmp_path / "node") as node, Bouncer(tmp_path / "bouncer", node, pool_mode="transaction") as bouncer:
        scenario = Scenario(bouncer.dsn, rec, url, tmp_path)
        scenario.init(direct_dsn=node.dsn)
        extra = ["--listen-dsn", node.dsn] if listen == "direct" else []
        with scenario.engines(*extra) as fleet:
            scenario.schedule(60)
            scenario.settle(fleet)
        figures = scenario.check()
    lines = log_lines(fleet)
    assert [e.proc.returncode for e in fleet] == [0] * ENGINES
    pooler = ("prepared statement", "bind message")
    pooler_errors = [line for line in lines if any(s in line["message"] for s in pooler)]
    assert pooler_errors == [], pooler_errors[:5]
    said = "did not receive this engine's test NOTIFY"
    polling = Counter(line["engine"] for line in lines if said in line["message"])
    assert polling == ({} if listen == "direct" else {engine.engine_id: 1 for engine in fleet}), polling
    assert set(figures["statuses"]) == {"succeeded"}, figures


def test_the_primary_killed_and_its_asynchronous_standby_promoted_reports_the_window(
    http: tuple[str, Recorder], tmp_path: Path
) -> None:
    """Asynchronous replication: claims that had not reached the standby are gone after the
    promotion, and their occurrences are claimed again (fired again with the same key) or recorded
    missed. How many depends on the standby's lag at the kill: the test reports the counts, and
    asserts what still holds: one run row per occurrence, every engine alive."""
    url, rec = http
    with Cluster(tmp_path / "cluster", synchronous=False) as cluster:
        scenario = Scenario(cluster.dsn, rec, url, tmp_path)
        scenario.init()
        with scenario.engines() as fleet:
            scenario.schedule(30)
            scenario.at(FAILOVER_AT)
            cluster.primary.kill()
            cluster.standby.promote()
            scenario.settle(fleet)
        rows = scenario.rows()
    keys = Counter(r.headers["Idempotency-Key"] for r in scenario.requests())
    fired = {(r.headers["X-Reconciler-Task"], scheduled_for(r)) for r in scenario.requests()}
    missed_but_fired = [
        row for row in rows if row["status"] == "missed" and (row["task_id"], row["scheduled_for"]) in fired
    ]
    print(
        f"\nasynchronous standby: {sum(n - 1 for n in keys.values())} occurrence(s) fired again with the same key, "
        f"{len(missed_but_fired)} recorded missed although fired"
    )
    occurrences = Counter((row["task_id"], row["scheduled_for"]) for row in rows)
    assert set(occurrences) == scenario.expected and max(occurrences.values()) == 1
    assert [e.proc.returncode for e in fleet] == [0] * ENGINES
