"""A target (where a task or a webhook notifier sends its request): URL, method, headers, query, body, auth."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import AfterValidator, ConfigDict, Field, JsonValue, field_validator

from reconciler.spec.hosts import HOST_PORT, host_problem
from reconciler.spec.model import CrossCheck, Model, suggestion
from reconciler.spec.values import CONTROL, MAX_NAME, EnvRef, Line, SecretRef, StrOrEnv, check_text

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
# Input bounds (docs/files.md, "Input bounds"), as spec.values says.
MAX_HEADERS = MAX_QUERY = 100
MAX_URL = 8000  # RFC 9110 §4.1: senders and recipients should support at least 8000 octets
# Header and query-parameter names that carry credentials (case-insensitive substrings; "sig" whole).
CREDENTIAL_WORDS = ("auth", "cookie", "credential", "key", "passwd", "password", "secret", "signature", "token")
CREDENTIAL_NAMES = ("sig",)
# Every header the engine sets (docs/requests.md's table): a task's own headers may not name one.
ENGINE_HEADERS = (
    "idempotency-key",
    "user-agent",
    "x-reconciler-attempt",
    "x-reconciler-callback",
    "x-reconciler-kind",
    "x-reconciler-run-id",
    "x-reconciler-scheduled-for",
    "x-reconciler-task",
    "traceparent",
)
SIGNING_HEADERS = ("webhook-id", "webhook-signature", "webhook-timestamp")  # [target.signing]'s
FRAMING_HEADERS = ("content-length", "transfer-encoding")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token
HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")  # visible ASCII, space, tab


class BearerAuth(Model):
    kind: Literal["bearer"]
    token: SecretRef


class BasicAuth(Model):
    kind: Literal["basic"]
    username: StrOrEnv
    password: SecretRef


class OAuth2ClientCredentials(Model):
    kind: Literal["oauth2_client_credentials"]
    token_url: str
    client_id: StrOrEnv
    client_secret: SecretRef
    scope: Line | None = None
    audience: Line | None = None

    @field_validator("token_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)


Auth = Annotated[BearerAuth | BasicAuth | OAuth2ClientCredentials, Field(discriminator="kind")]


def check_url(value: str) -> str:
    """Accept an http(s) URL an HTTP client can send: a valid host, a port 1-65535, no credentials."""
    if len(value) > MAX_URL:
        raise ValueError(f"a URL may have at most {MAX_URL} characters")
    if CONTROL.search(value) or any(ch.isspace() for ch in value):
        raise ValueError("a URL may not contain whitespace or control characters; percent-encode them")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:  # never echo the URL: it may hold credentials
        raise ValueError(f"not a valid URL ({exc})") from None
    if "@" in parts.netloc:
        raise ValueError(
            'credentials in the URL are not allowed; use target.auth.kind = "basic" '
            'or target.query = { token = { env = "X" } }'
        )
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("not an http:// or https:// URL")
    secret = next((k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if is_credential_name(k)), None)
    if secret is not None:
        name = secret if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", secret) else "NAME"
        raise ValueError(
            f"a credential in the URL's query string ({name}) is not allowed; "
            f'write target.query = {{ {name} = {{ env = "VARIABLE" }} }} instead'
        )
    match = HOST_PORT.fullmatch(parts.netloc)
    if not match:
        raise ValueError(f"{parts.netloc!r} is not HOST or HOST:PORT")
    problem = host_problem(match.group(1)) if match.group(1) else "the URL has no host"
    if problem:
        raise ValueError(problem)
    if port == 0:
        raise ValueError("port 0 cannot be connected to; use a port from 1 to 65535")
    return value


def _header_name(name: str) -> str:
    if len(name) > MAX_NAME or not HEADER_NAME.fullmatch(name):
        raise ValueError(f"header name {name[:MAX_NAME]!r} is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~)")
    return name


def _header_value(value: str | EnvRef) -> str | EnvRef:
    if isinstance(value, str) and not HEADER_VALUE.fullmatch(value):
        bad = next(ch for ch in value if not HEADER_VALUE.fullmatch(ch))
        raise ValueError(f"a header value may hold visible ASCII, space and tab only, not {bad!r}")
    return value


def _query_name(name: str) -> str:
    if not name:
        raise ValueError("a query parameter needs a name")
    return check_text(name, MAX_NAME)


def is_credential_name(name: str) -> bool:
    """Whether a header or query-parameter name carries a credential (docs/files.md, "Input bounds")."""
    lowered = name.lower()
    return lowered in CREDENTIAL_NAMES or any(word in lowered for word in CREDENTIAL_WORDS)


def _literal_secrets(value: dict[str, str | EnvRef], what: str) -> None:
    for name, item in value.items():
        if isinstance(item, str) and is_credential_name(name):
            raise ValueError(f'a literal {name} {what} is a secret; write {name} = {{ env = "NAME" }}')


HeaderName = Annotated[str, AfterValidator(_header_name)]
HeaderValue = Annotated[StrOrEnv, AfterValidator(_header_value)]
QueryName = Annotated[str, AfterValidator(_query_name)]


class Target(Model):
    url: str
    method: str = "POST"
    headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict, max_length=MAX_HEADERS)
    # Added to the URL's query string at fire time; absent from the stored spec when empty,
    # so specs stored before the key existed keep their hash.
    query: dict[QueryName, StrOrEnv] = Field(default_factory=dict, max_length=MAX_QUERY, exclude_if=lambda q: not q)
    json_body: JsonValue = Field(default=None, alias="json")
    body: str | None = None
    timeout_seconds: float = Field(default=30, gt=0, le=3600)
    auth: Auth | None = None

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, serialize_by_alias=True)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        if value.upper() not in HTTP_METHODS:
            hint = suggestion(value.upper(), HTTP_METHODS)
            raise ValueError(f"{value!r} is not an HTTP method{hint} (methods: {', '.join(HTTP_METHODS)})")
        return value.upper()

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str | EnvRef]) -> dict[str, str | EnvRef]:
        seen: dict[str, str] = {}
        for name in value:
            lowered = name.lower()
            if lowered in ENGINE_HEADERS:
                raise ValueError(f"the engine sets {name} on every request; remove it")
            if lowered in SIGNING_HEADERS:
                raise ValueError(
                    f"the engine sets {name} when the request is signed; remove it and use [target.signing] "
                    'kind = "standard-webhooks"'
                )
            if lowered in FRAMING_HEADERS:
                raise ValueError(f"the HTTP client sets {name} from the body; remove it")
            if lowered in seen:
                raise ValueError(f"headers {seen[lowered]} and {name} are the same header (names ignore case)")
            seen[lowered] = name
        _literal_secrets(value, "header")
        return value

    @field_validator("query")
    @classmethod
    def _query(cls, value: dict[str, str | EnvRef]) -> dict[str, str | EnvRef]:
        _literal_secrets(value, "query parameter")
        return value

    cross_checks: ClassVar[tuple[CrossCheck, ...]] = ((("json_body", "body"), lambda v: _one_body(**v)),)


def _one_body(json_body: JsonValue, body: str | None) -> str | None:
    if json_body is not None and body is not None:
        return 'give either json = {...} or body = "...", not both'
    return None


def target_line(target: Mapping[str, Any]) -> str:
    """A stored target in one line: `POST https://host/path (auth bearer; headers A, B; body json 120 B; timeout
    10 s)`. The URL as stored: whoever shows the line masks it (output/masking.py)."""
    parts: list[str] = []
    auth = target.get("auth")
    if isinstance(auth, dict):
        parts.append(f"auth {auth.get('kind', '?')}")
    headers = target.get("headers")
    if isinstance(headers, dict) and headers:
        parts.append("headers " + ", ".join(sorted(map(str, headers))))
    query = target.get("query")
    if isinstance(query, dict) and query:
        parts.append("query " + ", ".join(sorted(map(str, query))))
    if target.get("json") is not None:
        parts.append(f"body json {len(json.dumps(target['json'], separators=(',', ':')).encode())} B")
    elif isinstance(target.get("body"), str):
        parts.append(f"body text {len(target['body'].encode())} B")
    timeout = target.get("timeout_seconds")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool):
        parts.append(f"timeout {timeout:g} s")
    elif timeout is not None:
        parts.append(f"timeout {json.dumps(timeout)}")
    return f"{target.get('method', 'POST')} {target.get('url', '?')}" + (f" ({'; '.join(parts)})" if parts else "")
