"""JSON Schemas of the files users write, generated from each kind's pydantic model (`reconciler schema`).

The schema is an editor's aid (taplo / Even Better TOML) and a CI check of a file's shape: keys,
types, kinds, ranges. `reconciler validate` stays the authority (cron syntax, time zones, literal
secrets, DST). The committed copies under `schema/` are kept equal to this output by a test.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from typing import Any

from pydantic import PlainValidator, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from reconciler.spec.calendar import WEEKDAYS, LocalDate, Weekday
from reconciler.spec.values import MAX_CLOCK_TIMES, MAX_TEXT, ClockTimes, EnvRef, SecretRef, StrOrEnv, When

DIALECT = "https://json-schema.org/draft/2020-12/schema"


_CLOCK = r"^\s*([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]+)?)?\s*$"
# A TOML local date-time as a string: JSON Schema's `date-time` format requires an offset.
_LOCAL_DATE_TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?$"


def _env_ref(generator: GenerateJsonSchema) -> JsonSchemaValue:
    return generator.generate_inner(EnvRef.__pydantic_core_schema__)


def _str_or_env(generator: GenerateJsonSchema) -> JsonSchemaValue:
    return {"anyOf": [{"type": "string", "maxLength": MAX_TEXT}, _env_ref(generator)]}


def _when(_: GenerateJsonSchema) -> JsonSchemaValue:
    return {
        "description": "a TOML date or date-time (an offset, or local to the task's timezone)",
        "anyOf": [
            {"type": "string", "format": "date-time"},
            {"type": "string", "pattern": _LOCAL_DATE_TIME},
            {"type": "string", "format": "date"},
        ],
    }


def _local_date(_: GenerateJsonSchema) -> JsonSchemaValue:
    return {"description": "a TOML local date, e.g. 2026-12-24", "type": "string", "format": "date"}


def _weekday(_: GenerateJsonSchema) -> JsonSchemaValue:
    return {"description": "a weekday", "type": "string", "enum": list(WEEKDAYS)}


def _clock_times(_: GenerateJsonSchema) -> JsonSchemaValue:
    clock = {"type": "string", "pattern": _CLOCK}
    return {
        "description": 'a time of day "HH:MM", or a list of them',
        "anyOf": [clock, {"type": "array", "items": clock, "minItems": 1, "maxItems": MAX_CLOCK_TIMES}],
    }


def _plain_validator(annotated: Any) -> Callable[..., Any]:
    """The function of the PlainValidator in an `Annotated[...]` value type of spec/values.py."""
    [found] = [item.func for item in typing.get_args(annotated)[1:] if isinstance(item, PlainValidator)]
    return found


# What a file may hold where spec/values.py reads a value with its own function: pydantic cannot see
# inside one, and would describe it as "anything".
PLAIN_INPUTS: dict[Callable[..., Any], Callable[[GenerateJsonSchema], JsonSchemaValue]] = {
    _plain_validator(StrOrEnv): _str_or_env,
    _plain_validator(SecretRef): _env_ref,
    _plain_validator(When): _when,
    _plain_validator(ClockTimes): _clock_times,
    _plain_validator(LocalDate): _local_date,
    _plain_validator(Weekday): _weekday,
}


class FileSchema(GenerateJsonSchema):
    """pydantic's generator, told what the models' plain validators accept, and that TOML has no null."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])  # `None` in a model is a key left out of the file

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        if self.get_default_value(schema) is None:
            return self.generate_inner(schema["schema"])
        return super().default_schema(schema)

    def function_plain_schema(self, schema: core_schema.PlainValidatorFunctionSchema) -> JsonSchemaValue:
        build = PLAIN_INPUTS.get(schema["function"]["function"])
        if build is None:  # a new plain validator: say what it accepts above, rather than "anything"
            raise TypeError(f"no JSON Schema for {schema['function']['function']!r}; add it to PLAIN_INPUTS")
        return build(self)


def file_schema(kind: str, model: Any, title: str, description: str) -> dict[str, Any]:
    """The JSON Schema of one kind of file (`model`: its pydantic model, or a tagged union of models), as users
    write it."""
    body = TypeAdapter(model).json_schema(mode="validation", schema_generator=FileSchema)
    body.pop("title", None)
    body.pop("description", None)
    head = {"$schema": DIALECT, "$id": f"urn:reconciler:schema:{kind}", "title": title, "description": description}
    return {**head, **body}


def render(kind: str, model: Any, title: str, description: str) -> str:
    """The schema as committed under `schema/`: indented JSON, one final newline."""
    return json.dumps(file_schema(kind, model, title, description), indent=2, ensure_ascii=False) + "\n"
