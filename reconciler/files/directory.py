"""A declared directory of one kind read: every file's bytes and digest (nothing parsed yet), an error for
every entry that cannot be one of its files; then its files checked, each standing on what it parsed to when
applied if its digest says it is unchanged since."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic

from reconciler.files.digests import file_digest
from reconciler.files.kinds import ItemT, Kind, Named, NamedKind, validate
from reconciler.files.problems import FileError
from reconciler.files.scan import UnreadableSource, decode_source, read_bytes, scan


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A file read but not parsed."""

    id: str
    path: str  # as displayed
    source: str  # a UTF-8 byte order mark kept: validate() drops it
    digest: str


@dataclass
class DirFiles(Generic[ItemT]):
    """A directory read but not parsed: its readable files, and an error for every entry that is not one."""

    kind: Kind[ItemT]
    root: str
    files: list[SourceFile]
    errors: list[FileError]
    order: dict[str, int]  # display path → place in the directory: errors are reported file by file
    present: bool = True  # the directory exists

    def digests(self) -> dict[str, str]:
        """{id: digest} of the files that can be items: an id with a problem cannot (nor be sent to PostgreSQL,
        which refuses a file name that is not UTF-8)."""
        return {f.id: f.digest for f in self.files if self.kind.name_error(f.id, f.path) is None}

    def failed(self, errors: list[FileError]) -> set[str]:
        """The ids of the files that have errors."""
        prefix = self.root.rstrip("/") + "/"
        return {self.kind.item_id(e.path[len(prefix) :]) for e in errors if e.path.startswith(prefix)}

    def check(self, known: Mapping[str, Any] | None = None) -> tuple[list[ItemT], list[FileError]]:
        """Check every file, except those `known` holds with their digest: they stand on what they parsed
        to when applied, which is what they parse to now (the digest covers all the parse depends on)."""
        known = known or {}
        items: list[ItemT] = []
        errors = list(self.errors)
        for file in self.files:
            item = self.kind.stand_in(file.id, file.path, file.source, file.digest, known) if known else None
            if item is None:
                item, problems = validate(self.kind, file.id, file.path, file.source, file.digest)
                errors.extend(problems)
            if item is not None:
                items.append(item)
        errors.extend(self.kind.across(items, {item.key() for item in items} | self.failed(errors)))
        # File by file, each in line order (the checks across files come last otherwise).
        last = len(self.order)
        if self.kind.in_line_order:
            errors.sort(key=lambda e: (self.order.get(e.path, last), e.line))
        else:
            errors.sort(key=lambda e: self.order.get(e.path, last))
        return items, errors


def read_dir(
    kind: Kind[ItemT],
    directory: Path,
    display_root: str | None = None,
    required: bool = True,
    into: type[DirFiles[ItemT]] = DirFiles,
) -> DirFiles[ItemT]:
    """Read and digest every file of `kind` under `directory` (nothing is parsed); collect the errors of the
    rest. A directory that is not there has the kind's `absent` errors (none when not `required`)."""
    root = display_root if display_root is not None else str(directory)
    if not directory.is_dir():
        return into(kind, root, [], kind.absent(root, directory, required), {}, present=False)
    files: list[SourceFile] = []
    errors: list[FileError] = []
    order: dict[str, int] = {}
    depth = len(directory.parts)
    for entry in scan(directory, kind.within or root):
        relative = "/".join(entry.path.parts[depth:])  # what relative_to gives, at a fraction of its cost
        display = f"{root.rstrip('/')}/{relative}" if relative else root
        order.setdefault(display, len(order))
        if entry.problem is not None:
            errors.append(FileError(display, 0, "(file)", entry.problem))
            continue
        if not kind.nested and "/" in relative:
            errors.append(FileError(display, 0, "(file)", f"{kind.name} files sit directly in {root}; move it up"))
            continue
        try:
            data = read_bytes(entry.path)
            source = decode_source(data)
        except OSError as exc:
            errors.append(FileError(display, 0, "(file)", f"cannot read file ({exc.strerror})"))
            continue
        except ValueError as exc:
            line = exc.line if isinstance(exc, UnreadableSource) else 0
            errors.append(FileError(display, line, "(file)", str(exc)))
            continue
        item_id = kind.item_id(relative)  # tasks.d/billing/invoices.toml → billing/invoices
        files.append(SourceFile(item_id, display, source, file_digest(item_id, data)))
    return into(kind, root, files, errors, order)


def load_named(kind: NamedKind[ItemT], directory: Path, display_root: str | None, required: bool) -> Named[ItemT]:
    """Every `NAME.toml` directly in `directory` (none when it does not exist, unless `required`: it was named on
    the command line); `_` and `.` names skipped. Anything else there is an error."""
    files = read_dir(kind, directory, display_root, required)
    found, errors = files.check()
    return Named(kind, files.root, {item.key(): item for item in found}, errors, files.present, files.failed(errors))
