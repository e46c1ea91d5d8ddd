"""`reconciler schema KIND`: the JSON Schema of a kind of file."""

from __future__ import annotations

import argparse

from reconciler.errors import EXIT_OK
from reconciler.files.registry import kind_named
from reconciler.spec.jsonschema import render


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of a kind of file (`reconciler schema > schema/task.schema.json`)."""
    kind = kind_named(args.kind)
    print(render(kind.name, kind.model, kind.title, kind.description), end="")
    return EXIT_OK
