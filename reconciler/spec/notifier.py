"""What a notifier file (`notifiers.d/NAME.toml`) may say: its models, and the tasks' `[notify]` subscriptions."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import Field, RootModel, TypeAdapter

from reconciler.spec.model import Model
from reconciler.spec.target import Target
from reconciler.spec.task import NOTIFY_EVENTS
from reconciler.spec.values import SecretRef

MAX_NOTIFY_TIMEOUT = 60.0


class WebhookNotifier(Target):
    """A POST (or any method) of the event as JSON: URL, method, headers, query and auth as a task's target
    (`json` and `body` are refused before the model sees the file: see validate_notifier)."""

    kind: Literal["webhook"]
    timeout_seconds: float = Field(default=10, gt=0, le=MAX_NOTIFY_TIMEOUT)
    # Never in a file (the schema says so: TOML has no null); set only for a send, by model_copy.
    json_body: None = Field(default=None, alias="json")
    body: None = None


class SlackNotifier(Model):
    """A Slack incoming webhook: its URL is a secret, so it comes from the environment only."""

    kind: Literal["slack"]
    url: SecretRef
    timeout_seconds: float = Field(default=10, gt=0, le=MAX_NOTIFY_TIMEOUT)


NotifierSpec = Annotated[WebhookNotifier | SlackNotifier, Field(discriminator="kind")]


class NotifierFile(RootModel[NotifierSpec]):
    """A notifier file as a whole: `reconciler schema --kind notifier` describes it."""


@cache
def spec_adapter() -> TypeAdapter[WebhookNotifier | SlackNotifier]:
    return TypeAdapter(NotifierSpec)


def parse_spec(data: Mapping[str, Any]) -> WebhookNotifier | SlackNotifier:
    """A stored notifier spec back as its model (raises ValidationError)."""
    return spec_adapter().validate_python(data)


def subscriptions(spec: Mapping[str, Any]) -> dict[str, list[str]]:
    """A normalized task spec's `[notify]` as {event: [notifier, …]} (events without notifiers left out;
    a stored spec edited by hand into something else subscribes to nothing it cannot name)."""
    notify = spec.get("notify")
    if not isinstance(notify, dict):
        return {}
    found = {event: notify.get(event) for event in NOTIFY_EVENTS}
    named = {
        event: [n for n in names if isinstance(n, str)] for event, names in found.items() if isinstance(names, list)
    }
    return {event: names for event, names in named.items() if names}
