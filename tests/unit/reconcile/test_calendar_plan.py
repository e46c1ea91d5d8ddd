"""A calendar's change in a plan: new holiday data shows as dates added and removed, and a created calendar says
what it is; the tasks that name it are retimed with `calendars.NAME` old → new."""

from __future__ import annotations

from typing import Any

from reconciler.files.calendars import CALENDARS
from reconciler.output.plan_lines import SYMBOLS, kind_lines
from reconciler.reconcile.diff import ItemChange, diff_fields
from reconciler.reconcile.plan import KindChanges, calendar_fields, version


def calendar_lines(change: ItemChange[Any]) -> list[str]:
    return kind_lines(KindChanges(CALENDARS, [change]), SYMBOLS)


OLD = {
    "kind": "business_days",
    "weekend": ["sat", "sun"],
    "holidays": {"country": "US"},
    "resolved": {"years": [2025, 2036], "holidays": {"2026-06-19": "Juneteenth", "2026-10-12": "Columbus Day"}},
}
NEW = {
    **OLD,
    "resolved": {
        "years": [2025, 2036],
        "holidays": {"2026-06-19": "Juneteenth National Independence Day", "2026-11-03": "Election Day"},
    },
}


def test_new_holiday_data_shows_the_dates_added_removed_and_renamed() -> None:
    change: ItemChange[Any] = ItemChange("update", "us", diff_fields(OLD, NEW), before=OLD)
    assert calendar_lines(change) == [
        "~ calendar us",
        "~     ~ holiday 2026-06-19: Juneteenth → Juneteenth National Independence Day",
        "~     - holiday 2026-10-12 Columbus Day",
        "~     + holiday 2026-11-03 Election Day",
    ]


def test_a_created_calendar_says_what_it_is() -> None:
    from reconciler.files.calendars import Calendar
    from reconciler.spec.calendar import BlackoutCalendar

    freeze = BlackoutCalendar.model_validate(
        {"kind": "blackout", "window": [{"cron": "0 22 * * 5", "duration": "56h"}]}
    )
    change: ItemChange[Any] = ItemChange("create", "freeze", item=Calendar("freeze", "freeze.toml", freeze))
    assert calendar_lines(change) == ["+ calendar freeze", "+     blackout: 1 window(s) in UTC"]
    assert calendar_lines(ItemChange("delete", "us", before=OLD)) == [
        "- calendar us",
        "-     business days: weekend sat, sun; 2 holidays of US 2025–2036",
    ]


def test_a_task_is_retimed_only_by_the_calendars_that_changed() -> None:
    fields = calendar_fields({"us": OLD, "f": {"kind": "blackout"}}, {"us": NEW, "f": {"kind": "blackout"}})
    assert [(f.path, f.old, f.new) for f in fields] == [("calendars.us", version(OLD), version(NEW))]
    assert calendar_fields(None, None) == [] and calendar_fields({"us": OLD}, {"us": OLD}) == []
