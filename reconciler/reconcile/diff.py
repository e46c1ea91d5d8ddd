"""Differences between a stored spec and a file's, and the diff of a kind whose files are stored whole
(a spec and its hash per name and source, as notifiers are): what apply creates, updates and deletes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, Self, TypeVar

from reconciler.files.kinds import DeclaredItem

Op = Literal["create", "update", "delete", "move", "noop"]
D = TypeVar("D", bound=DeclaredItem)


@dataclass(frozen=True)
class FieldDiff:
    path: str
    old: Any
    new: Any


class StoredSpec(Protocol):
    """A stored item of a kind stored whole: its owner, name, normalized spec and spec hash."""

    @property
    def source(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> dict[str, Any]: ...
    @property
    def spec_hash(self) -> str: ...


@dataclass(frozen=True)
class StoredRow:
    """A stored item of a kind stored whole (a notifier, a calendar, a limit): a row of its table."""

    source: str
    name: str
    spec: dict[str, Any]
    spec_hash: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        return cls(row["source"], row["name"], row["spec"], row["spec_hash"])


@dataclass
class ItemChange(Generic[D]):
    """What apply does to one item of a kind stored whole: its op, the fields it changes, the file's item
    (create, update) and the stored spec (update, delete)."""

    op: Op  # create | update | delete
    name: str
    fields: list[FieldDiff] = field(default_factory=list)
    item: D | None = None
    before: dict[str, Any] | None = None

    @property
    def after(self) -> dict[str, Any] | None:
        return self.item.normalized if self.item is not None else None


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; lists and scalars are leaves."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: value}


def diff_fields(old: dict[str, Any], new: dict[str, Any]) -> list[FieldDiff]:
    """Field-level differences between two normalized specs, sorted by path."""
    left, right = flatten(old), flatten(new)
    return [
        FieldDiff(path, left.get(path), right.get(path))
        for path in sorted(set(left) | set(right))
        if left.get(path) != right.get(path)
    ]


def diff_declared(desired: Mapping[str, D], rows: Iterable[StoredSpec], source: str) -> list[ItemChange[D]]:
    """What apply does to this source's items of a kind stored whole (unchanged ones left out), by name: the files'
    items are created or updated, the rows without a file deleted."""
    stored = {row.name: row for row in rows if row.source == source}
    changes: list[ItemChange[D]] = []
    for name, item in desired.items():
        row = stored.get(name)
        if row is None:
            changes.append(ItemChange("create", name, [], item, None))
        elif row.spec_hash != item.spec_hash:
            changes.append(ItemChange("update", name, diff_fields(row.spec, item.normalized), item, row.spec))
    changes += [ItemChange("delete", name, [], None, row.spec) for name, row in stored.items() if name not in desired]
    return sorted(changes, key=lambda change: change.name)
