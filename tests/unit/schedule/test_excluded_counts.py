"""What the calendars take away is counted over the whole span and listed in time order however far it reaches
(issue 49): the listing may stop at its limit, the count never does, and fires plus excluded add up."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from reconciler.schedule.catchup import TICK
from reconciler.schedule.excluded import excluded_between, excluded_span
from reconciler.schedule.preview import fires_in, upcoming
from tests.helpers import schedule

START = datetime(2026, 9, 3, 0, 0, tzinfo=UTC)
# Minutes 0 and 1 of every five: 2 of each 5 occurrences of a minute's task, 72 of a three-hour range's 180.
EVERY_FIFTH = {"kind": "blackout", "window": [{"cron": "*/5 * * * *", "duration": "2m"}]}


def minutely(calendar: dict[str, Any]) -> Any:
    return schedule("UTC", {"kind": "cron", "expr": "* * * * *"}, {"f": calendar}, blackouts=["f"])


def test_a_three_hour_range_counts_every_excluded_occurrence_not_those_of_the_first_hundred() -> None:
    sched = minutely(EVERY_FIFTH)
    end = START + timedelta(hours=3)
    fires, more = fires_in(sched, START, end, 10_000)
    assert (len(fires), more) == (108, False)
    assert len(excluded_between(sched, START - TICK, end - TICK)) == 72  # was 40: only 100 occurrences looked at
    span = excluded_span(sched, START - TICK, end - TICK, limit=10)
    assert (len(span.listed), span.total, span.unlisted, span.exact) == (10, 72, 62, True)
    assert len(fires) + span.total == 180  # every minute of the range: fired or excluded
    assert [e.at for e in span.listed] == sorted(e.at for e in span.listed)
    assert {e.reason for e in span.listed} == {"blackout: f"}


def test_a_count_that_would_cost_too_much_stops_and_says_it_is_a_lower_bound() -> None:
    sched = minutely(EVERY_FIFTH)
    span = excluded_span(sched, START, START + timedelta(days=1), limit=5, counted=1000)
    assert not span.exact and span.total >= 400 and len(span.listed) == 5


def test_business_day_exclusions_reach_past_the_first_hundred_occurrences() -> None:
    # A daily task on business days with a holiday in June: 115 business days from January reach past it,
    # after more than 100 daily occurrences (the old scan stopped there, in April).
    days = {"kind": "business_days", "extra_holidays": ["2026-06-04"]}
    sched = schedule("UTC", {"kind": "cron", "expr": "0 9 * * *", "business_days": "de"}, {"de": days})
    fires = upcoming(sched, datetime(2026, 1, 1, tzinfo=UTC), 115)
    assert fires[-1].at.date() > date(2026, 6, 4)
    excluded = excluded_between(sched, datetime(2026, 1, 1, tzinfo=UTC), fires[-1].at)
    assert datetime(2026, 6, 4, 9, 0, tzinfo=UTC) in [e.at for e in excluded]
    assert [e.reason for e in excluded if e.at.date() == date(2026, 6, 4)] == ["holiday: extra holiday (de)"]
    weekends = [e for e in excluded if e.reason == "weekend (de)"]
    assert len(weekends) + 1 + len(fires) == (fires[-1].at.date() - date(2026, 1, 1)).days + 1  # every day
