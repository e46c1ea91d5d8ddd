"""`reconciler export`: the database's tasks written back as task files (adoption)."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

import tomli_w

from reconciler.commands import EXIT_OK, with_store
from reconciler.store import Store


def _toml_value(path: tuple[str, ...], value: Any) -> Any:
    if path in (("trigger", "start_at"), ("trigger", "end_at"), ("trigger", "at")) and isinstance(value, str):
        try:
            return datetime.fromisoformat(value) if "T" in value else datetime.fromisoformat(value).date()
        except ValueError:
            return value
    if isinstance(value, dict):
        return {k: _toml_value((*path, k), v) for k, v in value.items()}
    return value


def export_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A stored spec in file order (as the model declares it), without empty tables or moved_from."""
    from reconciler.models import TaskSpec

    try:
        ordered = TaskSpec.model_validate(spec).normalized()
    except ValueError:  # a drifted row that no longer validates: export it as stored
        ordered = dict(spec)

    def prune(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: prune(v) for k, v in value.items() if v != {} and k != "moved_from"}
        return value

    result: dict[str, Any] = prune(ordered)
    return result


def cmd_export(args: argparse.Namespace) -> int:
    async def work(store: Store) -> int:
        async with store.connection() as conn:
            rows = await Store.tasks(conn)
        out = Path(args.out_dir)
        for row in rows:
            target = out / f"{row.id}.toml"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(tomli_w.dumps(_toml_value((), export_spec(row.spec))))
        print(f"exported {len(rows)} task(s) to {out}")
        return EXIT_OK

    return with_store(args, work)
