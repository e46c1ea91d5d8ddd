"""The door's error translation: what psycopg raises becomes the project's errors here, and nowhere else.

A database that does not answer is DatabaseUnavailable (naming it, never its password, and where its DSN came
from); a pool whose connections all stayed busy while it answered, PoolBusy (no word of the DSN); a statement
the server cancelled (a timeout) StatementCancelled saying which timeout; a missing
privilege PermissionDenied naming what to grant; a schema not created yet SchemaMissing; any other statement
the server refused DatabaseRefused (a value it cannot store). psycopg's own log noise during an outage is
quieted here too (the engine says what happened once, in engine/outage.py).
"""

from __future__ import annotations

import contextlib
import logging
import re
import weakref
from collections.abc import Iterator

import psycopg

from reconciler.db.embedded import DsnOrigin
from reconciler.db.rows import Conn
from reconciler.db.sqlfile import QUERIES
from reconciler.errors import (
    DatabaseRefused,
    DatabaseUnavailable,
    PermissionDenied,
    PoolBusy,
    SchemaMissing,
    StatementCancelled,
    one_line,
)


class OutageNoise(logging.Filter):
    """psycopg_pool warns at every connection attempt that fails and every broken connection it drops,
    and psycopg at every pipeline a lost connection ended while its error was on its way out: during a
    20 s outage, thirty lines beside the engine's own. The engine logs the database's state changes
    itself (engine/outage.py), naming it and where its DSN came from; their other warnings (a
    connection returned inside a transaction, …) still show."""

    POOL = frozenset(
        {
            "error connecting in %r: %s",
            "reconnection attempt in pool %r failed after %s sec",
            "discarding broken connection: %s",
            "discarding closed connection: %s",
        }
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "psycopg.pool":
            return record.msg not in self.POOL
        args = record.args if isinstance(record.args, tuple) else ()
        lost = args and isinstance(args[-1], psycopg.OperationalError)
        return not (record.msg == "error ignored terminating %r: %s" and lost)


for _name in ("psycopg.pool", "psycopg"):
    logging.getLogger(_name).addFilter(OutageNoise())


def redact(dsn: str) -> str:
    """A DSN without its password, for error messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    shown = {k: v for k, v in params.items() if k in ("host", "port", "dbname", "user") and v}
    return " ".join(f"{k}={v}" for k, v in shown.items()) or "<default>"


def holds_password(dsn: str) -> bool:
    """Whether a DSN carries a password (`user:pw@` of a URI, `password=` of either form), so it is never shown as
    written; an unparsable one is taken to."""
    try:
        return "password" in psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return True


_QUOTED = re.compile(r'"([^"]*)"')


def scrub_dsn_echo(reason: str, dsn: str) -> str:
    """libpq's message without any part of the DSN it echoes: the whole DSN, its password, and
    and any quoted token of an unparsable one (libpq quotes what it could not parse) but option names."""
    reason = reason.replace(dsn, redact(dsn))
    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:  # keep a quoted option name (`name=` in the DSN), mask the rest
        return _QUOTED.sub(lambda m: m[0] if _option_name(m[1], dsn) else '"***"', reason)
    return reason.replace(str(password), "***") if password else reason


def _option_name(token: str, dsn: str) -> bool:
    """Whether libpq's quoted `token` is "=" or an option name (written `name=` in the DSN)."""
    return token == "=" or re.search(rf"(^|\s){re.escape(token)}\s*=", dsn) is not None


def unavailable(dsn: str, exc: BaseException, origin: DsnOrigin) -> DatabaseUnavailable:
    """The database did not answer: one line naming it (never its password), why, and where its DSN came from."""
    return DatabaseUnavailable(origin.unreachable(redact(dsn), scrub_dsn_echo(one_line(exc), dsn)))


BUSY_RETRY_SECONDS = 5  # what a busy pool's Retry-After says: a few page reads' time


def busy(size: int, waiting: int, waited: float | None) -> PoolBusy:
    """Every connection of the pool stayed in use while a caller waited `waited` seconds (None: it did not wait,
    `waiting` callers queued already): one line saying so, never a word about the DSN (the pool has connections)."""
    if waited is None:
        how = f"are busy and {waiting} request(s) already wait for one"
    else:
        how = f"stayed busy for {waited:g} s ({waiting} more request(s) waiting)"
    return PoolBusy(
        f"all {size} of this process's database connections {how}: it is asked for more than it can read at "
        f"once; retry in {BUSY_RETRY_SECONDS} s",
        BUSY_RETRY_SECONDS,
    )


GRANTS_HINT = "grant it: see `reconciler db grants`"
# The tables a statement touches, and how: INSERT INTO / UPDATE / DELETE FROM, else FROM / JOIN (SELECT).
_TOUCHES = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|FROM|JOIN)\s+(\w+)\.(\w+)", re.I)
_DENIED_FOR = re.compile(r"permission denied for (table|schema|sequence) (\S+)")


