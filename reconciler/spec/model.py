"""The base of every file model (immutable, no unknown keys, checks across fields) and did-you-mean hints."""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ModelWrapValidatorHandler, PlainValidator, ValidationError, model_validator
from pydantic_core import InitErrorDetails

# A rule across fields of one model: the fields it reads, and a function of their values
# (defaults filled in) that returns the problem or None.
CrossCheck = tuple[tuple[str, ...], Callable[[Mapping[str, Any]], str | None]]


class Model(BaseModel):
    """Base of every file model: immutable, no unknown keys."""

    # strict: TOML has real types, so "yes" is not a boolean and "30" is not a number.
    # No NaN or infinity: no deadline, backoff or JSON body can act on one.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    # Checks across fields. Not `model_validator(mode="after")`: pydantic runs those only once
    # every field is valid, so `json` with `body` would surface only after a typo in the same
    # table was fixed. These run on the raw values whenever the fields they read are valid.
    cross_checks: ClassVar[tuple[CrossCheck, ...]] = ()

    @model_validator(mode="wrap")
    @classmethod
    def _cross_checked(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        if not cls.cross_checks:
            return handler(data)
        try:
            model = handler(data)
        except ValidationError as exc:
            if not isinstance(data, Mapping):
                raise
            failed = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
            problems = [
                problem
                for fields, check in cls.cross_checks
                if not failed & {cls.model_fields[name].alias or name for name in fields}
                and (problem := check(cls._raw_values(data, fields)))
            ]
            if not problems:
                raise
            try:
                combined = _with_problems(exc.title, _init_details(exc), data, problems)
            except (KeyError, TypeError, ValueError):  # an error type pydantic cannot rebuild: report the fields
                raise exc from None
            raise combined from None
        problems = [
            problem
            for fields, check in cls.cross_checks
            if (problem := check({name: getattr(model, name) for name in fields}))
        ]
        if problems:
            raise _with_problems(cls.__name__, [], data, problems)
        return model

    @classmethod
    def _raw_values(cls, data: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
        values = {}
        for name in fields:
            info = cls.model_fields[name]
            key = info.alias or name
            values[name] = data[key] if key in data else info.get_default(call_default_factory=True)
        return values


def _init_details(exc: ValidationError) -> list[InitErrorDetails]:
    details = []
    for error in exc.errors():
        detail = InitErrorDetails(type=error["type"], loc=error["loc"], input=error["input"])
        if "ctx" in error:
            detail["ctx"] = error["ctx"]
        details.append(detail)
    return details


def _with_problems(title: str, details: list[InitErrorDetails], data: Any, problems: list[str]) -> ValidationError:
    """A ValidationError holding `details` and one model-level error per problem."""
    extra = [
        InitErrorDetails(type="value_error", loc=(), input=data, ctx={"error": ValueError(problem)})
        for problem in problems
    ]
    return ValidationError.from_exception_data(title, [*details, *extra])


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice closest to `word` (a case-insensitive match first), or None."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    lowered = word.lower()
    if lowered in by_lower:
        return by_lower[lowered]
    close = difflib.get_close_matches(lowered, by_lower, n=1, cutoff=cutoff)
    return by_lower[close[0]] if close else None


def suggestion(word: str, choices: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the closest choice, or ""."""
    found = did_you_mean(word, choices)
    return f"; did you mean {found!r}?" if found is not None and found != word else ""


def admitted(annotation: Any, through_plain: bool = True) -> Iterator[Any]:
    """The types an annotation admits, through Optional, unions and Annotated (not into containers);
    with `through_plain` False, none behind a PlainValidator (a value read its own way: `{ env = … }`)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        if through_plain or not any(isinstance(item, PlainValidator) for item in metadata):
            yield from admitted(inner, through_plain)
    elif origin is Union or origin is types.UnionType:
        for member in get_args(annotation):
            yield from admitted(member, through_plain)
    else:
        yield annotation
