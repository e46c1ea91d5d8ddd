"""Pydantic models of one task file (frozen, unknown keys forbidden)."""

from __future__ import annotations

import ipaddress
import re
from datetime import date, datetime, time
from functools import lru_cache
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    PlainValidator,
    field_validator,
    model_validator,
)

ID_SEGMENT = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CRON_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
INTERVAL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DAY = 86_400

# Input bounds (README, "Input bounds"): each keeps every later step (PostgreSQL int4 and
# jsonb, datetime arithmetic, the HTTP client, the engine's leases) inside what it can do.
MIN_YEAR, MAX_YEAR = 1970, 9000  # instants stay far from datetime's year 1 and 9999 in any zone
MAX_INTERVAL_SECONDS = 36_500 * DAY  # 100 years
MAX_CALENDAR_EVERY = 1000
MAX_CLOCK_TIMES = 1440  # one per minute of the day
MAX_MISFIRE_GRACE_SECONDS = 366 * DAY
MAX_RETRY_WAIT_SECONDS = DAY  # all backoffs of one run together: a killed engine's lease must expire
MAX_KEEP_RUNS = 1_000_000  # the retention query casts it to int4
MAX_DESCRIPTION = 4096
MAX_LABELS, MAX_LABEL_KEY, MAX_LABEL_VALUE = 64, 63, 256
MAX_HEADERS = MAX_QUERY = 100
MAX_NAME = 256  # a header, query parameter or environment variable name
MAX_TEXT = 8192  # any other one-line string: header and query values, client ids, scopes
MAX_URL = 8000  # RFC 9110 §4.1: senders and recipients should support at least 8000 octets
MAX_CRON = 1024
# Header and query-parameter names that carry credentials (case-insensitive substrings; "sig" whole).
CREDENTIAL_WORDS = ("auth", "cookie", "credential", "key", "passwd", "password", "secret", "signature", "token")
CREDENTIAL_NAMES = ("sig",)
ENGINE_HEADERS = ("idempotency-key", "x-reconciler-attempt", "x-reconciler-scheduled-for", "x-reconciler-task")
FRAMING_HEADERS = ("content-length", "transfer-encoding")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token
HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")  # visible ASCII, space, tab
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc
HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]*)(?::([0-9]*))?")  # an IPv6 host in brackets
HOST_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


class Model(BaseModel):
    """Base of every file model: immutable, no unknown keys."""

    # strict: TOML has real types, so "yes" is not a boolean and "30" is not a number.
    # No NaN or infinity: no deadline, backoff or JSON body can act on one.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


def check_text(value: str, limit: int, allowed: str = "") -> str:
    """`value`, if it has at most `limit` characters and no control character but those `allowed`."""
    if len(value) > limit:
        raise ValueError(f"longer than {limit} characters")
    for match in CONTROL.finditer(value):
        if match.group() not in allowed:
            raise ValueError(f"control character {match.group()!r} is not allowed here")
    return value


def _text(limit: int, allowed: str = "") -> AfterValidator:
    return AfterValidator(lambda value: check_text(value, limit, allowed))


Line = Annotated[str, _text(MAX_TEXT)]


class EnvRef(Model):
    """A value read from an environment variable by the engine at fire time."""

    env: str

    @field_validator("env")
    @classmethod
    def _name(cls, value: str) -> str:
        if len(value) > MAX_NAME or not ENV_NAME.fullmatch(value):
            raise ValueError(f"{value[:MAX_NAME]!r} is not an environment variable name (letters, digits, _)")
        return value


def _plain_or_env(value: Any) -> str | EnvRef:
    if isinstance(value, str):
        return check_text(value, MAX_TEXT)
    if isinstance(value, EnvRef):
        return value
    if isinstance(value, dict):
        return EnvRef.model_validate(value)
    raise ValueError('expected a string or { env = "NAME" }')


