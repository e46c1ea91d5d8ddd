"""schemata.toml → the DDL that creates what is missing, and replaces a declared index or CHECK
whose definition changed (pure; store.py executes it).

Only missing or changed objects get a statement, so a second run issues none and takes no locks
(ALTER TABLE takes an exclusive lock even when the column exists).
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg import sql

SCHEMATA = Path(__file__).with_name("schemata.toml")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    null: bool = True
    default: str | None = None
    check: str | None = None

    def definition(self) -> sql.Composed:
        parts: list[sql.Composable] = [sql.Identifier(self.name), sql.SQL(self.type)]
        if not self.null:
            parts.append(sql.SQL("NOT NULL"))
        if self.default is not None:
            parts.append(sql.SQL("DEFAULT ") + sql.SQL(self.default))
        if self.check is not None:
            parts.append(sql.SQL("CHECK (") + sql.SQL(self.check) + sql.SQL(")"))
        return sql.SQL(" ").join(parts)


@dataclass(frozen=True)
class Index:
    name: str
    columns: list[str]
    unique: bool = False
    where: str | None = None


@dataclass(frozen=True)
class Table:
    name: str
    primary_key: list[str]
    columns: list[Column]
    indexes: list[Index] = field(default_factory=list)


@dataclass(frozen=True)
class Schemata:
    schema: str
    tables: list[Table]
    fingerprint: str = ""  # of the declaration's text: the schema's comment once it is initialized from it


def load_schemata(path: Path = SCHEMATA) -> Schemata:
    """Read the declared schema."""
    text = path.read_text()
    data: dict[str, Any] = tomllib.loads(text)
    tables = [
        Table(
            name=t["name"],
            primary_key=t["primary_key"],
            columns=[Column(**c) for c in t["columns"]],
            indexes=[Index(**i) for i in t.get("indexes", [])],
        )
        for t in data["tables"]
    ]
    mark = f"reconciler schema sha256:{hashlib.sha256(text.encode()).hexdigest()}"
    return Schemata(data["schema"], tables, mark)


@dataclass(frozen=True)
class IndexShape:
    """A catalog index as schemata.toml describes one."""

    table: str
    columns: list[str]  # an expression column shows as ""
    unique: bool
    btree: bool
    where: str | None


@dataclass(frozen=True)
class Existing:
    """What the catalog already holds."""

    schema: bool
    columns: dict[str, set[str]]  # table → column names
    indexes: set[str]
    shapes: dict[str, IndexShape] = field(default_factory=dict)  # index name → its shape
    checks: dict[str, str] = field(default_factory=dict)  # CHECK constraint name → its expression
    # (declared, catalog) expressions that PostgreSQL parses alike, though their texts differ
    same: frozenset[tuple[str, str]] = frozenset()


def check_name(table: str, column: Column) -> str:
    """The name PostgreSQL gives a column's CHECK (and the initializer, when it replaces one)."""
    return f"{table}_{column.name}_check"


def check_expression(definition: str) -> str:
    """pg_get_constraintdef's `CHECK ((expr))` (perhaps `NOT VALID`) → `(expr)`."""
    return definition.removeprefix("CHECK ").removesuffix(" NOT VALID")


def expression_pairs(decl: Schemata, have: Existing) -> dict[str, set[tuple[str, str]]]:
    """Per table, the (declared, catalog) expressions of existing CHECKs and index predicates whose
    texts differ: PostgreSQL writes them back its own way (`IN` as `= ANY (ARRAY[…])`, casts, parentheses)."""
    out: dict[str, set[tuple[str, str]]] = {}
    for table in decl.tables:
        pairs = [
            (c.check, have.checks[check_name(table.name, c)])
            for c in table.columns
            if c.check is not None and check_name(table.name, c) in have.checks
        ]
        for index in table.indexes:
            shape = have.shapes.get(index.name)
            if shape is not None and index.where is not None and shape.where is not None:
                pairs.append((index.where, shape.where))
        if differing := {(d, c) for d, c in pairs if d != c}:
            out[table.name] = differing
    return out


def _same(have: Existing, declared: str | None, catalog: str | None) -> bool:
    if declared is None or catalog is None:
        return declared == catalog
    return declared == catalog or (declared, catalog) in have.same


def index_changed(table: str, index: Index, have: Existing) -> bool:
    shape = have.shapes.get(index.name)
    if shape is None:
        return False  # missing (created below) or not ours to judge
    found = (shape.table, shape.columns, shape.unique, shape.btree)
    return found != (table, index.columns, index.unique, True) or not _same(have, index.where, shape.where)


def create_index(name: sql.Identifier, index: Index) -> sql.Composed:
    statement = sql.SQL("CREATE {unique}INDEX IF NOT EXISTS {index} ON {table} ({columns})").format(
        unique=sql.SQL("UNIQUE " if index.unique else ""),
        index=sql.Identifier(index.name),
        table=name,
        columns=sql.SQL(", ").join(map(sql.Identifier, index.columns)),
    )
    if index.where:
        statement = statement + sql.SQL(" WHERE ") + sql.SQL(index.where)
    return statement


def statements(decl: Schemata, have: Existing) -> list[sql.Composed]:
    """The statements that bring the database up to `decl`; empty when it is already there."""
    out: list[sql.Composed] = []
    schema = sql.Identifier(decl.schema)
    if not have.schema:
        out.append(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
    for table in decl.tables:
        name = sql.Identifier(decl.schema, table.name)
        present = have.columns.get(table.name)
        if present is None:
            body = [c.definition() for c in table.columns]
            body.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, table.primary_key))))
            out.append(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(name, sql.SQL(", ").join(body)))
        else:
            for column in table.columns:
                if column.name not in present:
                    out.append(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {}").format(name, column.definition()))
                elif column.check is not None:
                    out += _check_statements(name, table.name, column, have)
        for index in table.indexes:
            if index_changed(table.name, index, have):
                out.append(sql.SQL("DROP INDEX {}").format(sql.Identifier(decl.schema, index.name)))
            elif index.name in have.indexes:
                continue
            out.append(create_index(name, index))
    return out


def _check_statements(name: sql.Identifier, table: str, column: Column, have: Existing) -> list[sql.Composed]:
    """A column's declared CHECK added when missing, replaced when its definition changed (one ALTER)."""
    assert column.check is not None
    constraint = sql.Identifier(check_name(table, column))
    add = sql.SQL("ADD CONSTRAINT {} CHECK ({})").format(constraint, sql.SQL(column.check))
    found = have.checks.get(check_name(table, column))
    if found is None:
        return [sql.SQL("ALTER TABLE {} ").format(name) + add]
    if _same(have, column.check, found):
        return []
    return [sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}, ").format(name, constraint) + add]
