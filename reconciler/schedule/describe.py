"""Schedules in words: the plain-English description of a trigger and one line per fire time."""

from __future__ import annotations

import functools
from datetime import datetime
from zoneinfo import ZoneInfo

from reconciler.clock import when_text
from reconciler.schedule.base import Fire
from reconciler.spec.task import TaskSpec

_INTERVAL_UNITS = (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1))


def describe_trigger(spec: TaskSpec) -> str:
    """A plain-English description of a task's schedule (24-hour clock, intervals in words), with its
    business days and blackouts."""
    words = _trigger_words(spec)
    trigger, policy = spec.trigger, spec.policy
    if trigger.kind in ("cron", "calendar") and trigger.business_days is not None:
        move = trigger.on_non_business_day or "skip"
        moved = "" if move == "skip" else f", else on the {move} business day"
        words += f", on business days of {trigger.business_days}{moved}"
    if policy.blackouts:
        names = ", ".join(policy.blackouts)
        words += f", not during blackout {names}" + ("; deferred to its end" if policy.on_blackout == "defer" else "")
    return words


def _nth(day: int) -> str:
    if day == -1:
        return "last"
    number = abs(day)
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}" + (" last" if day < 0 else "")


def _trigger_words(spec: TaskSpec) -> str:
    trigger = spec.trigger
    if trigger.kind == "cron":
        return f"{cron_words(' '.join(trigger.fields), trigger.expr)} ({spec.timezone})"
    if trigger.kind == "business_day":
        times = ", ".join(t.strftime("%H:%M") for t in trigger.times)
        day, calendar = _nth(trigger.day), trigger.business_days
        return f"at {times} on the {day} business day of each month, calendar {calendar} ({spec.timezone})"
    if trigger.kind == "interval":
        return f"{interval_words(trigger.period_seconds)} (elapsed time)"
    if trigger.kind == "calendar":
        times = ", ".join(t.strftime("%H:%M") for t in trigger.times)
        unit = trigger.unit if trigger.every > 1 else trigger.unit.rstrip("s")
        every = f"every {trigger.every} {unit}" if trigger.every > 1 else f"every {unit}"
        return f"{every} at {times} from {trigger.start_at} ({spec.timezone})"
    at = trigger.at
    if isinstance(at, datetime) and at.tzinfo is not None:
        return f"once at {when_text(at, ZoneInfo(spec.timezone))}"
    return f"once at {at} ({spec.timezone})"


@functools.lru_cache(maxsize=4096)  # a plan of 10,000 creates shares a few dozen expressions
def cron_words(fields: str, expr: str) -> str:
    """cron-descriptor's English for five cron fields; `cron EXPR` where it rejects valid croniter syntax."""
    try:
        from cron_descriptor import Options, get_description

        # English and a 24-hour clock whatever the machine's locale, like every timestamp next to it.
        options = Options(use_24hour_time_format=True, locale_code="en_US")
        return str(get_description(fields, options))
    except Exception:
        return f"cron {expr}"


def interval_words(seconds: int) -> str:
    """`every minute`, `every 15 minutes`, `every 1 hour 30 minutes`, `every day`."""
    parts: list[tuple[int, str]] = []
    left = seconds
    for name, size in _INTERVAL_UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append((count, name))
    if len(parts) == 1 and parts[0][0] == 1:
        return f"every {parts[0][1]}"
    return "every " + " ".join(f"{count} {name}{'s' if count != 1 else ''}" for count, name in parts)


def fire_line(fire: Fire, zone: ZoneInfo) -> str:
    """`2026-12-03 02:30:00 CET (2026-12-03 01:30:00 UTC)  [DST: …]` (and `[deferred: …]`)."""
    text = when_text(fire.at, zone)
    text = f"{text}  [DST: {fire.note}]" if fire.note else text
    return f"{text}  [{fire.rule}]" if fire.rule else text
