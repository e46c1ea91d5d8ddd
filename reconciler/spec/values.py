"""Value types a file's keys share (EnvRef, StrOrEnv, SecretRef, When, ClockTimes), bounds on text,
and the rules of names: ids, time zones."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from functools import lru_cache
from typing import Annotated, Any

from pydantic import AfterValidator, PlainSerializer, PlainValidator, field_validator

from reconciler.errors import UserError
from reconciler.spec.model import Model, did_you_mean

ID_SEGMENT = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DAY = 86_400

# Input bounds (docs/files.md, "Input bounds"): each keeps every later step (PostgreSQL int4 and
# jsonb, datetime arithmetic, the HTTP client, the engine's leases) inside what it can do.
MIN_YEAR, MAX_YEAR = 1970, 9000  # instants stay far from datetime's year 1 and 9999 in any zone
MAX_CLOCK_TIMES = 1440  # one per minute of the day
MAX_NAME = 256  # a header, query parameter or environment variable name
MAX_TEXT = 8192  # any other one-line string: header and query values, client ids, scopes
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc


def check_text(value: str, limit: int, allowed: str = "") -> str:
    """`value`, if it has at most `limit` characters and no control character but those `allowed`."""
    if len(value) > limit:
        raise ValueError(f"longer than {limit} characters")
    for match in CONTROL.finditer(value):
        if match.group() not in allowed:
            raise ValueError(f"control character {match.group()!r} is not allowed here")
    return value


def text_rule(limit: int, allowed: str = "") -> AfterValidator:
    return AfterValidator(lambda value: check_text(value, limit, allowed))


Line = Annotated[str, text_rule(MAX_TEXT)]


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


def file_name(what: str, directory: str) -> AfterValidator:
    """The rule of a name a task gives a file of another kind (`what` in `directory`): the file's name."""

    def check(value: str) -> str:
        if not ID_SEGMENT.fullmatch(value):
            raise ValueError(
                f"{value[:MAX_NAME]!r} is not a {what} name: the file name of {directory}/NAME.toml, "
                "matching [a-z0-9][a-z0-9_.-]{0,62}"
            )
        return value

    return AfterValidator(check)


CalendarName = Annotated[str, file_name("calendar", "calendars.d")]


def id_problem(task_id: str) -> str | None:
    """Why `task_id` is not a valid task id, or None."""
    for segment in task_id.split("/"):
        if not ID_SEGMENT.fullmatch(segment):
            return f"id segment {segment!r} must match [a-z0-9][a-z0-9_.-]{{0,62}} (lower-case letters, digits, _ . -)"
    return None


def parse_instant(text: str, option: str) -> datetime:
    """An ISO date-time within the years a task file may name; without an offset it is UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"{option}: {text!r} is not an ISO date-time; write e.g. 2026-12-03T00:00:00Z") from None
    problem = year_problem(value)
    if problem:
        raise UserError(f"{option}: {problem}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value
