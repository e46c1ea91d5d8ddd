"""`reconciler schema KIND`: the JSON Schema of a kind of file."""

from __future__ import annotations

from reconciler.cli.options import SchemaOptions
from reconciler.errors import EXIT_OK


def schema(options: SchemaOptions) -> int:
    """Print the JSON Schema of a kind of file (`reconciler schema > schema/task.schema.json`)."""
    from reconciler.files.registry import kind_named
    from reconciler.spec.jsonschema import render

    kind = kind_named(options.kind)
    print(render(kind.name, kind.model, kind.title, kind.description), end="")
    return EXIT_OK
