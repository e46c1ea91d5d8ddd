"""One user mistake in a declared file, as one line: `path:LINE: key.path: message`."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.errors import as_bytes


@dataclass(frozen=True, slots=True)
class FileError:
    """One user mistake, rendered `path:LINE: key.path: message`."""

    path: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        return f"{printable(self.path)}:{self.line}: {printable(self.key)}: {printable(self.message)}"


@dataclass(frozen=True, slots=True)
class FileWarning(FileError):
    """Something valid that will not do what the file seems to want, rendered `path:LINE: warning: key: message`."""

    def __str__(self) -> str:
        return f"{printable(self.path)}:{self.line}: warning: {printable(self.key)}: {printable(self.message)}"


def printable(text: str) -> str:
    """`text` with control and other unprintable characters escaped, so an error stays one line; a byte
    of a name that is not UTF-8 (a lone surrogate, as Python reads one) shows as the byte, `\\xff`."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def _escaped(char: str) -> str:
    if "\udc80" <= char <= "\udcff":
        return as_bytes(char)
    return char.encode("unicode_escape").decode("ascii")


def key_path(loc: tuple[str, ...]) -> str:
    """`target.headers.X-Api-Key`; an empty key shows as "", no key at all as (file)."""
    return ".".join(part or '""' for part in loc) or "(file)"
