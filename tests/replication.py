"""Replicated PostgreSQL and PgBouncer for the failover tests: a Node (one server on 127.0.0.1),
a Cluster (a primary and one streaming standby made with pg_basebackup -R) and a Bouncer
(PgBouncer in front of one Node).

The servers run the embedded PostgreSQL's own binaries (pgserver's), as the user "pgserver"
when we are root, as tests/pgcontrol.py does: postgres and PgBouncer both refuse to run as
root. Every Node lives under the folder it is given, which the tests take from `tmp_path`,
so tests/conftest.py's end-of-run sweep (`stop_all_under`) stops any server a failed test
left running. PgBouncer is not a postmaster: `stop_bouncers_under` is its sweep.

Each class is a context manager (`with Cluster(tmp_path / "c") as cluster: ...`) that starts
on entry and stops on exit, whatever happened; `start`/`stop` work with try/finally too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psutil
import psycopg
import pytest

from tests.helpers import wait_until

PGBOUNCER_FALLBACK = Path("/usr/sbin/pgbouncer")  # Debian installs it outside a user's PATH
SYSTEM_USER = "pgserver"  # the user pgserver runs postgres as when we are root
START_SECONDS = 60.0  # bounds every start, stop, promotion and base backup (a loaded 2-core machine)
CONNECT_TIMEOUT = 3

# postgresql.conf of every primary; the standby copies it with the base backup, so a promoted
# standby has the same settings (and can itself feed a standby).
SERVER_SETTINGS = {
    "max_connections": "100",  # three engines' pools and the tests' own sessions
    "wal_level": "replica",
    "max_wal_senders": "5",
    "wal_keep_size": "'64MB'",  # a standby that falls behind can still catch up without a slot
    "hot_standby": "on",  # the standby answers reads (and the tests' polls) while it replays
    "synchronous_commit": "on",
    # Tests only: no fsync makes initdb, checkpoints and commits fast. A SIGKILLed server still
    # recovers correctly, since its writes are in the OS page cache; only a machine crash
    # could lose them, and these clusters do not outlive the test run.
    "fsync": "off",
    "shared_buffers": "'32MB'",
    "log_line_prefix": "'%m [%p] %a '",
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_refuses(port: int) -> bool:
    """Nothing accepts connections on 127.0.0.1:`port` any more."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def _system_user() -> str | None:
    """The user servers run as: "pgserver" when we are root (postgres and PgBouncer refuse root), else us."""
    return SYSTEM_USER if os.geteuid() == 0 else None


def _as_system_user() -> dict[str, Any]:
    """subprocess arguments that run a program as the system user, with its group and no other (not root's)."""
    user = _system_user()
    return {} if user is None else {"user": user, "group": user, "extra_groups": []}


def _pg_bin(name: str) -> str:
    """The path of one of the embedded PostgreSQL's programs, made usable by the system user."""
    return str(_pg_bin_path() / name)


@functools.cache
def _pg_bin_path() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR at import
        from pgserver._commands import POSTGRES_BIN_PATH
    if _system_user() is not None:
        # What pgserver does before it runs postgres as "pgserver": the install must be
        # reachable and executable by that user (a run that starts no embedded server first).
        from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

        ensure_user_exists(SYSTEM_USER)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        read, execute = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
        ensure_folder_permissions(POSTGRES_BIN_PATH, read | execute)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", read)
    return Path(POSTGRES_BIN_PATH)


def _owned_dir(path: Path) -> Path:
    """Create `path` (absolute) owned by the system user, with every folder above it traversable
    by that user (pytest makes its temporary folders 0700 and root's)."""
    path = path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    user = _system_user()
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        traverse = stat.S_IXGRP | stat.S_IXOTH
        for folder in path.parents:
            mode = stat.S_IMODE(folder.stat().st_mode)
            if mode & traverse != traverse:
                folder.chmod(mode | traverse)
    return path


def _give(path: Path) -> None:
    """Hand a file we wrote to the system user (it must read and may rewrite it)."""
    user = _system_user()
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _clean_env() -> dict[str, str]:
    """Our environment without libpq's PG* variables, so only the arguments choose the server."""
    return {key: value for key, value in os.environ.items() if not key.startswith("PG")}


