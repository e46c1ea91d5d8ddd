"""The project's exceptions; the CLI turns them into one line on stderr and exit 1."""


def one_line(exc: BaseException, fallback: str | None = None) -> str:
    """An exception as one short line: its first line, else `fallback` or its type."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else fallback or type(exc).__name__


class UserError(Exception):
    """A mistake the user can fix (bad input, unreachable database, stale plan)."""


class DatabaseUnavailable(UserError):
    """PostgreSQL cannot be reached or refused the connection."""


class PermissionDenied(UserError):
    """The database role lacks a privilege the command needs (see `reconciler db grants`)."""
