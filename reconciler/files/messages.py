"""pydantic's validation errors as a file's one-line errors (key, problem, fix), and the keys allowed
at each place of a file, read from its model."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, PlainValidator, ValidationError

from reconciler.files.problems import FileError
from reconciler.spec.model import admitted, did_you_mean, suggestion


@dataclass(frozen=True)
class Keys:
    """The keys a kind's files may hold: those allowed per raw pydantic location (a tagged union's
    members under their tag, as pydantic's locations have them), and the (parent, tag) pairs of its unions."""

    allowed: dict[tuple[str, ...], list[str]]
    tags: frozenset[tuple[str, str]]

    @property
    def root_tags(self) -> tuple[str, ...]:
        """The tags of a file that is a tagged union as a whole (a notifier's `kind`): they lead its locations."""
        return tuple(key[0] for key in self.allowed if len(key) == 1 and () not in self.allowed)


def allowed_keys(model: Any) -> Keys:
    """The Keys of a file whose model is `model` (a model class, or a tagged union of them): every nested
    model and tagged union is walked; a value read by a plain validator (`{ env = "NAME" }`) is not."""
    allowed: dict[tuple[str, ...], list[str]] = {}
    tags: set[tuple[str, str]] = set()

    def walk(annotation: Any, path: tuple[str, ...]) -> None:
        members = list(_models(annotation))
        if len(members) == 1:
            allowed[path] = _names(members[0])
            fields(members[0], path)
            return
        for member in members:  # a tagged union: its members in their order (a message lists the tags so)
            tag = member.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]
            allowed[(*path, tag)] = _names(member)
            if path:
                tags.add((path[-1], tag))
            fields(member, (*path, tag))

    def fields(model: type[BaseModel], path: tuple[str, ...]) -> None:
        for name, info in model.model_fields.items():
            plain = any(isinstance(item, PlainValidator) for item in info.metadata)  # SecretRef: `{ env = … }`
            if not plain and list(_models(info.annotation)):
                walk(info.annotation, (*path, info.alias or name))

    walk(model, ())
    return Keys(allowed, frozenset(tags))


def _names(model: type[BaseModel]) -> list[str]:
    """The keys a file may write: every field but those the reconciler sets itself (`exclude`)."""
    return sorted(info.alias or name for name, info in model.model_fields.items() if not info.exclude)


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The model classes an annotation stands for: itself, or the members of an (optional) union."""
    return (t for t in admitted(annotation, through_plain=False) if isinstance(t, type) and issubclass(t, BaseModel))


def _clean_loc(loc: tuple[int | str, ...], tags: frozenset[tuple[str, str]]) -> tuple[str, ...]:
    out: list[str] = []
    for part in loc:
        text = str(part)
        # Discriminated unions put the tag into the location: trigger.cron.expr → trigger.expr.
        if out and (out[-1], text) in tags:
            continue
        if text == "[key]":  # a dict key's own error: the key path already ends with it
            continue
        if text == "json_body":
            text = "json"
        out.append(text)
    return tuple(out)


def _quoted(text: str) -> list[str]:
    """The 'quoted' words of a pydantic message: the choices of a literal or a tagged union."""
    return re.findall(r"'([^']*)'", text)


def _allowed_here(error: Any, spec_fields: dict[tuple[str, ...], list[str]]) -> list[str]:
    """The keys allowed next to an unknown one; a location no model is listed for is inside `{ env = "NAME" }`."""
    return spec_fields.get(tuple(str(part) for part in error["loc"][:-1]), ["env"])


def _misspelt(errors: list[Any], keys: Keys) -> set[tuple[str, ...]]:
    """Key paths an unknown key probably meant (`tokn` → `token`): their "missing" errors say nothing more."""
    meant = set()
    for error in errors:
        if error["type"] == "extra_forbidden":
            loc = _clean_loc(error["loc"], keys.tags)
            found = did_you_mean(loc[-1], _allowed_here(error, keys.allowed))
            if found is not None:
                meant.add((*loc[:-1], found))
    return meant


# pydantic's bound errors → (their context's key, the words of "must be …")
BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "less_than_equal": ("le", "at most"),
    "greater_than": ("gt", "more than"),
    "less_than": ("lt", "less than"),
}


def _message(error: Any, spec_fields: dict[tuple[str, ...], list[str]], loc: tuple[str, ...]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_here(error, spec_fields)
        hint = suggestion(loc[-1], allowed)
        listed = ", ".join(allowed)
        return (
            f"unknown key {loc[-1]!r}{hint} (allowed here: {listed})"
            if hint
            else f"unknown key {loc[-1]!r}; allowed here: {listed}"
        )
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        tags = error["ctx"]["expected_tags"]
        hint = suggestion(str(error["ctx"]["tag"]), _quoted(tags))
        return (
            f"unknown kind {error['input'].get('kind')!r}{hint} (kinds: {tags})"
            if hint
            else f"unknown kind {error['input'].get('kind')!r}; use one of {tags}"
        )
    if kind == "union_tag_not_found":
        tags = [key[-1] for key in spec_fields if key[:-1] == loc[:-1] and len(key) == len(loc)]
        return f"missing kind; use one of {', '.join(map(repr, tags))}" if tags else "missing kind"
    if kind in BOUNDS:
        bound, words = BOUNDS[kind]
        return f"must be {words} {error['ctx'][bound]} (got {error['input']!r})"
    if kind in ("too_long", "string_too_long"):
        unit = "characters" if kind == "string_too_long" else "entries"
        got = error["ctx"].get("actual_length")
        return f"may have at most {error['ctx']['max_length']} {unit}" + (f" (got {got})" if got is not None else "")
    message = str(error["msg"])
    if kind == "literal_error" and isinstance(error.get("input"), str):
        message += suggestion(error["input"], _quoted(error["ctx"]["expected"]))
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    if "input" in error and kind.endswith("_type"):
        message += f" (got {type(error['input']).__name__})"
    return message


ErrorAt = Callable[[tuple[str, ...], str], FileError]  # (key path, message) → the file's error at that key


def model_errors(exc: ValidationError, keys: Keys, defused: list[tuple[str, ...]], error: ErrorAt) -> list[FileError]:
    """A model's validation errors as the file's errors (`defused`: key paths already reported as hostile)."""
    errors = []
    problems = exc.errors()
    misspelt = _misspelt(problems, keys)
    for problem in problems:
        loc = _clean_loc(problem["loc"], keys.tags)
        if problem["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = (*loc, "kind")
        if problem["type"] == "missing" and loc in misspelt:
            continue  # "unknown key 'tokn'; did you mean 'token'?" says it
        # An unknown key is about the key, not the value: reported even when the value was defused.
        if problem["type"] == "extra_forbidden" or not any(loc[: len(bad)] == bad for bad in defused):
            errors.append(error(loc, _message(problem, keys.allowed, loc)))
    return errors
