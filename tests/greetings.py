"""A kind of declared file made here only, to show what a new kind costs: a model, a `NamedKind` naming it (with
the one hook it words its own way: its summary) and a registration. `greetings.d/NAME.toml` says `text = "…"`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from reconciler.files.kinds import NamedItem, NamedKind
from reconciler.spec.model import Model


class GreetingSpec(Model):
    """A greeting file: what to say."""

    text: str = Field(max_length=20)


class Greeting(NamedItem[GreetingSpec]):
    """A valid greeting file."""


class GreetingKind(NamedKind[Greeting]):
    name = "greeting"
    directory = "greetings.d"
    option = "--greetings-dir"
    model = GreetingSpec
    empty = 'empty greeting file; write text = "hello"'
    title = "greeting file"
    description = "One TOML file in greetings.d/: what to say."

    def item(self, item_id: str, display: str, source: str, spec: Any, digest: str | None) -> Greeting:
        return Greeting(item_id, display, spec, source)

    def summary(self, spec: Mapping[str, Any]) -> str:
        return f"says {spec.get('text')!r}"


GREETINGS = GreetingKind()
