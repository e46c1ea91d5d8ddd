"""Scrubbing what a target echoes: every form the engine sends a secret in, and the encodings, escapes and case
an echo may add (issue 49: yarl's query form `rt4AbC/dE%2BfG%3D%3DZz9q` was stored in full)."""

from __future__ import annotations

import base64
import html
import json
from urllib.parse import quote, quote_plus

import aiohttp
import markupsafe
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reconciler.spec.environment import EnvPolicy
from reconciler.spec.target import Target
from reconciler.spec.values import EnvRef
from reconciler.targets.http import Firer
from reconciler.targets.secrets import MIN_SCRUB_LENGTH, REDACTED, RunSecrets

SPECIALS = "/+=&<>'\" %?#;:@\\"
# What an environment variable may hold (anything but NUL), weighted towards what URLs, JSON and HTML escape.
SECRET = st.text(
    st.sampled_from(SPECIALS) | st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
    min_size=MIN_SCRUB_LENGTH,
    max_size=24,
)
# Visible ASCII: what a header may carry.
HEADER_SECRET = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=MIN_SCRUB_LENGTH, max_size=24)
CONTEXT = st.text(st.sampled_from("ab<>&=\"' %\\/"), max_size=6)


def sent_query(secret: str) -> tuple[RunSecrets, str]:
    """A run's secrets after building a request with `secret` as a query value, and that value as the URL the
    engine sends carries it."""
    secrets = RunSecrets({"S": secret}, EnvPolicy())
    target = Target.model_validate({"url": "http://127.0.0.1:9/x?a=1", "query": {"w": {"env": "S"}}})
    url = Firer._url(target, secrets)
    assert url.query["w"] == secret
    return secrets, url.raw_query_string.rpartition("&w=")[2]


def echoes(*values: str) -> list[str]:
    """Every form a target may echo these values in: raw, percent-encoded three ways (or as given), then each of
    those as is, JSON-escaped, HTML-escaped (Python's, Jinja's), upper- and lower-cased."""
    found: list[str] = []
    for value in values:
        for form in (value, quote(value, safe=""), quote(value), quote_plus(value, safe="")):
            escaped = (
                form,
                json.dumps(form)[1:-1],
                json.dumps(form, ensure_ascii=False)[1:-1],
                html.escape(form),
                html.escape(form, quote=False),
                str(markupsafe.escape(form)),
                html.escape(json.dumps(form)[1:-1]),
            )
            found += [variant for text in escaped for variant in (text, text.upper(), text.lower())]
    return found


def leaks(secrets: RunSecrets, echo: str, before: str = "", after: str = "") -> bool:
    """Whether the scrubbed echo still holds the echoed form (a marker's own letters do not count)."""
    scrubbed = secrets.scrub(before + echo + after) or ""
    return echo in scrubbed.replace(REDACTED, "\x00")


@settings(max_examples=300, deadline=None)
@given(secret=SECRET, before=CONTEXT, after=CONTEXT)
@example(secret="rt4AbC/dE+fG==Zz9q", before="k=", after="&")
@example(secret="a/b+c=d&e<f>g'h\"iüß😀", before="", after="")
@example(secret="ﬁx/ǅ+ŉ=İ", before="", after="")
def test_no_echo_of_a_query_secret_survives_scrubbing(secret: str, before: str, after: str) -> None:
    secrets, sent = sent_query(secret)
    for echo in echoes(secret, sent):
        assert not leaks(secrets, echo, before, after), (secret, echo)
        assert len(echo.encode()) <= secrets.longest  # what the excerpt reads beyond its end holds any echo whole