def needed_privileges(statement: str, table: str) -> tuple[str, list[str]]:
    """How `statement` names `table` (schema-qualified) and the privileges it uses on it, in order."""
    qualified, needs = table, []
    for match in _TOUCHES.finditer(statement):
        if match[3] == table:
            qualified = f"{match[2]}.{table}"
            verb = match[1].split()[0].upper()
            needs.append({"FROM": "SELECT", "JOIN": "SELECT"}.get(verb, verb))
    if "SELECT" in needs and re.search(r"\bFOR\s+UPDATE\b", statement, re.I):
        needs.append("UPDATE")  # a row lock needs UPDATE on some column
    if "INSERT" in needs and re.search(r"\bON\s+CONFLICT\b.*\bDO\s+UPDATE\b", statement, re.I | re.S):
        needs.append("UPDATE")  # an upsert updates the row it conflicts with
    return qualified, list(dict.fromkeys(needs))


def denied(exc: psycopg.errors.InsufficientPrivilege, user: str, query: str | None = None) -> PermissionDenied:
    """One line: what PostgreSQL refused, the privilege the statement needs, and where the fix is.

    `query` names the statement, or several sent together (`a, b`: any of them may be the one)."""
    reason = one_line(exc, "permission denied")
    found = _DENIED_FOR.match(reason)
    if found and found[1] == "table":
        statements = "\n".join(QUERIES.get(name, "") for name in (query or "").split(", "))
        table, privileges = needed_privileges(statements, found[2])
        needs = f"role {user!r} needs {', '.join(privileges) or 'a privilege'} on {table}"
    elif found:
        needs = f"role {user!r} needs USAGE on {found[1]} {found[2]}"
    else:
        needs = f"role {user!r} lacks a privilege"
    where = f" (query {query})" if query else ""
    return PermissionDenied(f"{reason}: {needs}{where}; {GRANTS_HINT}")


# The bounds (ms, by setting name) in force in a read transaction (Store.reading), for its messages.
READ_LIMITS: weakref.WeakKeyDictionary[Conn, dict[str, float]] = weakref.WeakKeyDictionary()
TIMEOUT_HINT = "retry, or allow it longer (PGOPTIONS='-c statement_timeout=120s')"


def cancelled(exc: psycopg.OperationalError, conn: Conn, query: str | None) -> StatementCancelled:
    """One line for a statement the server cancelled: which timeout, after how long (when a read
    transaction set it), and on which tables a lock was awaited (those the named queries touch)."""
    limits = READ_LIMITS.get(conn, {})
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        statements = "\n".join(QUERIES.get(name, "") for name in (query or "").split(", "))
        tables = " or ".join(dict.fromkeys(f"{m[2]}.{m[3]}" for m in _TOUCHES.finditer(statements))) or "a table"
        waited = f" for {limits['lock_timeout'] / 1000:g} s" if "lock_timeout" in limits else ""
        return StatementCancelled(
            f"waiting for a lock on {tables}{waited} (lock_timeout): another session holds it (a schema change, "
            "LOCK TABLE or VACUUM FULL: see pg_locks and pg_stat_activity); retry once it is done"
        )
    which = f"query {query}" if query else "a query"
    if "statement timeout" not in str(exc):  # pg_cancel_backend, or a cancel from this process
        return StatementCancelled(f"{which} was cancelled by the server: {one_line(exc)}; retry")
    after = f" after {limits['statement_timeout'] / 1000:g} s" if "statement_timeout" in limits else ""
    return StatementCancelled(f"{which} timed out{after} (statement_timeout): the database is busy; {TIMEOUT_HINT}")


SCHEMA_HINT = "the database has no reconciler schema yet: `reconciler db init` (or any apply) creates it"


def refused(exc: psycopg.Error) -> Exception:
    """A statement the server refused for a reason that is neither a fault nor a privilege: the schema not
    created yet (SchemaMissing), or anything else (DatabaseRefused: a value it cannot store, a constraint)."""
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return SchemaMissing(SCHEMA_HINT)
    return DatabaseRefused(one_line(exc, "the database refused the statement"), exc.sqlstate)


@contextlib.contextmanager
def named(conn: Conn, query: str | None) -> Iterator[None]:
    """Turn a refused statement (named `query`, or several: `a, b`) into PermissionDenied naming what it needs,
    a cancelled one into StatementCancelled naming it; a lost connection goes on as psycopg's, for the pool's
    boundary (Store.connection) to name the database."""
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        raise denied(exc, conn.info.user, query) from None
    except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
        raise cancelled(exc, conn, query) from None
