"""The project's exceptions; the CLI turns them into one line on stderr and exit 1."""


class UserError(Exception):
    """A mistake the user can fix (bad input, unreachable database, stale plan)."""


class DatabaseUnavailable(UserError):
    """PostgreSQL cannot be reached or refused the connection."""


class PermissionDenied(UserError):
    """The database role lacks a privilege the command needs (see `reconciler db grants`)."""
