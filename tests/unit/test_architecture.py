"""The package's shape, checked from its source: no import cycle between modules, argparse only in the CLI,
no module over 500 lines, and the import-linter contracts (pyproject.toml) kept.

Every import counts for the cycles, wherever it stands: at the top, inside a function (imported late to
start light) or under TYPE_CHECKING (for the annotations only). Each still ties the two modules together:
neither can be read, moved or tested without the other.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "reconciler"
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its __init__)."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(tree: ast.AST, name: str, is_package: bool) -> Iterator[str]:
    """The dotted names every import statement of a module names, anywhere in it (relative ones resolved)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (`from a import b` names module a.b when there is one)."""
    found = modules()
    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = {target for target in imported(tree, name, path.name == "__init__.py") if target in found}
        # `from a import b` names both a and a.b: the module a.b is the one imported, not its package's __init__.
        graph[name] = {t for t in targets if not any(other.startswith(f"{t}.") for other in targets)} - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycle_between_modules() -> None:
    found = set(cycles(import_graph()))
    assert sorted(sorted(cycle) for cycle in found) == []


def test_the_scan_sees_every_kind_of_import() -> None:
    """Imports inside functions, under TYPE_CHECKING and relative ones are edges too."""
    source = """
from typing import TYPE_CHECKING
from . import sibling
if TYPE_CHECKING:
    from reconciler.db.store import Store
def late():
    import reconciler.engine.loop
"""
    names = set(imported(ast.parse(source), "reconciler.cli.commands", False))
    assert {"reconciler.cli.sibling", "reconciler.db.store", "reconciler.engine.loop"} <= names
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]


def test_argparse_only_in_the_cli() -> None:
    outside = []
    for name, path in modules().items():
        if name == "reconciler.cli" or name.startswith("reconciler.cli."):
            continue
        if "argparse" in set(imported(ast.parse(path.read_text()), name, path.name == "__init__.py")):
            outside.append(name)
    assert outside == []


def test_no_module_over_500_lines() -> None:
    long = {name for name, path in modules().items() if len(path.read_text().splitlines()) > MAX_LINES}
    assert sorted(long) == []


def test_the_layers_contract_holds() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint_imports)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
