"""A declared directory's entries and bytes: every `*.toml` below it, read whole or with why it cannot be."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from reconciler.errors import is_utf8
from reconciler.files.text import MAX_FILE_BYTES, TOO_BIG


@dataclass(frozen=True, slots=True)
class Entry:
    """A `*.toml` entry below the tasks directory; `problem` says why it cannot be read as a task file."""

    path: Path
    problem: str | None = None


def _ignored(name: str) -> bool:
    return name.startswith(("_", "."))


def _link_problem(path: Path, root: Path, what: str) -> str | None:
    """Why the symlink `path` cannot stand for a task file below `root` (resolved), or None."""
    try:
        real = path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 reports a loop this way, later versions as ELOOP
        return "is a symlink loop; remove it"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop; remove it"
        if exc.errno == errno.ENOENT:
            return "is a broken symlink; remove it or fix its target"
        return f"cannot follow symlink ({exc.strerror})"
    if not real.is_relative_to(root):
        return f"is a symlink to a path outside {what}; copy the file in instead"
    if real.is_dir():
        return "is a symlink to a directory, which is not followed; move or link the files themselves"
    return None


NAME_NOT_UTF8 = "the name is not UTF-8 text; rename it (ids, paths and the database are UTF-8)"
DIRECTORY_NAMED_TOML = "is a directory, not a task file; rename it (the files in it are loaded)"


def scan(tasks_dir: Path, what: str = "the tasks directory") -> list[Entry]:
    """Every `*.toml` entry below `tasks_dir`, sorted, each with its problem if any; `_`/`.` names are skipped.

    Nothing is skipped silently: a directory named `*.toml`, a broken or looping symlink, a
    symlink leading outside `tasks_dir`, a symlinked directory and an unreadable directory
    are entries with a problem, so a plan refuses instead of pruning the tasks behind them.
    """
    root = tasks_dir.resolve()
    entries: list[Entry] = []
    folders = [tasks_dir]
    while folders:  # os.walk's order does not matter (sorted below); its lstat per file costs a tenth of a load
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                items = list(listing)
        except OSError as exc:
            entries.append(Entry(folder, f"cannot list directory ({exc.strerror})"))
            continue
        for item in items:
            name = item.name
            if _ignored(name):
                continue
            path = folder / name
            if _is_dir(item):
                if not is_utf8(name):  # not walked: every file below would have the same problem
                    entries.append(Entry(path, NAME_NOT_UTF8))
                    continue
                if item.is_symlink():  # reported, never walked, so no loop can recur
                    entries.append(Entry(path, _link_problem(path, root, what) or "is a symlink to a directory"))
                    continue
                if name.endswith(".toml"):
                    entries.append(Entry(path, DIRECTORY_NAMED_TOML))
                folders.append(path)
            elif name.endswith(".toml"):
                if not is_utf8(name):
                    entries.append(Entry(path, NAME_NOT_UTF8))
                    continue
                entries.append(Entry(path, _link_problem(path, root, what) if item.is_symlink() else None))
    return sorted(entries, key=lambda entry: entry.path.parts)  # as paths sort, without a Path comparison per step


def _is_dir(item: os.DirEntry[str]) -> bool:
    """Whether a listed entry is a directory or a symlink to one (a broken or looping symlink is not)."""
    try:
        return item.is_dir()
    except OSError:
        return False


def discover(tasks_dir: Path) -> list[Path]:
    """Readable-looking task files below `tasks_dir`, sorted (`scan` also lists the entries that are not)."""
    return [entry.path for entry in scan(tasks_dir) if entry.problem is None]


class UnreadableSource(ValueError):
    """Why a file cannot be a task file; `line` is where the problem is (0: the whole file)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


def read_bytes(path: Path) -> bytes:
    """A task file's bytes; raises OSError, or UnreadableSource (a ValueError) saying why it cannot be a task file."""
    # O_NONBLOCK: opening a FIFO named *.toml must not hang; fstat then refuses it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableSource("not a regular file (a FIFO, socket or device); remove it")
        # Reads sized by fstat: one of MAX_FILE_BYTES would allocate that much for every file. Read on
        # to the end (or past the limit): the file may have grown since.
        chunks: list[bytes] = []
        size, want = 0, min(info.st_size, MAX_FILE_BYTES) + 1
        while size <= MAX_FILE_BYTES and (chunk := os.read(fd, want)):
            chunks.append(chunk)
            size += len(chunk)
            want = min(1 << 16, MAX_FILE_BYTES + 1 - size)
    finally:
        os.close(fd)
    if size > MAX_FILE_BYTES:
        raise UnreadableSource(TOO_BIG)
    return b"".join(chunks)


def decode_source(data: bytes) -> str:
    """A task file's bytes as text (a UTF-8 byte order mark is kept: load_text drops it); raises UnreadableSource."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UnreadableSource(
            "not UTF-8 text but UTF-16 (it starts with a UTF-16 byte order mark); save the file as UTF-8", 1
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        column = len(data[line_start : exc.start].decode("utf-8", "replace")) + 1
        raise UnreadableSource(
            f"not UTF-8 text: byte 0x{data[exc.start]:02X} in column {column} cannot be read as UTF-8 ({exc.reason}); "
            "save the file as UTF-8",
            data.count(b"\n", 0, exc.start) + 1,
        ) from None