def _env_only(value: Any) -> EnvRef:
    if isinstance(value, str):
        raise ValueError(
            'a literal secret is not allowed; write { env = "NAME" } and set NAME in the engine\'s environment'
        )
    if isinstance(value, EnvRef):
        return value
    if isinstance(value, dict):
        return EnvRef.model_validate(value)
    raise ValueError('expected { env = "NAME" }')


def _dump_plain_or_env(value: str | EnvRef) -> Any:
    return value if isinstance(value, str) else {"env": value.env}


StrOrEnv = Annotated[str | EnvRef, PlainValidator(_plain_or_env), PlainSerializer(_dump_plain_or_env)]
SecretRef = Annotated[EnvRef, PlainValidator(_env_only), PlainSerializer(_dump_plain_or_env)]
WhenValue = datetime | date


def year_problem(value: date) -> str | None:
    """Why a date or date-time is outside the years every schedule computation can handle, or None."""
    if MIN_YEAR <= value.year <= MAX_YEAR:
        return None
    return f"{value.isoformat()} is outside the supported years {MIN_YEAR} to {MAX_YEAR}"


def _when(value: Any) -> WhenValue:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value) if "T" in value or " " in value else date.fromisoformat(value)
        except ValueError:
            value = None
    if isinstance(value, datetime | date):
        problem = year_problem(value)
        if problem:
            raise ValueError(problem)
        return value
    raise ValueError("expected a TOML date or date-time, e.g. 2026-01-01T00:00:00")


def _dump_when(value: WhenValue) -> str:
    return value.isoformat()


When = Annotated[WhenValue, PlainValidator(_when), PlainSerializer(_dump_when)]


class Window(Model):
    """The optional start/end window every trigger kind shares."""

    start_at: When | None = None
    end_at: When | None = None


class CronTrigger(Window):
    kind: Literal["cron"]
    expr: str = Field(max_length=MAX_CRON)

    @field_validator("expr")
    @classmethod
    def _expr(cls, value: str) -> str:
        text = " ".join(value.split())
        expanded = CRON_MACROS.get(text.lower(), text)
        if text.startswith("@") and text.lower() not in CRON_MACROS:
            raise ValueError(f"unknown macro {text!r}; use one of {', '.join(sorted(CRON_MACROS))}")
        if len(expanded.split()) != 5:
            raise ValueError(f"{value!r} must have 5 fields (minute hour day-of-month month day-of-week)")
        if not _cron_valid(expanded):
            raise ValueError(f"{value!r} is not a valid cron expression")
        return text

    @property
    def fields(self) -> list[str]:
        """The five cron fields, macros expanded, single-value ranges collapsed.

        croniter 7 reads a range whose ends are equal (`5-5`, `1-1/2`) as `*`; Vixie
        cron reads it as the single value, and so do we.
        """
        raw = CRON_MACROS.get(self.expr.lower(), self.expr).split()
        return [",".join(_collapse_range(part) for part in item.split(",")) for item in raw]


@lru_cache(maxsize=4096)
def _cron_valid(expr: str) -> bool:
    from croniter import croniter

    return bool(croniter.is_valid(expr))


def _collapse_range(part: str) -> str:
    match = re.fullmatch(r"(\w+)-(\w+)(?:/\d+)?", part)
    return match.group(1) if match and match.group(1).lower() == match.group(2).lower() else part


class IntervalTrigger(Window):
    kind: Literal["interval"]
    every: str | None = Field(default=None, max_length=64)
    seconds: int | None = Field(default=None, gt=0, le=MAX_INTERVAL_SECONDS)

    @field_validator("every")
    @classmethod
    def _every(cls, value: str | None) -> str | None:
        if value is None:
            return value
        period = parse_every(value)
        if period is None:
            raise ValueError(f'{value!r} is not a duration; write e.g. "90s", "15m", "6h" or "2d"')
        if period > MAX_INTERVAL_SECONDS:
            raise ValueError(f"{value!r} is longer than {MAX_INTERVAL_SECONDS // DAY}d (100 years)")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> IntervalTrigger:
        if (self.every is None) == (self.seconds is None):
            raise ValueError('give exactly one of every = "15m" or seconds = N')
        return self

    @property
    def period_seconds(self) -> int:
        """The interval length in seconds."""
        if self.seconds is not None:
            return self.seconds
        parsed = parse_every(self.every or "")
        assert parsed is not None
        return parsed


