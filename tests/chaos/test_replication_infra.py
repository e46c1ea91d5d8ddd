"""The failover test infrastructure itself (tests/replication.py): a streaming standby that takes
over after the primary crashes or turns read-only, found by a multi-host DSN with
target_session_attrs=read-write; and PgBouncer in transaction mode, with the two behaviours the
engine must live with there: psycopg's server-side prepared statements (off with
prepare_threshold=None) and LISTEN, which never hears a NOTIFY.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import errors

from tests.helpers import wait_until
from tests.pgcontrol import needs_pgserver
from tests.replication import Bouncer, Cluster, Node, needs_pgbouncer

pytestmark = [pytest.mark.chaos, needs_pgserver]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A started synchronous primary/standby pair, stopped after the test whatever state it is in."""
    with Cluster(tmp_path / "cluster") as started:
        yield started


def server_port(dsn: str) -> int:
    """The port of the server a new session on `dsn` lands on."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT inet_server_port()").fetchone()
    assert row is not None
    return int(row[0])


def rows_on(node: Node) -> int:
    """How many rows table t has on `node`; -1 while it does not answer or has no table t yet."""
    try:
        [(count,)] = node.query("SELECT count(*) FROM t")
    except psycopg.Error:
        return -1
    return count if isinstance(count, int) else -1


def test_standby_takes_over_after_the_primary_is_killed(cluster: Cluster) -> None:
    cluster.primary.query("CREATE TABLE t (v int)")
    cluster.primary.query("INSERT INTO t VALUES (1)")
    # Synchronous commit waits for the standby's flush, not its replay: poll the standby.
    assert wait_until(lambda: rows_on(cluster.standby) == 1, 30), "the row never reached the standby"
    assert cluster.standby.in_recovery()

    cluster.primary.kill()
    assert cluster.primary.postmaster() is None
    cluster.standby.promote()

    assert not cluster.standby.in_recovery()
    # The promoted node must not wait for a synchronous standby of its own: it has none.
    assert cluster.standby.query("SHOW synchronous_standby_names") == [("",)]
    # statement_timeout bounds the commit should it wait for a standby after all.
    with psycopg.connect(cluster.dsn, options="-c statement_timeout=10s") as conn:
        assert conn.execute("SELECT inet_server_port()").fetchone() == (cluster.standby.port,)
        conn.execute("INSERT INTO t VALUES (2)")
    assert rows_on(cluster.standby) == 2


def test_standby_takes_over_from_a_read_only_primary(cluster: Cluster) -> None:
    with psycopg.connect(cluster.primary.dsn, autocommit=True) as existing:
        existing.execute("CREATE TABLE t (v int)")
        existing.execute("INSERT INTO t VALUES (1)")
        cluster.primary.read_only()
        with pytest.raises(errors.ReadOnlySqlTransaction):
            existing.execute("INSERT INTO t VALUES (2)")

        cluster.standby.promote()
        assert server_port(cluster.dsn) == cluster.standby.port
        with psycopg.connect(cluster.dsn, options="-c statement_timeout=10s") as conn:
            conn.execute("INSERT INTO t VALUES (3)")
        assert rows_on(cluster.standby) == 2

        # The old primary keeps running, read-only, and keeps refusing writes.
        assert cluster.primary.answers("SHOW transaction_read_only") == "on"
        with pytest.raises(errors.ReadOnlySqlTransaction):
            existing.execute("INSERT INTO t VALUES (4)")
    assert rows_on(cluster.primary) == 1


@pytest.fixture
def bouncer(tmp_path: Path) -> Iterator[Bouncer]:
    """PgBouncer in transaction mode (4 server connections) in front of a single node."""
    with Node(tmp_path / "pg") as node, Bouncer(tmp_path / "bouncer", node, "transaction", 4) as started:
        yield started


def interleave(connections: list[psycopg.Connection[tuple[object, ...]]], rounds: int) -> list[str]:
    """Run one parametrized statement `rounds` times on each connection in turn (autocommit, so
    each is its own transaction and may land on another server connection); the errors."""
    failures = []
    for index in range(rounds):
        for number, conn in enumerate(connections):
            try:
                row = conn.execute("SELECT %s::int + %s::int", (index, number)).fetchone()
                assert row == (index + number,)
            except psycopg.Error as exc:
                failures.append(f"{type(exc).__name__}: {exc}".splitlines()[0])
    return failures


@needs_pgbouncer
def test_transaction_pooling_needs_prepare_threshold_none_and_drops_listen(bouncer: Bouncer) -> None:
    dsn = bouncer.dsn
    with psycopg.connect(dsn, autocommit=True) as one, psycopg.connect(dsn, autocommit=True) as two:
        assert one.execute("SELECT 1").fetchone() == (1,)
        assert two.execute("SELECT 1").fetchone() == (1,)
        # psycopg's default prepares a statement after 5 runs, on whichever server connection
        # runs it then: the known breakage may or may not show, depending on who gets which.
        failures = interleave([one, two], 10)
        print(f"\ndefault prepare_threshold through transaction pooling: {len(failures)} of 20 failed {failures[:3]}")

    plain = [psycopg.connect(dsn, autocommit=True, prepare_threshold=None) for _ in range(4)]
    try:
        assert interleave(plain, 50) == []  # 200 statements, none prepared server-side
    finally:
        for conn in plain:
            conn.close()

    # LISTEN registers on the server connection the statement ran on, which goes back to the
    # pool at once; the listening client is linked to no server connection, so hears nothing.
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn, autocommit=True) as notifier:
        listener.execute("LISTEN replication_infra")
        notifier.execute("NOTIFY replication_infra, 'through the bouncer'")
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert heard == []

    # The control: the same on the node itself is heard.
    node = bouncer.node.dsn
    with psycopg.connect(node, autocommit=True) as listener, psycopg.connect(node, autocommit=True) as notifier:
        listener.execute("LISTEN replication_infra")
        notifier.execute("NOTIFY replication_infra, 'direct'")
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
    assert heard == ["direct"]
