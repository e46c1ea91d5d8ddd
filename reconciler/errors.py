"""The project's exceptions and exit codes; the CLI turns an exception into one line on stderr and exit 1."""

# 2 is reserved for "changes present" (`plan --detailed-exitcode`, as terraform's), so usage errors exit 1.
EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2


def one_line(exc: BaseException, fallback: str | None = None) -> str:
    """An exception as one short line: its first line, else `fallback` or its type."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else fallback or type(exc).__name__


def is_utf8(name: str) -> bool:
    """Whether a name from the system (a file name, an argument) is UTF-8 text: Python hands over the
    bytes of one that is not as lone surrogates, which cannot be encoded, printed strictly or stored."""
    if name.isascii():
        return True
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def as_bytes(name: str) -> str:
    """A name with each byte that is not UTF-8 shown as `\\xff`: safe to print, and what `ls -b` shows."""
    return name.encode(errors="surrogateescape").decode(errors="backslashreplace")


class UserError(Exception):
    """A mistake the user can fix (bad input, unreachable database, stale plan)."""


class DatabaseUnavailable(UserError):
    """PostgreSQL cannot be reached or refused the connection."""


class StatementCancelled(DatabaseUnavailable):
    """The server cancelled a statement: it ran past statement_timeout or waited past lock_timeout.

    A DatabaseUnavailable, so whatever retries or backs off from an unreachable database (the engine's
    loops) does so from these too; only the message differs, for the person reading it."""


class PoolBusy(DatabaseUnavailable):
    """Every connection of this process's pool was busy for as long as a caller may wait (or too many callers
    waited already): the database answers, this process asks too much of it at once. A DatabaseUnavailable, so
    the engine's loops back off from it as from an outage; the dashboard answers 503 with Retry-After."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # seconds worth waiting before asking again


class PermissionDenied(UserError):
    """The database role lacks a privilege the command needs (see `reconciler db grants`)."""


class DatabaseRefused(Exception):
    """The database refused a statement for a reason that is neither a fault nor a privilege (a value it cannot
    store, a violated constraint): a bug, or hostile data, never a reason to retry the same statement."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class SchemaMissing(DatabaseRefused):
    """A table of the reconciler's schema is not there: not created yet (`reconciler db init`, or any apply,
    creates it), or dropped or renamed under a running process, which then fails as on any other bug."""