def parse_every(text: str) -> int | None:
    """`"90s"` → 90; None if the text is not a positive duration."""
    # At most 15 digits: int() of a very long digit string is slow, then refused (4300 digits).
    match = re.fullmatch(r"\s*([0-9]{1,15})\s*([smhd])\s*", text)
    if not match or int(match.group(1)) == 0:
        return None
    return int(match.group(1)) * INTERVAL_UNITS[match.group(2)]


def _clock_time(value: Any) -> time:
    if isinstance(value, time):
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?", value.strip())
        if match:
            return time(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
    raise ValueError(f'{value!r} is not a time of day; write "09:30"')


def _dump_clock_time(value: time) -> str:
    return value.strftime("%H:%M:%S") if value.second else value.strftime("%H:%M")


def _clock_times(value: Any) -> tuple[time, ...]:
    items = value if isinstance(value, list | tuple) else [value]
    if not items:
        raise ValueError('give at least one time of day, e.g. at = "09:30" or at = ["09:30", "17:00"]')
    if len(items) > MAX_CLOCK_TIMES:
        raise ValueError(f"at most {MAX_CLOCK_TIMES} times of day (one a minute); use a cron or interval trigger")
    return tuple(sorted({_clock_time(item) for item in items}))


def _dump_clock_times(value: tuple[time, ...]) -> Any:
    texts = [_dump_clock_time(item) for item in value]
    return texts[0] if len(texts) == 1 else texts


ClockTimes = Annotated[tuple[time, ...], PlainValidator(_clock_times), PlainSerializer(_dump_clock_times)]


class CalendarTrigger(Window):
    kind: Literal["calendar"]
    every: int = Field(default=1, gt=0, le=MAX_CALENDAR_EVERY)
    unit: Literal["days", "weeks", "months", "years"]
    at: ClockTimes
    start_at: When | None = None

    @field_validator("start_at")
    @classmethod
    def _anchor(cls, value: WhenValue | None) -> WhenValue | None:
        if value is None:
            raise ValueError("a calendar trigger needs start_at = YYYY-MM-DD (the anchor date)")
        if isinstance(value, datetime):
            raise ValueError("the calendar anchor is a date: write start_at = YYYY-MM-DD, times go in `at`")
        return value

    @model_validator(mode="after")
    def _needs_anchor(self) -> CalendarTrigger:
        if self.start_at is None:
            raise ValueError("a calendar trigger needs start_at = YYYY-MM-DD (the anchor date)")
        return self

    @property
    def times(self) -> list[time]:
        """The wall-clock times of day, sorted, without duplicates."""
        return list(self.at)


class OnceTrigger(Model):
    kind: Literal["once"]
    at: When


Trigger = Annotated[CronTrigger | IntervalTrigger | CalendarTrigger | OnceTrigger, Field(discriminator="kind")]


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


def host_problem(host: str) -> str | None:
    """Why `host` (as written in a URL or HOST:PORT, IPv6 in brackets) is not a host a client can reach, or None."""
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"{host} is not a valid IPv6 address"
        return None
    if not host.isascii():
        # Decision: no IDNA here; clients disagree (IDNA 2003 vs 2008), the punycode form is unambiguous.
        try:
            hint = f" ({host.encode('idna').decode('ascii')})"
        except UnicodeError:
            hint = ""
        return f"host {host!r} is not ASCII; write its punycode form{hint}"
    labels = host.lower().removesuffix(".").split(".")
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host.removesuffix("."))
        except ValueError:
            return f"{host!r} is not a valid IPv4 address"
        return None
    if len(host) > 253 or not all(HOST_LABEL.fullmatch(label) for label in labels):
        return f"{host!r} is not a valid host name"
    return None


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
    """Whether a header or query-parameter name carries a credential (README, "Input bounds")."""
    lowered = name.lower()
    return lowered in CREDENTIAL_NAMES or any(word in lowered for word in CREDENTIAL_WORDS)


