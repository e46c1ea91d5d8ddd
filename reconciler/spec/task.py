"""Pydantic models of one task file (frozen, unknown keys forbidden)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from functools import lru_cache
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ModelWrapValidatorHandler,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from reconciler.spec.hosts import HOST_PORT, host_problem

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
# `late` sooner than this after an occurrence was due would be a claim's ordinary lag, not a dead engine:
# an explicit late_after_seconds is at least MIN_LATE_AFTER_SECONDS, the default (the misfire grace,
# 0 for some tasks) at least LATE_FLOOR_SECONDS.
MIN_LATE_AFTER_SECONDS = 10
LATE_FLOOR_SECONDS = 60
MAX_RETRY_WAIT_SECONDS = DAY  # all backoffs of one run together: a killed engine's lease must expire
MAX_KEEP_RUNS = 1_000_000  # the retention query casts it to int4
MAX_DESCRIPTION = 4096
MAX_LABELS, MAX_LABEL_KEY, MAX_LABEL_VALUE = 64, 63, 256
MAX_HEADERS = MAX_QUERY = 100
MAX_NAME = 256  # a header, query parameter or environment variable name
MAX_TEXT = 8192  # any other one-line string: header and query values, client ids, scopes
MAX_URL = 8000  # RFC 9110 §4.1: senders and recipients should support at least 8000 octets
MAX_CRON = 1024
NEEDS_ANCHOR = "a calendar trigger needs start_at = YYYY-MM-DD (the anchor date)"
# Header and query-parameter names that carry credentials (case-insensitive substrings; "sig" whole).
CREDENTIAL_WORDS = ("auth", "cookie", "credential", "key", "passwd", "password", "secret", "signature", "token")
CREDENTIAL_NAMES = ("sig",)
ENGINE_HEADERS = ("idempotency-key", "x-reconciler-attempt", "x-reconciler-scheduled-for", "x-reconciler-task")
FRAMING_HEADERS = ("content-length", "transfer-encoding")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token
HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")  # visible ASCII, space, tab
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc


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
        problem = cron_problem(text)
        if problem:
            raise ValueError(problem)
        return text

    @property
    def fields(self) -> list[str]:
        """The five cron fields, macros expanded, single-value ranges collapsed.

        croniter 7 reads a range whose ends are equal (`5-5`, `1-1/2`) as `*`; Vixie
        cron reads it as the single value, and so do we.
        """
        raw = CRON_MACROS.get(self.expr.lower(), self.expr).split()
        return [",".join(_collapse_range(part) for part in item.split(",")) for item in raw]


@dataclass(frozen=True, slots=True)
class CronField:
    """One of the five fields: its name, its numeric range and the names it also accepts."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()

    @property
    def allowed(self) -> str:
        spelled = f" or {self.names[0].upper()}-{self.names[-1].upper()}" if self.names else ""
        return f"{self.low}-{self.high}{spelled}"