def test_the_query_value_is_remembered_as_yarl_sent_it() -> None:
    secrets, sent = sent_query("rt4AbC/dE+fG==Zz9q")
    assert sent == "rt4AbC/dE%2BfG%3D%3DZz9q"
    assert secrets.scrub(f"GET /x?a=1&w={sent} HTTP/1.1") == f"GET /x?a=1&w={REDACTED} HTTP/1.1"
    assert secrets.scrub(f"GET /X?A=1&W={sent.upper()}") == f"GET /X?A=1&W={REDACTED}"
    assert secrets.scrub(f"w={sent.replace('%2B', '%2b')}") == f"w={REDACTED}"


@settings(max_examples=200, deadline=None)
@given(username=HEADER_SECRET.filter(lambda name: ":" not in name), password=HEADER_SECRET)
def test_no_echo_of_basic_credentials_survives_scrubbing(username: str, password: str) -> None:
    secrets = RunSecrets({"PW": password}, EnvPolicy())
    header = aiohttp.encode_basic_auth(username, secrets.resolve(EnvRef(env="PW"), "target.auth.password"))
    secrets.remember_basic(password, header)
    encoded = base64.b64encode(f"{username}:{password}".encode()).decode()
    assert header == f"Basic {encoded}"
    for echo in echoes(password, encoded):
        assert not leaks(secrets, echo, "Authorization: Basic "), echo


@settings(max_examples=200, deadline=None)
@given(first=HEADER_SECRET, second=SECRET)
def test_two_secrets_one_inside_the_other_are_both_scrubbed(first: str, second: str) -> None:
    secrets = RunSecrets({}, EnvPolicy())
    secrets.remember(first, first + second, second)
    for echo in echoes(first + second):
        assert not leaks(secrets, echo), echo


@pytest.mark.parametrize(("secret", "scrubbed"), [("abc", False), ("abcd", True), ("a&<", False), ("a&<>", True)])
def test_values_shorter_than_the_minimum_are_not_scrubbed(secret: str, scrubbed: bool) -> None:
    assert len(secret) in (MIN_SCRUB_LENGTH - 1, MIN_SCRUB_LENGTH)
    secrets = RunSecrets({}, EnvPolicy())
    secrets.remember(secret)
    assert (secrets.scrub(f"x {html.escape(secret)} y") == f"x {REDACTED} y") is scrubbed


def test_no_secret_costs_no_pattern() -> None:
    secrets = RunSecrets({}, EnvPolicy())
    assert secrets.pattern is None and secrets.longest == 0
    assert secrets.scrub("HTTP 500") == "HTTP 500" and secrets.excerpt("é".encode() * 3, 5) == "éé"


SECRET_ECHO = "k9X2mQ7vR4/+=&<>'\"tY8w"


@pytest.mark.parametrize(
    ("repeat", "expected"),
    [(0, "." * 200), (1, REDACTED + "." * 178), (5, REDACTED * 5 + "." * 90), (30, REDACTED * 10)],
)
def test_an_echo_cut_by_the_read_never_shifts_into_the_excerpt(repeat: int, expected: str) -> None:
    """Redacting shortens the text; the excerpt still ends where the limit falls in the body as received, so the
    start of an echo the read cut off (past the limit) never moves into it."""
    secrets = RunSecrets({}, EnvPolicy())
    secrets.remember(SECRET_ECHO)
    limit = 200
    body = (SECRET_ECHO * repeat + "." * (limit + secrets.longest)).encode()[: limit + secrets.longest - 6]
    body += SECRET_ECHO.encode()
    read = body[: limit + secrets.longest]
    excerpt = secrets.excerpt(read, limit)
    assert excerpt == expected and "k9X2" not in excerpt


def test_an_echo_that_begins_within_the_limit_is_redacted_whole() -> None:
    secrets = RunSecrets({}, EnvPolicy())
    secrets.remember(SECRET_ECHO)
    echo = html.escape(SECRET_ECHO).upper()
    body = ("." * 95 + echo + " tail").encode()
    assert secrets.excerpt(body, 100) == "." * 95 + REDACTED[:5]
    assert secrets.excerpt(body, 200) == "." * 95 + REDACTED + " tail"