def _literal_secrets(value: dict[str, str | EnvRef], what: str) -> None:
    for name, item in value.items():
        if isinstance(item, str) and is_credential_name(name):
            raise ValueError(f'a literal {name} {what} is a secret; write {name} = {{ env = "NAME" }}')


HeaderName = Annotated[str, AfterValidator(_header_name)]
HeaderValue = Annotated[StrOrEnv, AfterValidator(_header_value)]
QueryName = Annotated[str, AfterValidator(_query_name)]
LabelKey = Annotated[str, Field(min_length=1), _text(MAX_LABEL_KEY)]
LabelValue = Annotated[str, _text(MAX_LABEL_VALUE)]


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
            raise ValueError(f"{value!r} is not an HTTP method; use one of {', '.join(HTTP_METHODS)}")
        return value.upper()

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str | EnvRef]) -> dict[str, str | EnvRef]:
        seen: dict[str, str] = {}
        for name in value:
            lowered = name.lower()
            if lowered in ENGINE_HEADERS:
                raise ValueError(f"the engine sets {name} on every request; remove it")
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

    @model_validator(mode="after")
    def _one_body(self) -> Target:
        if self.body is not None and self.json_body is not None:
            raise ValueError('give either json = {...} or body = "...", not both')
        return self


class Policy(Model):
    misfire_grace_seconds: int = Field(default=60, ge=0, le=MAX_MISFIRE_GRACE_SECONDS)
    coalesce: bool = True
    max_running_instances: int = Field(default=1, ge=1, le=1000)
    retries: int = Field(default=0, ge=0, le=20)
    retry_backoff_seconds: float = Field(default=5, ge=0, le=3600)
    jitter_seconds: int = Field(default=0, ge=0, le=3600)
    dst_gap: Literal["shift", "skip"] = "shift"
    dst_overlap: Literal["first", "last", "both"] | None = None
    keep_runs: int | None = Field(default=None, ge=1, le=MAX_KEEP_RUNS)

    @property
    def backoff_total(self) -> float:
        """Every backoff wait of one run together: `retry_backoff_seconds × (2^retries − 1)`."""
        return float(self.retry_backoff_seconds) * float(2**self.retries - 1)

    @model_validator(mode="after")
    def _retry_wait(self) -> Policy:
        wait = self.backoff_total
        if wait > MAX_RETRY_WAIT_SECONDS:
            raise ValueError(
                f"retries = {self.retries} with retry_backoff_seconds = {self.retry_backoff_seconds:g} wait "
                f"{wait:,.0f} s in all (backoff doubles per attempt), more than one day; lower either"
            )
        return self


class TaskSpec(Model):
    """The content of one task file."""

    description: Annotated[str, _text(MAX_DESCRIPTION, allowed="\t\n")] | None = None
    timezone: str = Field(default="UTC", max_length=MAX_NAME)
    enabled: bool = True
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=MAX_LABELS)
    moved_from: str | None = Field(default=None, max_length=MAX_TEXT)
    trigger: Trigger
    target: Target
    policy: Policy = Field(default_factory=Policy)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f'unknown time zone {value!r}; use an IANA name such as "Europe/Berlin"') from None
        return value

    @field_validator("moved_from")
    @classmethod
    def _moved(cls, value: str | None) -> str | None:
        if value is not None:
            problem = id_problem(value)
            if problem:
                raise ValueError(problem)
        return value

    def normalized(self) -> dict[str, Any]:
        """The canonical JSON form stored in `scheduler.tasks.spec` (defaults filled in)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def id_problem(task_id: str) -> str | None:
    """Why `task_id` is not a valid task id, or None."""
    for segment in task_id.split("/"):
        if not ID_SEGMENT.fullmatch(segment):
            return f"id segment {segment!r} must match [a-z0-9][a-z0-9_.-]{{0,62}} (lower-case letters, digits, _ . -)"
    return None
