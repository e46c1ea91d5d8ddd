"""The web application's pure rules: the bearer token's header, and what the dashboard's documentation lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reconciler.runs import KINDS
from reconciler.web.app import bearer_token

DOCS = Path(__file__).parents[3] / "docs" / "dashboard.md"


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer t0k3n", "t0k3n"),
        ("bearer t0k3n", "t0k3n"),  # RFC 9110 §11.1: the scheme is case-insensitive
        ("BEARER t0k3n", "t0k3n"),
        ("bEaReR   t0k3n", "t0k3n"),  # one or more spaces
        ("Basic t0k3n", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Bearert0k3n", None),
        ("t0k3n", None),
        ("", None),
    ],
)
def test_the_bearer_scheme_is_read_in_any_case(header: str, token: str | None) -> None:
    assert bearer_token(header) == token


def test_the_runs_page_lists_every_run_kind_in_the_docs() -> None:
    [row] = [line for line in DOCS.read_text().splitlines() if line.startswith("| `/runs` |")]
    listed = re.search(r"`kind` \(([^)]*)\)", row)
    assert listed is not None, row
    assert re.findall(r"`(\w+)`", listed[1]) == list(KINDS)
