"""Reading queries.sql: its `-- name: foo` statements, with the shared `-- fragment:` pieces written in.

A fragment is SQL that several statements share (which sources an engine serves, a task's
max_running_instances): written once as `-- fragment: name(arg)` and used as `{{name(column)}}`,
it is substituted as text when the file is loaded, so PostgreSQL plans (and EXPLAIN shows)
exactly the statement it would if the text were written out: no function call hides an index.
"""

from __future__ import annotations

import re
from pathlib import Path

QUERIES_FILE = Path(__file__).with_name("queries.sql")

_SECTION = re.compile(r"^-- (name|fragment): ", flags=re.M)
_HEADER = re.compile(r"(\w+)(?:\((\w*)\))?")
_USE = re.compile(r"\{\{(\w+)(?:\(([^)]*)\))?\}\}")


def _body(text: str) -> str:
    """A section's SQL without its comment lines."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";")


def load_queries(path: Path = QUERIES_FILE) -> dict[str, str]:
    """`-- name: foo` sections of a .sql file → {name: statement}, fragments substituted."""
    parts = _SECTION.split(path.read_text())
    fragments: dict[str, tuple[str | None, str]] = {}  # name → (its argument's name, its SQL)
    named: dict[str, str] = {}
    for kind, block in zip(parts[1::2], parts[2::2], strict=True):
        header, _, text = block.partition("\n")
        if kind == "fragment":
            found = _HEADER.fullmatch(header.strip())
            if found is None:
                raise ValueError(f"{path.name}: bad fragment header {header!r}")
            fragments[found[1]] = (found[2], _body(text))
        else:
            if header.strip() in named:  # a second definition would silently replace the first
                raise ValueError(f"{path.name}: query {header.strip()} is defined twice")
            named[header.strip()] = _body(text)
    return {name: _expand(statement, fragments, name) for name, statement in named.items()}


def _expand(statement: str, fragments: dict[str, tuple[str | None, str]], name: str) -> str:
    def one(use: re.Match[str]) -> str:
        if use[1] not in fragments:
            raise ValueError(f"query {name}: unknown fragment {use[1]!r}")
        parameter, text = fragments[use[1]]
        return text.replace("{" + parameter + "}", use[2].strip()) if parameter else text

    for _ in range(4):  # a fragment may use fragments (four deep at most)
        statement, count = _USE.subn(one, statement)
        if not count:
            return statement
    raise ValueError(f"query {name}: fragments nested more than four deep")


QUERIES = load_queries()
"""Every named statement of queries.sql, by name: what the typed query functions send."""