def _run(args: list[str], what: str, log: Path | None = None) -> str:
    """Run a PostgreSQL program as the system user, bounded; on failure raise with its output
    and the tail of the server log. Output goes to temporary files, not pipes: a postmaster
    that pg_ctl starts inherits them and a pipe would never close (pgserver does the same)."""
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run(
            args, **_as_system_user(), stdout=out, stderr=subprocess.STDOUT,
            env=_clean_env(), timeout=START_SECONDS + 30, check=False, text=True,
        )  # fmt: skip
        out.seek(0)
        output = out.read()
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log and log.exists() else ""
        raise RuntimeError(f"{what} failed ({result.returncode}): {shlex.join(args)}\n{output}\n--- log ---\n{tail}")
    return output


def _wait(check: Callable[[], object], seconds: float, failure: str) -> None:
    """wait_until that raises (with `failure`) instead of returning False."""
    if not wait_until(check, seconds):
        raise TimeoutError(f"{failure} (after {seconds:g} s)")


class Node:
    """One PostgreSQL server under `home`: data in `home/pgdata`, listening on 127.0.0.1:`port`
    (trust authentication) and on a Unix socket in `home/socket`, logging to `home/postgres.log`.

    A node whose data directory does not exist yet is initialized (initdb, SERVER_SETTINGS) on
    its first start; a Cluster fills its standby's data directory with a base backup instead.
    """

    def __init__(self, home: Path) -> None:
        self.home = home.resolve()
        self.pgdata = self.home / "pgdata"
        self.socket_dir = self.home / "socket"
        self.logfile = self.home / "postgres.log"
        self.port = free_port()
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout={CONNECT_TIMEOUT}"

    def __repr__(self) -> str:
        return f"Node(port={self.port}, pgdata={self.pgdata})"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop_quietly()

    def initdb(self) -> None:
        """Create the data directory: superuser "postgres", trust for local and 127.0.0.1
        connections, replication ones included, and SERVER_SETTINGS."""
        _owned_dir(self.home)
        _run(
            [_pg_bin("initdb"), "-D", str(self.pgdata), "-U", "postgres", "--auth=trust",
             "--encoding=UTF8", "--no-sync", "--no-instructions"],
            "initdb",
        )  # fmt: skip
        hba = (
            "local all all trust\nhost all all 127.0.0.1/32 trust\n"
            "local replication all trust\nhost replication all 127.0.0.1/32 trust\n"
        )
        (self.pgdata / "pg_hba.conf").write_text(hba)
        settings = "".join(f"{name} = {value}\n" for name, value in SERVER_SETTINGS.items())
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(f"\n# tests/replication.py\n{settings}")
        for name in ("pg_hba.conf", "postgresql.conf"):
            _give(self.pgdata / name)

    def start(self) -> None:
        """Start the server (initializing it first if need be) and wait until it accepts
        connections; a standby accepts them once it has replayed to a consistent state.
        Address, port and socket are given on the command line, not in postgresql.conf,
        which a base backup copies to the standby."""
        if not (self.pgdata / "PG_VERSION").exists():
            self.initdb()
        _owned_dir(self.socket_dir)
        options = f"-h 127.0.0.1 -p {self.port} -k {shlex.quote(str(self.socket_dir))}"
        _run(
            [_pg_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-t", str(int(START_SECONDS)),
             "-l", str(self.logfile), "-o", options, "start"],
            f"starting {self}", self.logfile,
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop: `fast` ends sessions and checkpoints, `immediate` is a crash."""
        _run(
            [_pg_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-t", str(int(START_SECONDS)), "-m", mode, "stop"],
            f"stopping {self}", self.logfile,
        )  # fmt: skip

    def stop_quietly(self) -> None:
        """Stop the server if it runs, whatever state it is in (killed, never started, stopped)."""
        if self.postmaster() is None:
            return
        try:
            self.stop("fast")
        except (RuntimeError, subprocess.TimeoutExpired):
            self.kill()

    def postmaster(self) -> psutil.Process | None:
        """The running postmaster of this data directory, if any (its pid file may be stale)."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
            proc = psutil.Process(pid)
            alive = proc.status() != psutil.STATUS_ZOMBIE and proc.name() == "postgres"
        except (OSError, ValueError, IndexError, psutil.Error):
            return None
        return proc if alive else None

    def kill(self) -> None:
        """A crash of the database host: SIGKILL the postmaster, then every process it had
        started (backends, walsenders), so no session outlives it; then wait until the port
        refuses connections. The next start runs crash recovery."""
        postmaster = self.postmaster()
        if postmaster is not None:
            with contextlib.suppress(psutil.Error):
                children = postmaster.children(recursive=True)
                postmaster.kill()
                for child in children:
                    with contextlib.suppress(psutil.Error):
                        child.kill()
                psutil.wait_procs([postmaster, *children], timeout=START_SECONDS)
        _wait(lambda: port_refuses(self.port), START_SECONDS, f"{self} still accepts connections after SIGKILL")

    def query(self, sql: str) -> list[tuple[object, ...]]:
        """Run one statement in a new session (autocommit) and return its rows (none for a command)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description is not None else []

    def answers(self, sql: str) -> object:
        """The first column of the first row of `sql` in a new session; None when it fails to connect."""
        try:
            rows = self.query(sql)
        except psycopg.OperationalError:
            return None
        return rows[0][0] if rows else None

    def in_recovery(self) -> bool:
        """pg_is_in_recovery(): a standby (or a primary still replaying after a crash)."""
        return bool(self.query("SELECT pg_is_in_recovery()")[0][0])

    def promote(self) -> None:
        """Make a standby the primary (pg_ctl promote -w) and wait until it takes writes."""
        _run(
            [_pg_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-t", str(int(START_SECONDS)), "promote"],
            f"promoting {self}", self.logfile,
        )  # fmt: skip
        _wait(lambda: self.answers("SELECT pg_is_in_recovery()") is False, START_SECONDS, f"{self} stays in recovery")

    def read_only(self) -> None:
        """Make the server refuse writes while it keeps running (what an operator does before a
        switchover): default_transaction_read_only on, reloaded; waits until a new session is
        read-only. A session's next transaction after the reload is read-only too."""
        self.query("ALTER SYSTEM SET default_transaction_read_only = on")
        self.query("SELECT pg_reload_conf()")
        _wait(lambda: self.answers("SHOW transaction_read_only") == "on", START_SECONDS, f"{self} stays writable")

    def pids(
        self,
        *,
        usename: str | None = None,
        application_name: str | None = None,
        backend_type: str | None = "client backend",
    ) -> list[int]:
        """Backend pids from pg_stat_activity matching every filter given (not the asking session's own)."""
        filters = {"usename": usename, "application_name": application_name, "backend_type": backend_type}
        given = {name: value for name, value in filters.items() if value is not None}
        where = "".join(f" AND {name} = %({name})s" for name in given)
        query = f"SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid(){where} ORDER BY pid"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return [int(row[0]) for row in conn.execute(query, given)]


class Cluster:
    """A primary and one streaming standby under `home` (`home/primary`, `home/standby`).

    synchronous=True: the primary has synchronous_standby_names = '*', so a commit returns only
    once the standby has flushed it (synchronous_commit on: flushed, not yet necessarily
    replayed, so a reader of the standby still polls). The setting is made on the primary after
    the base backup, so the standby never has it: promoted, it commits without waiting for a
    standby of its own (it has none).
    """

    def __init__(self, home: Path, synchronous: bool = True) -> None:
        self.home = home.resolve()
        self.synchronous = synchronous
        self.primary = Node(self.home / "primary")
        self.standby = Node(self.home / "standby")

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def dsn(self) -> str:
        """Both nodes, primary first; libpq connects to the first that takes writes."""
        ports = f"{self.primary.port},{self.standby.port}"
        return (
            f"host=127.0.0.1,127.0.0.1 port={ports} user=postgres dbname=postgres "
            f"target_session_attrs=read-write connect_timeout={CONNECT_TIMEOUT}"
        )

    def start(self) -> None:
        """initdb and start the primary, base-backup it into the standby (-R: standby.signal and
        primary_conninfo; -X stream: the WAL written meanwhile), start the standby, and wait
        until the primary sees it streaming (and as its synchronous standby when synchronous)."""
        self.primary.start()
        _owned_dir(self.standby.home)
        _run(
            [_pg_bin("pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
             "-D", str(self.standby.pgdata), "-R", "-X", "stream", "-c", "fast", "--no-sync"],
            "pg_basebackup", self.primary.logfile,
        )  # fmt: skip
        if self.synchronous:
            # After the base backup, not in postgresql.conf before it: a standby that inherited
            # it would, once promoted, wait forever on every commit for a standby it lacks.
            self.primary.query("ALTER SYSTEM SET synchronous_standby_names = '*'")
            self.primary.query("SELECT pg_reload_conf()")
        self.standby.start()
        wanted = "sync" if self.synchronous else "async"
        query = f"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = '{wanted}'"
        _wait(lambda: self.primary.answers(query) == 1, START_SECONDS, f"the standby of {self.primary} never streams")

    def stop(self) -> None:
        """Stop both nodes, whatever state each is in (running, killed, never started)."""
        for node in (self.standby, self.primary):
            node.stop_quietly()


class Bouncer:
    """PgBouncer under `home`, listening on 127.0.0.1:`port` only, in front of one Node: every
    database name goes to that node (the `*` entry), every client is "postgres" with trust
    authentication. server_login_retry is 1 s (default 15) so a restarted node is used soon."""

    def __init__(self, home: Path, node: Node, pool_mode: str = "transaction", pool_size: int = 4) -> None:
        self.home = home.resolve()
        self.node = node
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.port = free_port()
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout={CONNECT_TIMEOUT}"
        self.ini = self.home / "pgbouncer.ini"
        self.logfile = self.home / "pgbouncer.log"
        self.pidfile = self.home / "pgbouncer.pid"
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"Bouncer(port={self.port}, {self.pool_mode} pooling, in front of {self.node})"

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _write_config(self) -> None:
        _owned_dir(self.home)
        userlist = self.home / "userlist.txt"
        userlist.write_text('"postgres" ""\n')  # trust: the user must still be listed
        self.ini.write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.node.port}\n"
            "\n[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            "unix_socket_dir =\n"  # empty: no Unix socket at all
            f"auth_type = trust\nauth_file = {userlist}\n"
            f"pool_mode = {self.pool_mode}\ndefault_pool_size = {self.pool_size}\nmax_client_conn = 200\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            "server_login_retry = 1\n"
            f"logfile = {self.logfile}\npidfile = {self.pidfile}\n"
        )
        for path in (userlist, self.ini):
            _give(path)

    def start(self) -> None:
        """Write the configuration, start PgBouncer in the foreground as the system user (it
        refuses to run as root) and wait until a connection through it answers SELECT 1."""
        self._write_config()
        self._proc = subprocess.Popen(
            [pgbouncer_path(), "-q", str(self.ini)], **_as_system_user(), env=_clean_env(),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_SECONDS
        while not self._answers():
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self} exited with {self._proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self} never answered within {START_SECONDS:g} s:\n{self.log()}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.dsn, autocommit=True, prepare_threshold=None) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        """SIGTERM (PgBouncer's immediate shutdown: client connections are cut), bounded; then SIGKILL."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def log(self) -> str:
        """PgBouncer's log so far."""
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""


def pgbouncer_path() -> str:
    """The pgbouncer program: on the PATH, else where Debian puts it."""
    return shutil.which("pgbouncer") or str(PGBOUNCER_FALLBACK)


def pgbouncer_available() -> bool:
    """PgBouncer is installed (.ci/run installs Debian's package when it is missing)."""
    return shutil.which("pgbouncer") is not None or os.access(PGBOUNCER_FALLBACK, os.X_OK)


needs_pgbouncer = pytest.mark.skipif(
    not pgbouncer_available(), reason="PgBouncer is not installed (Debian package pgbouncer; .ci/run installs it)"
)


def stop_bouncers_under(root: Path) -> int:
    """SIGTERM every pgbouncer whose configuration file lies below `root` (the sweep for runs that
    died before a Bouncer's stop), kill what is left after 10 s; returns how many."""
    root = root.resolve()
    procs = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        args = proc.info["cmdline"] or []
        if proc.info["name"] == "pgbouncer" and args and Path(args[-1]).is_relative_to(root):
            procs.append(proc)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for proc in alive:
        proc.kill()
    psutil.wait_procs(alive, timeout=10)
    return len(procs)