CRON_FIELDS = (
    CronField("minute", 0, 59),
    CronField("hour", 0, 23),
    CronField("day of month", 1, 31),
    CronField("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    CronField("day of week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
CRON_FORMAT = ", ".join(f"{field.name} {field.allowed}" for field in CRON_FIELDS)
# croniter's "R" is a random value drawn anew by every process that parses the expression.
_RANDOM = re.compile(r"[Rr](?:\(.*\))?(?:/.*)?")


def cron_problem(text: str) -> str | None:
    """Why a cron expression (or @macro) is not valid, naming the field and its allowed range; None if valid."""
    expanded = CRON_MACROS.get(text.lower(), text)
    if text.startswith("@") and text.lower() not in CRON_MACROS:
        hint = suggestion(text, CRON_MACROS)
        return f"unknown macro {text!r}{hint} (macros: {', '.join(sorted(CRON_MACROS))})"
    fields = expanded.split()
    if len(fields) != 5:
        return (
            f"{text!r} has {len(fields)} field{'s' * (len(fields) != 1)}; cron needs 5 fields: "
            "minute hour day-of-month month day-of-week"
        )
    for field, part in zip(CRON_FIELDS, fields, strict=True):
        if "r" in part.lower() and any(_RANDOM.fullmatch(item) for item in part.split(",")):
            return (
                f"cron field {field.name}: R (a random value) is not supported, every engine would pick "
                f"another one; write a value in {field.allowed}"
            )
    if _cron_valid(expanded):
        return None
    for field, part in zip(CRON_FIELDS, fields, strict=True):
        problem = _cron_field_problem(field, part)
        if problem:
            return f"cron field {field.name}: {problem}"
    return f"{text!r} is not a valid cron expression ({CRON_FORMAT})"


@lru_cache(maxsize=4096)
def _cron_valid(expr: str) -> bool:
    from croniter import croniter

    return bool(croniter.is_valid(expr))


def _cron_field_problem(field: CronField, text: str) -> str | None:
    """The first problem found in one field that croniter refused; None when not understood here.

    Only explains a refusal: what croniter accepts is accepted (its extensions such as
    `L`, `5#3` and `15W` too), and reversed ranges wrap (`22-2` hours is 22, 23, 0, 1, 2).
    """
    for item in text.split(","):
        if not item:
            return f"{text!r} has an empty list item; separate values with single commas"
        base, slash, step = item.partition("/")
        if slash:
            if not (step.isascii() and step.isdigit()):
                return f"step {step!r} in {item!r} is not a whole number; write e.g. */5"
            if int(step) == 0:
                return f"step 0 in {item!r} never advances; a step is at least 1"
        if base == "*":
            continue
        if not base:
            return f"{item!r} has no value before /; write e.g. */5 or 0-30/5"
        ends = base.split("-")
        if len(ends) > 2 or not all(ends):
            return f"{base!r} is not a value or a range A-B (allowed: {field.allowed})"
        for end in ends:
            problem = _cron_value_problem(field, end)
            if problem:
                return problem
    return None


def _cron_value_problem(field: CronField, text: str) -> str | None:
    if text.isascii() and text.isdigit():
        if not field.low <= int(text) <= field.high:
            return f"{int(text)} is out of range {field.low}-{field.high}"
        return None
    if text.lower() in field.names:
        return None
    if field.names and text.isascii() and text.isalpha():
        found = did_you_mean(text, field.names)
        hint = f"; did you mean {found.upper()}?" if found else ""
        return f"{text!r} is not a {field.name} name{hint} (allowed: {field.allowed})"
    if field.name == "day of week" and "#" in text:
        day, _, nth = text.partition("#")
        if not (nth.isascii() and nth.isdigit() and 1 <= int(nth) <= 5):
            return f"{text!r}: the week of the month after # is 1-5 (5#3 is the third Friday)"
        return _cron_value_problem(field, day) if day else f"{text!r} needs a weekday before #"
    if field.name in ("day of month", "day of week") and any(mark in text.upper() for mark in "LW"):
        return None  # croniter's extensions: its own refusal is reported generically
    return f"{text!r} is not a number (allowed: {field.allowed})"


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
        period = every_seconds(value)
        if isinstance(period, str):
            raise ValueError(f"{value!r} is not a duration ({period}); {EVERY_FORMAT}")
        if period > MAX_INTERVAL_SECONDS:
            raise ValueError(f"{value!r} is longer than {MAX_INTERVAL_SECONDS // DAY}d (100 years)")
        return value

    cross_checks = ((("every", "seconds"), lambda v: _one_period(**v)),)

    @property
    def period_seconds(self) -> int:
        """The interval length in seconds."""
        if self.seconds is not None:
            return self.seconds
        parsed = parse_every(self.every or "")
        assert parsed is not None
        return parsed


EVERY_FORMAT = 'write whole numbers with units d, h, m, s, largest first, e.g. "90s", "15m", "1h30m" or "2d12h"'
_EVERY = re.compile(r"(?:\s*[0-9]+\s*[^\s0-9]+)+\s*")
_EVERY_PART = re.compile(r"([0-9]+)\s*([^\s0-9]+)")


def every_seconds(text: str) -> int | str:
    """`"90s"` → 90, `"1h30m"` → 5400; or, when the text is not a positive duration, why not."""
    if any(mark in text for mark in ".,"):
        return "whole numbers only: 1h30m, not 1.5h"
    if not _EVERY.fullmatch(text):
        return "no number with a unit" if not text.strip() else "a number and a unit are expected"
    total, previous = 0, None
    for number, unit in _EVERY_PART.findall(text):
        if unit not in INTERVAL_UNITS:
            lower = f"; units are lower-case ({unit.lower()})" if unit.lower() in INTERVAL_UNITS else ""
            return f"unknown unit {unit!r}{lower}"
        if previous is not None and INTERVAL_UNITS[unit] >= INTERVAL_UNITS[previous]:
            return f"{unit} after {previous}: units go largest first, each once"
        # At most 15 digits: int() of a very long digit string is slow, then refused (4300 digits).
        if len(number) > 15:
            return f"{number[:20]}{'…' * (len(number) > 20)} has more than 15 digits"
        total += int(number) * INTERVAL_UNITS[unit]
        previous = unit
    return total if total > 0 else "it is zero"


def _one_period(every: str | None, seconds: int | None) -> str | None:
    if (every is None) == (seconds is None):
        return 'give exactly one of every = "15m" or seconds = N'
    return None


def parse_every(text: str) -> int | None:
    """`"90s"` → 90, `"1h30m"` → 5400; None if the text is not a positive duration."""
    seconds = every_seconds(text)
    return seconds if isinstance(seconds, int) else None


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
            raise ValueError(NEEDS_ANCHOR)
        if isinstance(value, datetime):
            raise ValueError("the calendar anchor is a date: write start_at = YYYY-MM-DD, times go in `at`")
        return value

    cross_checks = ((("start_at",), lambda v: NEEDS_ANCHOR if v["start_at"] is None else None),)

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
        return backoff_total(self.retries, self.retry_backoff_seconds)

    cross_checks = ((("retries", "retry_backoff_seconds"), lambda v: _retry_wait_problem(**v)),)


def backoff_total(retries: int, backoff: float) -> float:
    """Every backoff wait of one run together: `backoff × (2^retries − 1)`."""
    return float(backoff) * float(2**retries - 1)


def _retry_wait_problem(retries: int, retry_backoff_seconds: float) -> str | None:
    wait = backoff_total(retries, retry_backoff_seconds)
    if wait <= MAX_RETRY_WAIT_SECONDS:
        return None
    return (
        f"retries = {retries} with retry_backoff_seconds = {retry_backoff_seconds:g} wait "
        f"{wait:,.0f} s in all (backoff doubles per attempt), more than one day; lower either"
    )


NOTIFY_EVENTS = ("failure", "recovery", "missed", "lost", "late")
MAX_SUBSCRIPTIONS = 20  # notifiers per event


def _notifier_name(value: str) -> str:
    if not ID_SEGMENT.fullmatch(value):
        raise ValueError(
            f"{value[:MAX_NAME]!r} is not a notifier name: the file name of notifiers.d/NAME.toml, "
            "matching [a-z0-9][a-z0-9_.-]{0,62}"
        )
    return value


NotifierName = Annotated[str, AfterValidator(_notifier_name)]
Subscribers = Annotated[list[NotifierName], Field(max_length=MAX_SUBSCRIPTIONS)]


class Notify(Model):
    """`[notify]`: which notifiers (files of notifiers.d/, of the task's own source) hear of which events."""

    failure: Subscribers = Field(default_factory=list)  # a run failed after its retries, the task not failing before
    recovery: Subscribers = Field(default_factory=list)  # the first success after a failure or a lost run
    missed: Subscribers = Field(default_factory=list)  # a claim recorded missed occurrences
    lost: Subscribers = Field(default_factory=list)  # a run's engine died holding it (as failure: on a change of state)
    late: Subscribers = Field(default_factory=list)  # an occurrence still unclaimed late_after_seconds after it was due
    late_after_seconds: int | None = Field(default=None, ge=MIN_LATE_AFTER_SECONDS, le=MAX_MISFIRE_GRACE_SECONDS)
    repeat_every_seconds: int | None = Field(default=None, ge=60, le=MAX_MISFIRE_GRACE_SECONDS)

    def names(self) -> set[str]:
        return {name for event in NOTIFY_EVENTS for name in getattr(self, event)}


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
    notify: Notify | None = None  # absent from the stored spec when not given (older specs keep their hash)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        problem = zone_problem(value)
        if problem:
            raise ValueError(problem)
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


@lru_cache(maxsize=1024)
def zone_problem(name: str) -> str | None:
    """Why `name` is not a time zone, with the closest IANA name when one is near; None if it is one."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder such as "Europe", a long name
        found = closest_zone(name)
        hint = f"did you mean {found!r}?" if found else 'use an IANA name such as "Europe/Berlin"'
        return f"unknown time zone {name[:MAX_NAME]!r}; {hint}"
    return None


@lru_cache(maxsize=1)
def _zone_names() -> tuple[frozenset[str], dict[str, str]]:
    from zoneinfo import available_timezones

    names = frozenset(available_timezones())
    cities: dict[str, str] = {}
    for name in sorted(names, key=lambda n: (n.count("/"), n)):  # "Europe/Berlin" over "posix/Europe/Berlin"
        cities.setdefault(name.rsplit("/", 1)[-1].lower(), name)
    return names, cities


def closest_zone(name: str) -> str | None:
    """The IANA zone nearest to a misspelt `name` (case first, then spelling, then the city alone), or None."""
    if len(name) > MAX_NAME:
        return None
    names, cities = _zone_names()
    found = did_you_mean(name, names)
    if found is None:
        city = did_you_mean(name.rsplit("/", 1)[-1].replace(" ", "_"), cities, cutoff=0.8)
        found = cities[city] if city is not None else None
    return found


def id_problem(task_id: str) -> str | None:
    """Why `task_id` is not a valid task id, or None."""
    for segment in task_id.split("/"):
        if not ID_SEGMENT.fullmatch(segment):
            return f"id segment {segment!r} must match [a-z0-9][a-z0-9_.-]{{0,62}} (lower-case letters, digits, _ . -)"
    return None
