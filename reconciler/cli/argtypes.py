"""The command line's value types: each argument is checked as argparse reads it, so a bad value is a usage error
(exit 1, one line) before any command runs. The bounds are docs/files.md's "Input bounds": generous, but each
value stays one the process can act on."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

from reconciler.spec.hosts import HOST_PORT, host_problem

Number = TypeVar("Number", int, float)


def bounded(kind: Callable[[str], Number], low: Number, high: Number, above: bool = False) -> Callable[[str], Number]:
    """An argparse type: a finite `kind` in [low, high] (in (low, high] when `above`)."""
    noun = "an integer" if kind is int else "a number"
    limits = f"{'greater than' if above else 'at least'} {low} and at most {high}"

    def parse(text: str) -> Number:
        try:
            if not text.isascii() or "_" in text:  # int() reads '٣', '５' and '1_0'; a person means none of them
                raise ValueError(text)
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not math.isfinite(value) or value < low or value > high or (above and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} must be {limits}")
        return value

    return parse


def revision_name(text: str) -> str:
    """An argparse type: a revision as git or a person writes it, 1-200 printable characters."""
    if not 0 < len(text) <= 200 or not text.isprintable() or text != text.strip():
        raise argparse.ArgumentTypeError("a revision is 1 to 200 printable characters without surrounding spaces")
    return text


def host_port(text: str) -> str:
    """An argparse type: HOST:PORT with a port 0-65535; an IPv6 host goes in brackets."""
    match = HOST_PORT.fullmatch(text)
    if not match or not 0 < len(match.group(2) or "") <= 5 or int(match.group(2)) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT with a port from 0 to 65535")
    host = match.group(1)
    problem = host_problem(host) if host else None
    if problem:
        raise argparse.ArgumentTypeError(problem)
    # Brackets dropped: metrics.serve_metrics splits at the last colon and binds the bare address.
    return f"{host.strip('[]')}:{int(match.group(2))}"


def traceparent(text: str) -> str:
    """An argparse type: a W3C traceparent (`trigger --traceparent`) the run joins."""
    from reconciler.tracing import traceparent_problem

    problem = traceparent_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def public_url(text: str) -> str:
    """An argparse type: the http(s) base URL targets reach the engines at (`engine --public-url`), without
    credentials, query or fragment; its trailing slash dropped."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(
            f"{text[:200]!r} is not an http:// or https:// URL, e.g. https://reconciler.internal"
        )
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError("give the base URL alone: no credentials, query or fragment")
    return text.rstrip("/")


# Option bounds (docs/files.md, "Input bounds"): generous, but each value stays one the process can act on.
COUNT = bounded(int, 1, 10_000)  # --count, --concurrency, --batch
LIMIT = bounded(int, 1, 100_000)
MAX_DELETES = bounded(int, 0, 1_000_000)
DEBOUNCE_MS = bounded(int, 0, 600_000)
KEEP_DAYS = bounded(float, 0.0, 36_500.0)
KEEP_DAYS_DEFAULT = 30.0
SECONDS = bounded(float, 0.0, 86_400.0)  # --drain-seconds, --lease-margin
MAX_SLEEP = bounded(float, 0.0, 3600.0)
