"""What one run's requests carry (docs/requests.md, the table of headers): its target's method, headers and body,
and the engine's headers: who sent it (User-Agent), which run and attempt it is, its Idempotency-Key, its place in
the run's trace (`traceparent`) and, with [target.signing], a Standard Webhooks signature over the exact bytes sent.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reconciler import __version__
from reconciler.clock import utc_iso
from reconciler.spec.signing import Signing
from reconciler.spec.target import Target
from reconciler.targets.secrets import RunSecrets
from reconciler.targets.signing import signature_headers
from reconciler.tracing import RunTrace

USER_AGENT = f"reconciler/{__version__}"

# A job's attempt (completion = "callback"), before its request leaves: the headers it adds (its callback URL)
# and the secrets among them (its token), scrubbed like the task's own from what the target answers.
Prepared = tuple[dict[str, str], tuple[str, ...]]
Prepare = Callable[[int], Awaitable[Prepared]]


def compact_json(value: Any) -> str:
    """JSON bodies as the SPEC's examples show them: no spaces after separators."""
    return json.dumps(value, separators=(",", ":"))


@dataclass
class Request:
    """What every attempt of one run sends: its target, task, occurrence and Idempotency-Key; its run (id, kind,
    trace: None for a notifier's delivery) and signing; `prepare`, a job's (completion = "callback"), called before
    each attempt's request leaves. `body`: the bytes sent (and signed), `content_type` what a JSON body is sent as
    unless the task's headers say."""

    target: Target
    task_id: str
    scheduled_for: datetime
    key: str
    prepare: Prepare | None = None
    run_id: int | None = None
    kind: str | None = None
    trace: RunTrace | None = None
    signing: Signing | None = None
    body: bytes | None = field(init=False)
    content_type: str | None = field(init=False)

    def __post_init__(self) -> None:
        target, self.content_type = self.target, None
        if target.json_body is not None:
            self.body = compact_json(target.json_body).encode()
            if not any(name.lower() == "content-type" for name in target.headers):
                self.content_type = "application/json"
        else:
            self.body = None if target.body is None else target.body.encode()

    def headers(self, attempt: int, span_id: str | None, sent_at: float, secrets: RunSecrets) -> dict[str, str]:
        """The engine's headers of attempt `attempt`, sent from trace span `span_id` at `sent_at` (POSIX seconds, by
        the database's clock)."""
        headers = {
            "User-Agent": USER_AGENT,
            "X-Reconciler-Task": self.task_id,
            "X-Reconciler-Scheduled-For": utc_iso(self.scheduled_for),
            "X-Reconciler-Attempt": str(attempt),
            "Idempotency-Key": self.key,
        }
        if self.content_type is not None:
            headers["Content-Type"] = self.content_type
        if self.run_id is not None and self.kind is not None:
            headers["X-Reconciler-Kind"] = self.kind
            headers["X-Reconciler-Run-Id"] = str(self.run_id)
        if self.trace is not None and span_id:
            headers["traceparent"] = self.trace.header(span_id)
        if self.signing is not None:
            headers.update(signature_headers(self.signing, self.key, int(sent_at), self.body or b"", secrets))
        return headers
