"""Pydantic models of one task file (frozen, unknown keys forbidden)."""

from __future__ import annotations

import re
from datetime import date, datetime, time
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import (
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


class Model(BaseModel):
    """Base of every file model: immutable, no unknown keys."""

    # strict: TOML has real types, so "yes" is not a boolean and "30" is not a number.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class EnvRef(Model):
    """A value read from an environment variable by the engine at fire time."""

    env: str

    @field_validator("env")
    @classmethod
    def _name(cls, value: str) -> str:
        if not ENV_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name (letters, digits, _)")
        return value


def _plain_or_env(value: Any) -> str | EnvRef:
    if isinstance(value, str):
        return value
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


def _when(value: Any) -> WhenValue:
    if isinstance(value, datetime | date):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value) if "T" in value or " " in value else date.fromisoformat(value)
        except ValueError:
            pass
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
    expr: str

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
    every: str | None = None
    seconds: int | None = Field(default=None, gt=0)

    @field_validator("every")
    @classmethod
    def _every(cls, value: str | None) -> str | None:
        if value is not None and parse_every(value) is None:
            raise ValueError(f'{value!r} is not a duration; write e.g. "90s", "15m", "6h" or "2d"')
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
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", text)
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
    return tuple(sorted({_clock_time(item) for item in items}))


def _dump_clock_times(value: tuple[time, ...]) -> Any:
    texts = [_dump_clock_time(item) for item in value]
    return texts[0] if len(texts) == 1 else texts


ClockTimes = Annotated[tuple[time, ...], PlainValidator(_clock_times), PlainSerializer(_dump_clock_times)]


class CalendarTrigger(Window):
    kind: Literal["calendar"]
    every: int = Field(default=1, gt=0)
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
    scope: str | None = None
    audience: str | None = None

    @field_validator("token_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)


Auth = Annotated[BearerAuth | BasicAuth | OAuth2ClientCredentials, Field(discriminator="kind")]


def check_url(value: str) -> str:
    """Accept http(s) URLs with a host."""
    if not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", value):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value


class Target(Model):
    url: str
    method: str = "POST"
    headers: dict[str, StrOrEnv] = Field(default_factory=dict)
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
        for name, header in value.items():
            if name.lower() in {"authorization", "proxy-authorization"} and isinstance(header, str):
                raise ValueError(f'a literal {name} header is a secret; write {name} = {{ env = "NAME" }}')
        return value

    @model_validator(mode="after")
    def _one_body(self) -> Target:
        if self.body is not None and self.json_body is not None:
            raise ValueError('give either json = {...} or body = "...", not both')
        return self


class Policy(Model):
    misfire_grace_seconds: int = Field(default=60, ge=0)
    coalesce: bool = True
    max_running_instances: int = Field(default=1, ge=1, le=1000)
    retries: int = Field(default=0, ge=0, le=20)
    retry_backoff_seconds: float = Field(default=5, ge=0, le=3600)
    jitter_seconds: int = Field(default=0, ge=0, le=3600)
    dst_gap: Literal["shift", "skip"] = "shift"
    dst_overlap: Literal["first", "last", "both"] | None = None
    keep_runs: int | None = Field(default=None, ge=1)


class TaskSpec(Model):
    """The content of one task file."""

    description: str | None = None
    timezone: str = "UTC"
    enabled: bool = True
    labels: dict[str, str] = Field(default_factory=dict)
    moved_from: str | None = None
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
