"""The dashboard's HTML: Jinja2 templates (autoescaped) rendered from the same data its JSON serves.

Instants arrive as ISO text (the JSON's form); the templates show them in UTC, and the page's own
script (static/app.js) adds the reader's local time. Every string is escaped by Jinja2, and control
characters are shown as visible escapes, as the CLI does.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2

from reconciler.clock import utc_text
from reconciler.output.jobs import compact
from reconciler.output.text import safe
from reconciler.output.views import local

HERE = Path(__file__).parent
STATIC = HERE / "static"
STATIC_FILES = frozenset(path.name for path in STATIC.iterdir() if path.is_file())  # what /static/ serves

STATUS_CLASSES = {
    "succeeded": "ok",
    "failed": "bad",
    "lost": "bad",
    "timed_out": "bad",
    "missed": "warn",
    "skipped": "muted",
    "queued": "info",
    "running": "info",
}


def _utc(value: str | None) -> str:
    return utc_text(datetime.fromisoformat(value)) if value else "-"


def _age(value: str | None, now: str | None) -> str:
    """How long before `now` an instant was (both ISO text): `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`."""
    if not value or not now:
        return "-"
    seconds = max(0, int((datetime.fromisoformat(now) - datetime.fromisoformat(value)).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours < 1:
        return f"{minutes} min"
    if days < 1:
        return f"{hours} h {minutes % 60} min"
    return f"{days} d {hours % 24} h"


def _in_zone(value: str | None, zone: str) -> str:
    """An ISO instant in the task's zone (`2026-12-06 06:30:00 CET`), as the CLI's `status` shows it."""
    if not value:
        return ""
    return local(datetime.fromisoformat(value), zone) or ""  # `status`'s own rendering, unknown zone included


def _query(base: dict[str, Any], **changes: Any) -> str:
    """`?a=1&b=2`: the page's filters with `changes` (a None drops the key)."""
    merged = {**base, **changes}
    return "?" + urlencode({k: v for k, v in merged.items() if v not in (None, "")})


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template is HTML
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["utc"] = _utc
    env.filters["in_zone"] = _in_zone
    env.filters["age"] = _age
    env.filters["compact"] = compact
    env.filters["safe_text"] = lambda value: safe(str(value)) if value is not None else ""
    env.filters["status_class"] = lambda status: STATUS_CLASSES.get(status or "", "muted")
    env.globals["query"] = _query
    return env


def render(template: str, data: dict[str, Any]) -> str:
    return environment().get_template(template).render(**data)
