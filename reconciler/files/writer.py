"""A stored spec as the text of its file: the inverse of reading, for `reconciler export`.

What a file says of a spec is shaped by its model: only the keys whose value differs from the model's default, the
model's types (a float field holding 30.0 is written 30), TOML dates for date fields; then written as TOML with the
model's tables as sections (`[trigger]`, `[target]`, `[target.auth]`) and every other value on one line.
"""

from __future__ import annotations

import math
from datetime import date, datetime
from functools import cache
from typing import Any, get_args

import tomli_w
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from reconciler.spec.model import admitted
from reconciler.spec.task import TaskSpec
from reconciler.spec.values import EnvRef


def submodel(info: FieldInfo, value: dict[str, Any]) -> type[BaseModel] | None:
    """The model a table value stands for: the field's model, or the union member its `kind` names."""
    models = [t for t in admitted(info.annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    if len(models) == 1:
        return models[0]
    for model in models:
        kind = model.model_fields.get("kind")
        if kind is not None and value.get("kind") in get_args(kind.annotation):
            return model
    return None


@cache
def fields_of(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields by the key a file uses (the alias when there is one)."""
    return {info.alias or name: info for name, info in model.model_fields.items()}


@cache
def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Each optional key's default in its stored (JSON) form; None defaults are absent from a stored spec."""
    found: dict[str, Any] = {}
    for key, info in fields_of(model).items():
        if info.is_required():
            continue
        value = info.get_default(call_default_factory=True)
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
        if value is not None:
            found[key] = value
    return found


def _same(value: Any, default: Any) -> bool:
    """Equal, without True == 1 (numbers of either type compare by value: a float field's 30 is 30.0)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default) and value == default
    if isinstance(value, int | float) and isinstance(default, int | float):
        return value == default and math.copysign(1, value) == math.copysign(1, default)
    return type(value) is type(default) and bool(value == default)


def _whole(value: float) -> bool:
    """A float the file may write as an integer: whole, and not -0.0 (stored as "-0.0", hashed as such)."""
    return value.is_integer() and math.copysign(1, value) > 0


def _when(value: Any) -> Any:
    """An ISO string of a date or date-time field as a TOML date or date-time (as the model reads it)."""
    if not isinstance(value, str):
        return value
    try:
        return datetime.fromisoformat(value) if "T" in value or " " in value else date.fromisoformat(value)
    except ValueError:
        return value


def shaped(model: type[BaseModel], data: dict[str, Any], slim: bool = True) -> dict[str, Any]:
    """A stored table as a file writes it: no defaults, no nulls, no moved_from, the model's types, TOML dates.

    Also used on rows that no longer validate, so it only ever drops or retypes what it recognizes.
    `slim=False` keeps every key and number as stored (dates still become TOML dates).
    """
    fields, defaults = fields_of(model), _defaults(model)
    out: dict[str, Any] = {}
    for key, value in data.items():
        info = fields.get(key)
        if value is None:
            continue
        if info is None:  # an unknown key of a row that no longer validates: as stored
            out[key] = value
            continue
        sub = submodel(info, value) if isinstance(value, dict) else None
        if sub is not None and isinstance(value, dict):
            value = shaped(sub, value, slim)
            if slim and not value and key in defaults:  # e.g. a [policy] of defaults only
                continue
        elif slim and info.annotation is float and isinstance(value, float) and _whole(value):
            value = int(value)  # 30.0 seconds: the file says 30, the model reads 30.0 again
        elif datetime in set(admitted(info.annotation)):
            value = _when(value)
        if slim and key in defaults and _same(value, defaults[key]):
            continue
        out[key] = value
    return out


def _key(key: str) -> str:
    """A key as TOML writes it (bare when it can be, else quoted), by tomli_w's rules."""
    return tomli_w.dumps({key: 0}).removesuffix(" = 0\n")


def _inline(value: Any) -> str:
    """A value on one line: inline tables and arrays, scalars as tomli_w writes them, ISO dates with a T."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_inline(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    if isinstance(value, date):  # datetime too: 2026-12-24T18:00:00, as people write it
        return value.isoformat()
    return tomli_w.dumps({"x": value}).removeprefix("x = ").removesuffix("\n")


def _kind_first(table: dict[str, Any]) -> list[tuple[str, Any]]:
    return sorted(table.items(), key=lambda item: item[0] != "kind")


def to_toml(data: dict[str, Any], model: type[BaseModel] = TaskSpec, name: str = "") -> str:
    """A shaped spec as a task file: the model's tables ([trigger], [target], [target.auth], [policy])
    as sections, every other value on one line (`headers = { X-Api-Key = { env = "KEY" } }`)."""
    lines: list[str] = [f"[{name}]"] if name else []
    sections: list[str] = []
    fields = fields_of(model)
    for key, value in _kind_first(data):
        info = fields.get(key)
        sub = submodel(info, value) if info is not None and isinstance(value, dict) else None
        if sub is not None and sub is not EnvRef and isinstance(value, dict):
            sections.append(to_toml(value, sub, f"{name}.{_key(key)}" if name else _key(key)))
        else:
            lines.append(f"{_key(key)} = {_inline(value)}")
    return "\n".join(part for part in ("\n".join(lines) + "\n" if lines else "", *sections) if part)


def member_for(model: Any, spec: dict[str, Any]) -> type[BaseModel]:
    """The model a stored spec of `model` is: the member of a tagged union its `kind` names (the first when it
    names none), or the model itself."""
    models = [t for t in admitted(model) if isinstance(t, type) and issubclass(t, BaseModel)]
    for member in models:
        kind = member.model_fields.get("kind")
        if kind is not None and spec.get("kind") in get_args(kind.annotation):
            return member
    return models[0]
