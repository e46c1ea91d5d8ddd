"""schemata.toml → the DDL that creates what is missing, and replaces a declared index or CHECK
whose definition changed (pure; store.py executes it).

Only missing or changed objects get a statement, so a second run issues none and takes no locks
(ALTER TABLE takes an exclusive lock even when the column exists).
"""

from __future__ import annotations

import dataclasses
import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg import sql

from reconciler.db import partitions
from reconciler.db.partitions import Bound, Partitioning, index_name

SCHEMATA = Path(__file__).with_name("schemata.toml")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    null: bool = True
    default: str | None = None
    check: str | None = None

    def definition(self, table: str) -> sql.Composed:
        """The column as CREATE TABLE declares it; its CHECK named as PostgreSQL would (check_name), so that a
        partition made LIKE the table, or a table converted to one, carries the constraint the parent has."""
        parts: list[sql.Composable] = [sql.Identifier(self.name), sql.SQL(self.type)]
        if not self.null:
            parts.append(sql.SQL("NOT NULL"))
        if self.default is not None:
            parts.append(sql.SQL("DEFAULT ") + sql.SQL(self.default))
        if self.check is not None:
            constraint = sql.SQL("CONSTRAINT {} CHECK (").format(sql.Identifier(check_name(table, self)))
            parts.append(constraint + sql.SQL(self.check) + sql.SQL(")"))
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
    partition: Partitioning | None = None  # partitioned by range of a time column (db/partitions.py)


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
            partition=Partitioning(**t["partition"]) if "partition" in t else None,
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
    partitioned: frozenset[str] = frozenset()  # the tables that are partitioned


def unconverted(decl: Schemata, have: Existing) -> list[Table]:
    """The tables declared partitioned that exist unpartitioned (an older release made them): db/conversion.py."""
    return [
        t for t in decl.tables if t.partition is not None and t.name in have.columns and t.name not in have.partitioned
    ]


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
    unconverted_names = {t.name for t in unconverted(decl, have)}
    if not have.schema:
        out.append(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
    for table in decl.tables:
        name = sql.Identifier(decl.schema, table.name)
        present = have.columns.get(table.name)
        if present is None:
            out.append(create_table(name, table))
        elif table.name in unconverted_names:
            continue  # db/conversion.py's first: its indexes and constraints are those of the table it makes
        else:
            for column in table.columns:
                if column.name not in present:
                    add = sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {}")
                    out.append(add.format(name, column.definition(table.name)))
                elif column.check is not None:
                    out += _check_statements(name, table.name, column, have)
        for index in table.indexes:
            if index_changed(table.name, index, have):
                out.append(sql.SQL("DROP INDEX {}").format(sql.Identifier(decl.schema, index.name)))
            elif index.name in have.indexes:
                continue
            out.append(create_index(name, index))
    return out


def create_table(name: sql.Identifier, table: Table, identity_start: int | None = None) -> sql.Composed:
    """CREATE TABLE as declared (partitioned by range of its time column, when it is); `identity_start`: where
    its identity column starts (a converted table's next id)."""
    body = [_with_start(c, table.name, identity_start) for c in table.columns]
    body.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, table.primary_key))))
    statement = sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(name, sql.SQL(", ").join(body))
    if table.partition is not None:
        statement += sql.SQL(" PARTITION BY RANGE ({})").format(sql.Identifier(table.partition.column))
    return statement


def partition_statements(schema: str, table: Table, bound: Bound) -> list[sql.Composed]:
    """A partition of `table` made with the declared indexes (see partitions.create)."""
    child = sql.Identifier(schema, bound.name)
    indexes = [
        create_index(child, dataclasses.replace(index, name=index_name(table.name, bound.name, index.name)))
        for index in table.indexes
    ]
    return partitions.create(schema, table.name, bound, indexes)


def identity_columns(table: Table) -> list[str]:
    return [c.name for c in table.columns if "IDENTITY" in c.type.upper()]


def _with_start(column: Column, table: str, start: int | None) -> sql.Composed:
    if start is not None and "IDENTITY" in column.type.upper():
        column = dataclasses.replace(column, type=f"{column.type} (START WITH {int(start)})")
    return column.definition(table)


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
