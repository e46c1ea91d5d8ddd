"""schemata.toml → the DDL that creates what is missing (pure; store.py executes it).

Only missing objects get a statement, so a second run issues none and takes no locks
(ALTER TABLE takes an exclusive lock even when the column exists).
"""

from __future__ import annotations

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


def load_schemata(path: Path = SCHEMATA) -> Schemata:
    """Read the declared schema."""
    data: dict[str, Any] = tomllib.loads(path.read_text())
    tables = [
        Table(
            name=t["name"],
            primary_key=t["primary_key"],
            columns=[Column(**c) for c in t["columns"]],
            indexes=[Index(**i) for i in t.get("indexes", [])],
        )
        for t in data["tables"]
    ]
    return Schemata(data["schema"], tables)


@dataclass(frozen=True)
class Existing:
    """What the catalog already holds."""

    schema: bool
    columns: dict[str, set[str]]  # table → column names
    indexes: set[str]


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
        for index in table.indexes:
            if index.name in have.indexes:
                continue
            statement = sql.SQL("CREATE {unique}INDEX IF NOT EXISTS {index} ON {table} ({columns})").format(
                unique=sql.SQL("UNIQUE " if index.unique else ""),
                index=sql.Identifier(index.name),
                table=name,
                columns=sql.SQL(", ").join(map(sql.Identifier, index.columns)),
            )
            if index.where:
                statement = statement + sql.SQL(" WHERE ") + sql.SQL(index.where)
            out.append(statement)
    return out
