"""The read-only dashboard in a real browser: Debian's Chromium (never a downloaded one) driven by
Playwright over real pages, served from a real database, with a real engine where runs are needed.

The browser is launched once for the module; every test has a fresh database (tests/conftest.py), a
dashboard of its own on a port the kernel picks (127.0.0.1:0) and a browser context of its own. Time
is injected into the engine (`run_once(now)`), never waited for: no test sleeps, each waits for a
condition. Playwright's objects belong to the event loop that made them, so everything here (tests,
stores, engine and dashboard) runs in the module's loop; hence this module's own `db` and `engine`
fixtures rather than the function-loop `store` of tests/conftest.py.

The docs' screenshots: `RECONCILER_SCREENSHOTS=1 pytest tests/browser -k screenshots`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest
import pytest_asyncio
from playwright.async_api import (
    Browser,
    BrowserContext,
    Locator,
    Page,
    Response,
    ViewportSize,
    async_playwright,
    expect,
)

from reconciler.clock import DATABASE, FixedClock
from reconciler.db.store import Store
from reconciler.engine.config import EngineConfig
from reconciler.engine.loop import Engine
from reconciler.files.tasks import load_dir
from reconciler.output import views
from reconciler.output.masking import mask_text
from reconciler.output.text import safe
from reconciler.reconcile.apply import ApplyOptions, apply_tasks
from reconciler.reconcile.revision import Revision
from reconciler.schedule.base import Fire, Schedule
from reconciler.schedule.preview import upcoming
from reconciler.targets.http import Firer
from reconciler.web.app import make_app, serve
from reconciler.web.dashboard import Dashboard
from reconciler.web.metrics import serve_metrics
from tests.builders import cron, interval_trigger, run_reconciler, task_text, write_tasks
from tests.httpserver import Recorder
from tests.integration.engine_support import NOW, runs, setup

pytestmark = pytest.mark.asyncio(loop_scope="module")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
PAGES = ("/", "/tasks/{id}", "/timeline", "/runs", "/applies", "/engines")
WRITES = ("POST", "PUT", "DELETE", "PATCH", "OPTIONS")
BERLIN = ZoneInfo("Europe/Berlin")
TOKEN = "dashboard-token-5d1e"
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"

SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=1">'
QUOTES = "\"'"
HOSTILE = f"{SCRIPT} {IMG} {QUOTES}"


# ---------------------------------------------------------------- fixtures


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium); these tests never download one")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def db(dsn: str) -> AsyncIterator[Store]:
    """The test's database with the scheduler's schema (the `store` fixture, in this module's loop)."""
    async with Store(dsn) as opened:
        await opened.init_schema()
        yield opened


@pytest_asyncio.fixture(loop_scope="module")
async def engine(db: Store) -> AsyncIterator[Engine]:
    firer = Firer(concurrency=4)
    made = Engine(db, EngineConfig("browser-engine"), firer)
    yield made
    await firer.close()
    await made.deliverer.close()


@pytest_asyncio.fixture(loop_scope="module")
async def site(db: Store, dsn: str) -> AsyncIterator[str]:
    """The dashboard (its own pool, as `reconciler dashboard` has) on 127.0.0.1:0: its origin."""
    dashboard = Dashboard(Store(dsn), "browser-test")
    app = make_app()
    dashboard.add_routes(app)
    served = await serve(app, "127.0.0.1:0")
    yield served.url
    await served.close()
    await dashboard.close()


@dataclass
class Tab:
    """A page in a browser context of its own, and what it did: every request, console errors, script errors."""

    origin: str
    context: BrowserContext
    page: Page
    requests: list[str] = field(default_factory=list)
    console_errors: list[tuple[str, str]] = field(default_factory=list)  # (text, the URL it came from)
    page_errors: list[str] = field(default_factory=list)

    async def open(self, path: str, status: int = 200) -> Response:
        response = await self.page.goto(self.origin + path)
        assert response is not None, path
        assert response.status == status, (path, response.status, await response.text())
        return response

    async def json(self, path: str) -> Any:
        """`path?format=json`, through the context (its headers, its cookies)."""
        response = await self.context.request.get(f"{self.origin}{path}{'&' if '?' in path else '?'}format=json")
        assert response.status == 200, (path, response.status, await response.text())
        assert response.headers["content-type"].startswith("application/json")
        return await response.json()

    def problems(self, *, refused: bool = False) -> list[str]:
        """The pages' script errors and console errors, but, when `refused`, the browser's "Failed to load
        resource" of pages that answered 4xx on purpose."""
        found = list(self.page_errors)
        for text, url in self.console_errors:
            failed_load = text.startswith("Failed to load resource: the server responded with a status of 4")
            if not (failed_load and refused):
                found.append(f"{text} ({url})")
        return found

    async def close(self) -> None:
        await self.context.close()


async def open_tab(browser: Browser, origin: str, *, refresh: bool = False, **options: Any) -> Tab:
    """A tab on `origin` at 1280x800; unless `refresh`, the pages' 30-second reload is switched off (as
    its checkbox does), so that no reload lands in the middle of a test on a slow machine."""
    context = await browser.new_context(
        viewport=VIEWPORT, locale="en-GB", timezone_id="UTC", color_scheme="light", **options
    )
    context.set_default_timeout(30_000)
    if not refresh:
        await context.add_init_script("try { sessionStorage.setItem('reconciler-refresh', 'off'); } catch (e) {}")
    page = await context.new_page()
    tab = Tab(origin, context, page)
    context.on("request", lambda request: tab.requests.append(request.url))
    page.on(
        "console",
        lambda message: (
            tab.console_errors.append((message.text, message.location.get("url", "")))
            if message.type == "error"
            else None
        ),
    )
    page.on("pageerror", lambda error: tab.page_errors.append(str(error)))
    return tab


@pytest_asyncio.fixture(loop_scope="module")
async def tab(browser: Browser, site: str) -> AsyncIterator[Tab]:
    opened = await open_tab(browser, site)
    yield opened
    await opened.close()


# ---------------------------------------------------------------- worlds


async def failed_then_missed(db: Store, engine: Engine, http: tuple[str, Recorder], root: Path) -> None:
    """`reports/daily`, every 5 minutes against a target that answers 500: 12:05 fires and fails,
    12:10 is claimed 90 s late (misfire grace 60 s) and is recorded missed."""
    url, recorder = http
    recorder.script("/report", statuses=[500], body=b"upstream exploded")
    top = 'description = "Build the daily report"\nlabels = { team = "reports" }'
    await setup(db, root, {"reports/daily": cron(f"{url}/report", top=top)})
    assert (await engine.run_once(NOW + timedelta(minutes=5))).failed == 1
    assert (await engine.run_once(NOW + timedelta(minutes=11, seconds=30))).missed == 1


def occurrences(schedule: Schedule, start: datetime, end: datetime) -> list[Fire]:
    """The schedule's own occurrences in (start, end]."""
    return [fire for fire in upcoming(schedule, start, 1000) if fire.at <= end]


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


async def texts(locator: Locator) -> list[str]:
    return [text.strip() for text in await locator.all_text_contents()]


INERT = """() => ({
    pwned: typeof window.__pwned,
    scripts: Array.from(document.scripts, (s) => s.getAttribute("src")),
    images: document.images.length,
    handlers: Array.from(document.querySelectorAll("*")).flatMap((el) =>
        Array.from(el.attributes).filter((a) => a.name.startsWith("on")).map((a) => el.tagName + " " + a.name)),
})"""


async def assert_inert(page: Page) -> None:
    """No injected script ran and none is in the DOM: the only script is app.js, no image, no handler."""
    found = await page.evaluate(INERT)
    assert found == {"pwned": "undefined", "scripts": ["/static/app.js"], "images": 0, "handlers": []}, page.url


def assert_security_headers(headers: dict[str, str], where: str) -> None:
    policy = [part.strip() for part in headers.get("content-security-policy", "").split(";")]
    assert "default-src 'self'" in policy, (where, headers)
    assert "frame-ancestors 'none'" in policy, (where, headers)
    assert headers.get("x-content-type-options") == "nosniff", (where, headers)
    assert headers.get("referrer-policy") == "no-referrer", (where, headers)


# ---------------------------------------------------------------- 1. the task list


async def test_task_list_shows_tasks_descriptions_labels_schedules_and_status(
    db: Store, engine: Engine, tab: Tab, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, recorder = http
    recorder.script("/flaky", statuses=[500], body=b"partner API down")
    files = {
        "billing/invoices": cron(
            f"{url}/ok",
            expr="0 6 * * 1-5",
            top='description = "Send the day\'s invoices"\ntimezone = "Europe/Berlin"\n'
            'labels = { team = "billing", tier = "gold" }',
        ),
        "ops/cache-warm": task_text(
            'description = "Keep the product cache warm"\nlabels = { team = "platform" }',
            trigger=interval_trigger("15m"),
            url=f"{url}/ok",
        ),
        "ops/flaky": cron(f"{url}/flaky", top='description = "Sync the partner feed"\nlabels = { team = "partners" }'),
        "ops/legacy": cron(f"{url}/ok", top='description = "Old export, switched off"\nenabled = false'),
    }
    await setup(db, tmp_path, files)
    for minutes in (5, 10, 15):  # ops/flaky fails at 12:05, 12:10, 12:15; ops/cache-warm succeeds at 12:15
        await engine.run_once(NOW + timedelta(minutes=minutes))

    await tab.open("/")
    page = tab.page
    await expect(page.locator("h1")).to_have_text("Tasks 4 in the database, 3 enabled")
    rows = page.locator("table.tasks > tbody > tr")
    await expect(rows.locator("td:first-child > a")).to_have_text(sorted(files))
    expected = {  # id: description, tags, schedule in words, next run, last run, failing
        "billing/invoices": (
            "Send the day's invoices",
            ["source default", "team=billing", "tier=gold"],
            "At 06:00, Monday through Friday (Europe/Berlin)",
            "2026-12-03 05:00:00 UTC",
            "no run yet",
            "-",
        ),
        "ops/cache-warm": (
            "Keep the product cache warm",
            ["source default", "team=platform"],
            "every 15 minutes (elapsed time)",
            "2026-12-02 12:30:00 UTC",
            "succeeded",
            "-",
        ),
        "ops/flaky": (
            "Sync the partner feed",
            ["source default", "team=partners"],
            "Every 5 minutes (UTC)",
            "2026-12-02 12:20:00 UTC",
            "failed",
            "3 failed",
        ),
        "ops/legacy": (
            "Old export, switched off",
            ["source default"],
            "Every 5 minutes (UTC)",
            "disabled",
            "no run yet",
            "-",
        ),
    }
    for task_id, (description, tags, schedule, next_run, last, failing) in expected.items():
        row = rows.filter(has=page.get_by_role("link", name=task_id, exact=True))
        cells = row.locator("> td")
        await expect(row.locator(".desc")).to_have_text(description)
        await expect(row.locator(".tag")).to_have_text(tags)
        await expect(cells.nth(1)).to_have_text(schedule)
        await expect(cells.nth(2).locator("time, .status").first).to_have_text(next_run)
        await expect(cells.nth(3).locator(".status").first).to_have_text(last)  # the status, as a word
        await expect(cells.nth(4)).to_have_text(failing)
    flaky = rows.filter(has=page.get_by_role("link", name="ops/flaky", exact=True))
    await expect(flaky.locator("> td").nth(3)).to_contain_text("failed HTTP 500")
    await expect(flaky.locator("> td").nth(3)).to_contain_text("2026-12-02 12:15:00 UTC")
    warm = rows.filter(has=page.get_by_role("link", name="ops/cache-warm", exact=True))
    await expect(warm.locator("> td").nth(3)).to_contain_text("succeeded HTTP 200")
    await expect(rows.filter(has=page.get_by_role("link", name="ops/legacy", exact=True))).to_have_class("disabled")

    # A task's link opens its page.
    await page.get_by_role("link", name="billing/invoices", exact=True).click()
    await expect(page).to_have_url(f"{tab.origin}/tasks/billing/invoices")
    await expect(page.locator("h1")).to_have_text("billing/invoices")
    assert tab.problems() == []


# ---------------------------------------------------------------- 2. a failed run and a missed run


async def test_task_page_shows_failed_and_missed_runs_with_their_reasons(
    db: Store, dsn: str, engine: Engine, tab: Tab, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await failed_then_missed(db, engine, http, tmp_path)
    recorded = runs(dsn, "reports/daily")
    assert [(r["status"], r["http_status"]) for r in recorded] == [("failed", 500), ("missed", None)]

    await tab.open("/tasks/reports/daily")
    page = tab.page
    await expect(page.locator("h1")).to_have_text("reports/daily")
    await expect(page.locator("main > p.desc")).to_have_text("Build the daily report")
    facts = page.locator("dl.facts > dd")
    await expect(facts.nth(0)).to_have_text("Every 5 minutes (UTC)")
    await expect(facts.nth(1)).to_have_text("missed · 2026-12-02 12:10:00 UTC · 1 failed in a row")

    rows = page.locator("table.runs > tbody > tr")
    await expect(rows).to_have_count(2)
    missed, failed = rows.nth(0).locator("> td"), rows.nth(1).locator("> td")
    # Run, Scheduled, Kind, Status, HTTP, Reason / error, Engine
    await expect(missed).to_have_text(
        [
            "2",
            "2026-12-02 12:10:00 UTC",
            "scheduled",
            "missed",
            "-",
            "missed: claimed late by 90 s, more than misfire_grace_seconds = 60",
            "browser-engine",
        ]
    )
    await expect(failed).to_have_text(
        ["1", "2026-12-02 12:05:00 UTC", "scheduled", "failed", "500", re.compile(r"^HTTP 500"), "browser-engine"]
    )
    await expect(failed.nth(5).locator(".excerpt")).to_have_text("upstream exploded")
    # the reasons are the database's own
    assert [str(r["error"]) for r in reversed(recorded)] == [
        "missed: claimed late by 90 s, more than misfire_grace_seconds = 60",
        "HTTP 500",
    ]
    await expect(missed.nth(3).locator(".status")).to_have_class("status warn")
    await expect(failed.nth(3).locator(".status")).to_have_class("status bad")
    # the page's script ran (CSP lets 'self' scripts run): each instant has the reader's local time
    await expect(page.locator("table.runs time").first).to_have_attribute("data-local", re.compile(r" local$"))
    await page.get_by_role("link", name="All runs of this task →").click()
    await expect(page).to_have_url(f"{tab.origin}/runs?task=reports/daily")
    await expect(page.locator("table.runs > tbody > tr > td:nth-child(5)")).to_have_text(["missed", "failed"])
    assert tab.problems() == []


# ---------------------------------------------------------------- 3. explain


async def test_explain_at_t_shows_what_reconciler_explain_prints(
    db: Store, dsn: str, engine: Engine, tab: Tab, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await failed_then_missed(db, engine, http, tmp_path)
    at = datetime(2026, 12, 2, 12, 10, tzinfo=UTC)
    done = await asyncio.to_thread(
        run_reconciler, "--dsn", dsn, "explain", "reports/daily", "--at", "2026-12-02T12:10Z"
    )
    assert done.returncode == 0, done.stderr
    async with db.reading() as conn:
        lines = await views.explain_lines(conn, "reports/daily", at)
    assert done.stdout == "".join(f"{safe(mask_text(line))}\n" for line in lines)

    await tab.open("/tasks/reports/daily")
    page = tab.page
    await expect(page.locator("#explain")).to_have_count(0)
    # T given with another offset, through the page's own form: the same instant
    await page.get_by_label("T").fill("2026-12-02T13:10:00+01:00")
    await page.get_by_role("button", name="Explain").click()
    await expect(page).to_have_url(re.compile(r"/tasks/reports/daily\?at=2026-12-02T13%3A10%3A00%2B01%3A00$"))
    await expect(page.get_by_label("T")).to_have_value("2026-12-02T12:10:00+00:00")
    explained = page.locator("pre#explain")
    await expect(explained).to_contain_text("---- 2026-12-02 12:10:00 UTC (T)")
    assert await explained.text_content() == done.stdout
    assert "2026-12-02 12:05:00 UTC  → failed, HTTP 500" in done.stdout  # both runs are in it
    assert "2026-12-02 12:10:00 UTC  → missed, claimed 90.0 s after due" in done.stdout
    # and the JSON has the same lines
    data = await tab.json("/tasks/reports/daily?at=2026-12-02T12:10:00Z")
    assert data["explain"] == {"at": "2026-12-02T12:10:00+00:00", "lines": [mask_text(line) for line in lines]}
    assert tab.problems() == []


# ---------------------------------------------------------------- 4. the timeline across a fall-back night


async def test_timeline_across_the_fall_back_night(
    db: Store, tab: Tab, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    berlin = 'timezone = "Europe/Berlin"'
    files = {
        "berlin/daily": cron(f"{url}/d", expr="30 2 * * *", top=berlin),
        "berlin/quarter": cron(f"{url}/q", expr="*/15 1-3 * * *", top=berlin),
    }
    await setup(db, tmp_path, files)
    schedules = {task.id: task.schedule for task in load_dir(tmp_path, "tasks.d").tasks}
    start = datetime(2026, 10, 24, 22, tzinfo=UTC)  # 00:00 CEST; the clocks go back at 01:00 UTC
    end = start + timedelta(hours=24)
    expected = {task_id: occurrences(schedule, start, end) for task_id, schedule in schedules.items()}
    assert len(expected["berlin/daily"]) >= 1 and len(expected["berlin/quarter"]) >= 12
    notes = {task_id: {fire.at: fire.note for fire in fires} for task_id, fires in expected.items()}

    await tab.open("/timeline?from=2026-10-24T22:00:00Z&tz=Europe/Berlin")
    page = tab.page
    hours = await page.locator("ol.timeline > li.hour").evaluate_all(
        """(items) => items.map((li) => ({
            start: li.dataset.start,
            label: li.querySelector(".label").textContent,
            count: li.querySelector(".count").textContent,
            idle: li.classList.contains("idle"),
            marks: Array.from(li.querySelectorAll("a.mark"), (a) => ({
                at: a.dataset.at, href: a.getAttribute("href"), text: a.textContent })),
        }))"""
    )
    # one row per real hour, labelled in Berlin: the repeated hour is two rows, 02:00 CEST then 02:00 CET
    starts = [instant(hour["start"]) for hour in hours]
    assert starts == [start + timedelta(hours=n) for n in range(25)]
    labels = [hour["label"] for hour in hours]
    assert labels == [f"{moment.astimezone(BERLIN):%Y-%m-%d %H:%M %Z}" for moment in starts]
    assert labels.count("2026-10-25 02:00 CEST") == 1 and labels.count("2026-10-25 02:00 CET") == 1
    assert labels.index("2026-10-25 02:00 CET") == labels.index("2026-10-25 02:00 CEST") + 1
    # every occurrence once, in its own hour, and nothing else
    shown: dict[str, list[datetime]] = {task_id: [] for task_id in files}
    for hour in hours:
        assert int(hour["count"]) == len(hour["marks"]) and hour["idle"] == (not hour["marks"]), hour
        for mark in hour["marks"]:
            at = instant(mark["at"])
            assert at.replace(minute=0, second=0) == instant(hour["start"]), (mark, hour["start"])
            task_id = mark["href"].removeprefix("/tasks/")
            local = at.astimezone(BERLIN)
            note = notes[task_id].get(at)  # the schedule's own DST note, shown beside the time
            assert mark["text"] == f"{local:%H:%M:%S} {local:%Z} {task_id}" + (f" ({note})" if note else ""), mark
            shown[task_id].append(at)
    for task_id, moments in shown.items():
        assert [moment for moment, n in Counter(moments).items() if n > 1] == [], f"{task_id}: shown twice"
        assert moments == [fire.at for fire in expected[task_id]], task_id
    # the night itself, in Berlin's words: 30 2 * * * fires on the first 02:30 only; */15 1-3 * * * fires
    # on both passes of 02:00-02:45 (16 times)
    assert [f"{m.astimezone(BERLIN):%H:%M %Z}" for m in shown["berlin/daily"]] == ["02:30 CEST"]
    assert [f"{m.astimezone(BERLIN):%H:%M %Z}" for m in shown["berlin/quarter"]] == [
        f"{hour}:{minute} {zone}"
        for hour, zone in (("01", "CEST"), ("02", "CEST"), ("02", "CET"), ("03", "CET"))
        for minute in ("00", "15", "30", "45")
    ]
    # the transition line
    await expect(page.locator("ul.transitions > li.dst")).to_have_text(
        "DST Europe/Berlin: 2026-10-25 01:00:00 UTC, clocks go back: 03:00 CEST becomes 02:00 CET"
    )
    assert tab.problems() == []


# ---------------------------------------------------------------- 5. hostile text


async def test_hostile_descriptions_labels_and_responses_are_text(
    db: Store, engine: Engine, tab: Tab, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, recorder = http
    recorder.script("/evil", statuses=[500], body=f"{IMG}{SCRIPT}".encode())
    labels = {SCRIPT: IMG, "quote": QUOTES}
    pairs = ", ".join(f"{json.dumps(key)} = {json.dumps(value)}" for key, value in labels.items())
    top = f"description = {json.dumps(HOSTILE)}\nlabels = {{ {pairs} }}"  # JSON strings are TOML strings
    loaded = load_dir(write_tasks(tmp_path, {"evil/task": cron(f"{url}/evil", top=top)}), "tasks.d")
    assert loaded.errors == [] and loaded.tasks[0].spec.description == HOSTILE
    revision = Revision("deadbeef", author=IMG, message=SCRIPT)
    await apply_tasks(db, loaded.tasks, "default", NOW, ApplyOptions(revision=revision))
    assert (await engine.run_once(NOW + timedelta(minutes=5))).failed == 1
    page = tab.page
    tags = ["source default", f"{SCRIPT}={IMG}", f"quote={QUOTES}"]

    await tab.open("/")
    await expect(page.locator("table.tasks .desc")).to_have_text(HOSTILE)
    assert sorted(await texts(page.locator("table.tasks .tag"))) == sorted(tags)
    await assert_inert(page)

    await tab.open("/tasks/evil/task?at=2026-12-02T12:05:00Z")
    await expect(page.locator("main > p.desc")).to_have_text(HOSTILE)
    assert sorted(await texts(page.locator("main > .tags > .tag"))) == sorted(tags)
    await expect(page.locator("table.runs .excerpt")).to_have_text(f"{IMG}{SCRIPT}")
    await expect(page.locator("pre#explain")).to_contain_text(f"response: {IMG}{SCRIPT}")
    settings = json.loads(await page.locator("pre.settings").text_content() or "")
    assert settings["description"] == HOSTILE and settings["labels"] == labels
    await assert_inert(page)

    await tab.open("/runs")
    await expect(page.locator("table.runs td.reason")).to_have_text("HTTP 500")
    await assert_inert(page)
    await tab.open("/applies")
    await expect(page.locator("table tbody td").nth(4)).to_have_text(IMG)
    await expect(page.locator("table tbody td").nth(5)).to_have_text(SCRIPT)
    await assert_inert(page)

    # what a reader types comes back as text too: in a filter's value, in an error
    for label_filter, matches in ((f"quote={QUOTES}", True), (f"{IMG}={SCRIPT}", False)):
        await tab.open(f"/?label={quote(label_filter, safe='')}")
        await expect(page.locator("input[name=label]")).to_have_value(label_filter)
        await expect(page.locator("table.tasks .desc")).to_have_text([HOSTILE] if matches else [])
        await assert_inert(page)
    await tab.open(f"/runs?task={quote(HOSTILE, safe='')}")
    await expect(page.locator("input[name=task]")).to_have_value(HOSTILE)
    await assert_inert(page)
    for path, status, shown in (
        (f"/timeline?tz={quote(IMG, safe='')}", 400, IMG),
        (f"/tasks/evil/task?at={quote(SCRIPT, safe='')}", 400, SCRIPT),
        (f"/tasks/{quote(IMG, safe='')}", 404, IMG),
        (f"/?status={quote(QUOTES + SCRIPT, safe='')}", 400, repr(QUOTES + SCRIPT)),  # quoted as Python does
    ):
        await tab.open(path, status)
        await expect(page.locator("p.error")).to_contain_text(shown)
        await assert_inert(page)
    assert tab.problems(refused=True) == []  # not even a CSP report: nothing was injected


# ---------------------------------------------------------------- 6. methods


async def test_only_get_and_head_are_answered(
    db: Store, engine: Engine, tab: Tab, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await failed_then_missed(db, engine, http, tmp_path)
    await tab.open("/")
    paths = [path.format(id="reports/daily") for path in PAGES]
    paths += [f"{path}?format=json" for path in paths] + ["/static/style.css", "/static/app.js", "/nowhere"]
    # from the page itself: fetch() with every method, as a script on the page could
    answers = await tab.page.evaluate(
        """async ([paths, methods]) => {
            const found = [];
            for (const path of paths) {
                for (const method of methods) {
                    const body = ["GET", "HEAD", "OPTIONS"].includes(method) ? undefined : "a=1";
                    const response = await fetch(path, { method, body, cache: "no-store" });
                    found.push({ path, method, status: response.status, allow: response.headers.get("allow"),
                                 csp: response.headers.get("content-security-policy"),
                                 length: (await response.text()).length });
                }
            }
            return found;
        }""",
        [paths, ["GET", "HEAD", *WRITES]],
    )
    assert len(answers) == len(paths) * 7
    for answer in answers:
        where = f"{answer['method']} {answer['path']}"
        assert answer["csp"] and "default-src 'self'" in answer["csp"], where
        if answer["method"] in WRITES:
            assert (answer["status"], answer["allow"]) == (405, "GET, HEAD"), where
        elif answer["path"] == "/nowhere":
            assert answer["status"] == 404, where
        else:
            assert answer["status"] == 200, where
            assert (answer["length"] == 0) == (answer["method"] == "HEAD"), where
    # and through Playwright's own client, with a form's body
    for method in WRITES:
        response = await tab.context.request.fetch(f"{tab.origin}/", method=method, form={"status": "failed"})
        assert response.status == 405 and response.headers["allow"] == "GET, HEAD", method
        assert_security_headers(response.headers, method)
    assert tab.problems(refused=True) == []  # the 405s and the 404, logged by the browser


# ---------------------------------------------------------------- 7. security headers


async def test_security_headers_on_every_response(
    db: Store, engine: Engine, tab: Tab, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await failed_then_missed(db, engine, http, tmp_path)
    await engine.heartbeat()
    for path, status in (
        *((path.format(id="reports/daily"), 200) for path in PAGES),
        ("/tasks/reports/daily?at=2026-12-02T12:10:00Z", 200),
        ("/timeline?from=2026-10-24T22:00:00Z&tz=Europe/Berlin", 200),
        ("/?format=json", 200),
        ("/tasks/reports/daily?format=json", 200),
        ("/static/style.css", 200),
        ("/static/app.js", 200),
        ("/tasks/nope", 404),
        ("/timeline?tz=Mars/Olympus", 400),
        ("/nowhere", 404),
    ):
        response = await tab.open(path, status)
        assert_security_headers(await response.all_headers(), path)
    # the browser enforces the policy: a script injected inline into a page is refused
    await tab.open("/")
    async with tab.page.expect_console_message(lambda message: "Content Security Policy" in message.text) as report:
        ran = await tab.page.evaluate(
            """() => { const s = document.createElement("script"); s.textContent = "window.__inline = 1";
                       document.head.appendChild(s); return typeof window.__inline; }"""
        )
    assert ran == "undefined"
    assert "inline script" in (await report.value).text
    assert tab.page_errors == []


# ---------------------------------------------------------------- 8. no request leaves the origin


async def test_no_request_leaves_the_pages_origin(
    db: Store, engine: Engine, tab: Tab, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await failed_then_missed(db, engine, http, tmp_path)
    url, recorder = http  # a target on another port of 127.0.0.1: it is in the settings shown, never fetched
    await engine.heartbeat()
    page = tab.page
    await tab.open("/")
    for name, path in (("Timeline", "/timeline"), ("Runs", "/runs"), ("Applies", "/applies"), ("Engines", "/engines")):
        await page.locator("header nav").get_by_role("link", name=name, exact=True).click()
        await expect(page).to_have_url(f"{tab.origin}{path}")
    await page.locator("header nav").get_by_role("link", name="Tasks", exact=True).click()
    await expect(page).to_have_url(f"{tab.origin}/")
    await page.locator("select[name=status]").select_option("missed")
    await page.get_by_role("button", name="Filter").click()
    await expect(page).to_have_url(re.compile(r"/\?.*status=missed"))
    await page.get_by_role("link", name="reports/daily", exact=True).click()
    await expect(page.locator("pre.settings")).to_contain_text(url)
    await page.get_by_label("T").fill("2026-12-02T12:10:00Z")
    await page.get_by_role("button", name="Explain").click()
    await expect(page.locator("pre#explain")).to_be_visible()
    await tab.open("/timeline?from=2026-12-02T11:00:00Z")
    await page.locator("a.mark").first.click()
    await expect(page).to_have_url(f"{tab.origin}/tasks/reports/daily")
    await tab.open("/?format=json")

    assert f"{tab.origin}/static/style.css" in tab.requests and f"{tab.origin}/static/app.js" in tab.requests
    assert [request for request in tab.requests if not request.startswith(f"{tab.origin}/")] == []
    assert len(recorder.paths()) == 1  # the engine's one call at 12:05; none from the browser
    assert tab.problems() == []


# ---------------------------------------------------------------- 9. the bearer token


async def test_bearer_token_guards_the_pages_but_not_metrics(
    browser: Browser, db: Store, dsn: str, engine: Engine, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    await failed_then_missed(db, engine, http, tmp_path)
    # as `engine --metrics-addr … --dashboard-token-env …` serves it: /metrics, the probes and the pages
    endpoint = await serve_metrics("127.0.0.1:0", engine, db, dashboard=Dashboard(Store(dsn)), token=TOKEN)
    anonymous = await open_tab(browser, endpoint.url)
    holder = await open_tab(browser, endpoint.url, extra_http_headers={"Authorization": f"Bearer {TOKEN}"})
    guarded = [path.format(id="reports/daily") for path in PAGES] + ["/?format=json", "/static/style.css"]
    try:
        for path in guarded:
            response = await anonymous.open(path, 401)
            headers = await response.all_headers()
            assert headers["www-authenticate"] == 'Bearer realm="reconciler"', path
            assert_security_headers(headers, path)
            assert "Bearer" in await response.text() and "reports/daily" not in await response.text()
            for wrong in (f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}", "Bearer "):  # near misses
                answer = await anonymous.context.request.get(endpoint.url + path, headers={"Authorization": wrong})
                assert answer.status == 401, (path, wrong)
        metrics = await anonymous.open("/metrics")  # Prometheus scrapes without the dashboard's token
        assert "reconciler_listen_connected" in await metrics.text()
        await anonymous.open("/healthz")
        assert anonymous.problems(refused=True) == []

        await holder.open("/")
        page = holder.page
        await expect(page.locator("table.tasks td:first-child > a")).to_have_text(["reports/daily"])
        # the stylesheet and the script came with the token too: the header is styled, the script ran
        border = await page.locator("header").evaluate("(el) => getComputedStyle(el).borderBottomStyle")
        assert border == "solid"
        await expect(page.locator("header time").first).to_have_attribute("data-local", re.compile(" local$"))
        await page.get_by_role("link", name="reports/daily", exact=True).click()
        await expect(page.locator("table.runs > tbody > tr")).to_have_count(2)
        assert (await holder.json("/"))["tasks"][0]["id"] == "reports/daily"
        await holder.open("/metrics")
        assert holder.problems() == []
    finally:
        for tab in (anonymous, holder):
            await tab.close()
        await endpoint.close()


# ---------------------------------------------------------------- 10. JSON = the page


async def page_now(page: Page) -> datetime:
    """The database time the page was rendered at (its header)."""
    return instant(await page.locator("header .meta time").get_attribute("datetime") or "")


async def test_json_of_each_route_is_what_its_page_shows(
    db: Store, engine: Engine, tab: Tab, http: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, _ = http
    await failed_then_missed(db, engine, http, tmp_path)
    more = {
        "billing/invoices": cron(
            f"{url}/ok", expr="30 6 * * *", top='timezone = "Europe/Berlin"\nlabels = { a = "b" }'
        ),
        "ops/off": cron(f"{url}/ok", top='enabled = false\ndescription = "off"'),
    }
    loaded = load_dir(write_tasks(tmp_path, more), "tasks.d")
    await apply_tasks(db, loaded.tasks, "default", NOW + timedelta(minutes=12), ApplyOptions())
    await engine.heartbeat()
    page = tab.page

    # / : the tasks
    await tab.open("/")
    data = await tab.json("/")
    shown = await page.locator("table.tasks > tbody > tr").evaluate_all(
        """(rows) => rows.map((tr) => ({
            id: tr.querySelector("td a").textContent,
            description: tr.querySelector(".desc") ? tr.querySelector(".desc").textContent : null,
            tags: Array.from(tr.querySelectorAll(".tag"), (t) => t.textContent),
            schedule: tr.cells[1].textContent,
            next_run_at: tr.cells[2].querySelector("time") ? tr.cells[2].querySelector("time").dateTime : null,
            last_status: tr.cells[3].querySelector(".status").textContent,
            enabled: !tr.classList.contains("disabled"),
        }))"""
    )
    assert (
        [row["id"] for row in shown]
        == [task["id"] for task in data["tasks"]]
        == [
            "billing/invoices",
            "ops/off",
            "reports/daily",
        ]
    )
    for row, task in zip(shown, data["tasks"], strict=True):
        assert row == {
            "id": task["id"],
            "description": task["description"],
            "tags": [f"source {task['source']}", *(f"{k}={v}" for k, v in task["labels"].items())],
            "schedule": task["schedule"],
            "next_run_at": task["next_run_at"],
            "last_status": task["last_status"] or "no run yet",
            "enabled": task["enabled"],
        }
    counts = data["counts"]
    await expect(page.locator("h1 small")).to_have_text(
        f"{counts['tasks']} in the database, {counts['enabled']} enabled"
    )

    # /tasks/<id>: runs, explain, next fire times, settings
    path = "/tasks/reports/daily?at=2026-12-02T12:10:00Z"
    await tab.open(path)
    data = await tab.json(path)
    shown_runs = await page.locator("table.runs > tbody > tr").evaluate_all(
        """(rows) => rows.map((tr) => ({
            id: Number(tr.cells[0].textContent), scheduled_for: tr.cells[1].querySelector("time").dateTime,
            kind: tr.cells[2].textContent, status: tr.cells[3].textContent, http: tr.cells[4].textContent,
            error: tr.cells[5].firstChild ? tr.cells[5].firstChild.textContent : "",
            engine: tr.cells[6].textContent }))"""
    )
    assert shown_runs == [
        {
            "id": run["id"],
            "scheduled_for": run["scheduled_for"],
            "kind": run["kind"],
            "status": run["status"],
            "http": str(run["http_status"] or "-"),
            "error": run["error"],
            "engine": run["engine_id"],
        }
        for run in data["runs"]
    ]
    assert [run["status"] for run in data["runs"]] == ["missed", "failed"]
    assert await page.locator("pre#explain").text_content() == "".join(f"{safe(x)}\n" for x in data["explain"]["lines"])
    assert json.loads(await page.locator("pre.settings").text_content() or "") == data["settings"]
    assert data["task"]["description"] == "Build the daily report" and data["task"]["labels"] == {"team": "reports"}
    [task] = [task for task in loaded.tasks if task.id == "reports/daily"]
    html_fires = await page.locator("#next-fires time").evaluate_all("(ts) => ts.map((t) => t.dateTime)")
    for fires, now in ((html_fires, await page_now(page)), (data["next"]["fire_times"], instant(data["database_now"]))):
        assert fires == [fire.at.astimezone(UTC).isoformat() for fire in upcoming(task.schedule, now, 10)]

    # /timeline: the hours and their marks
    path = "/timeline?from=2026-10-24T22:00:00Z&tz=Europe/Berlin"
    await tab.open(path)
    data = await tab.json(path)
    shown_hours = await page.locator("ol.timeline > li.hour").evaluate_all(
        """(items) => items.map((li) => ({
            start: li.dataset.start, label: li.querySelector(".label").textContent,
            fires: Array.from(li.querySelectorAll("a.mark"), (a) => [a.getAttribute("href").slice(7), a.dataset.at]),
        }))"""
    )
    assert shown_hours == [
        {"start": h["start"], "label": h["label"], "fires": [[f["id"], f["at"]] for f in h["fires"]]}
        for h in data["hours"]
    ]
    assert sum(len(h["fires"]) for h in data["hours"]) > 24
    transitions = await texts(page.locator("ul.transitions > li"))
    assert transitions == [
        f"DST {c['zone']}: {instant(c['at']):%Y-%m-%d %H:%M:%S} UTC, {c['text']}" for c in data["transitions"]
    ]

    # /runs
    await tab.open("/runs")
    data = await tab.json("/runs")
    shown_runs = await page.locator("table.runs > tbody > tr").evaluate_all(
        """(rows) => rows.map((tr) => [Number(tr.cells[0].textContent), tr.cells[1].textContent,
            tr.cells[2].querySelector("time").dateTime, tr.cells[4].textContent, tr.cells[7].textContent])"""
    )
    assert shown_runs == [[r["id"], r["task_id"], r["scheduled_for"], r["status"], r["error"]] for r in data["runs"]]
    assert len(shown_runs) == 2

    # /applies
    await tab.open("/applies")
    data = await tab.json("/applies")
    shown_applies = await page.locator("table tbody tr").evaluate_all(
        """(rows) => rows.map((tr) => [Number(tr.cells[0].textContent), tr.cells[1].querySelector("time").dateTime,
            tr.cells[2].textContent])"""
    )
    assert shown_applies == [[a["id"], a["applied_at"], a["source"]] for a in data["applies"]]
    assert len(shown_applies) == 2

    # /engines
    await tab.open("/engines")
    data = await tab.json("/engines")
    shown_engines = await texts(page.locator("table tbody tr > td:first-child"))
    assert shown_engines == [e["engine_id"] for e in data["engines"]] == ["browser-engine"]
    assert tab.problems() == []


# ---------------------------------------------------------------- the icon


async def test_the_page_icon_is_served(db: Store, tab: Tab) -> None:
    """A browser asks for the page's icon (its <link rel=icon>, else /favicon.ico); a 404 there would be a
    console error on every page."""
    await tab.open("/")
    icon = await tab.page.evaluate(
        "() => (document.querySelector('link[rel~=icon]') || { href: location.origin + '/favicon.ico' }).href"
    )
    response = await tab.context.request.get(icon)
    assert response.status == 200, (icon, response.status)


# ---------------------------------------------------------------- the docs' screenshots


@pytest.mark.skipif(os.environ.get("RECONCILER_SCREENSHOTS") != "1", reason="RECONCILER_SCREENSHOTS=1 makes them")
async def test_screenshots(
    browser: Browser, db: Store, dsn: str, http: tuple[str, Recorder], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/images/dashboard-tasks.png and dashboard-task.png: six realistic tasks over the last 30 hours,
    with an engine outage of two hours (missed runs) and a dunning task whose target went bad (502s).
    The engine's clock is injected: each occurrence is claimed on time and sent a few ms after it (the
    request's send time is read from the process's DATABASE clock, hence its offset is moved too)."""
    url, recorder = http
    recorder.script("/dunning", statuses=[*[200] * 20, 502], body=b'{"error": "bad gateway: payments-api timed out"}')
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    start = now - timedelta(hours=30)
    files = {
        "billing/invoices": cron(
            f"{url}/invoices",
            expr="30 6 * * *",
            top='description = "Send yesterday\'s invoices to the payment provider"\n'
            'timezone = "Europe/Berlin"\nlabels = { team = "billing", tier = "critical" }',
        ),
        "billing/dunning": cron(
            f"{url}/dunning",
            expr="0 * * * *",
            top='description = "Remind customers whose invoices are overdue"\n'
            'labels = { team = "billing", tier = "critical" }',
        ),
        "ops/cache-warm": task_text(
            'description = "Keep the product cache warm"\nlabels = { team = "platform" }',
            trigger=interval_trigger("15m"),
            url=f"{url}/cache/warm",
        ),
        "ops/backup-check": cron(
            f"{url}/backup/check",
            expr="30 2 * * *",
            top='description = "Check that last night\'s database backup restores"\n'
            'timezone = "Europe/Berlin"\nlabels = { team = "sre" }',
        ),
        "ops/monthly-report": task_text(
            'description = "Month-end report, last day of short months"\ntimezone = "America/New_York"\n'
            'labels = { team = "finance" }',
            trigger='kind = "calendar"\nevery = 1\nunit = "months"\nat = "09:30"\nstart_at = 2026-01-31',
            url=f"{url}/reports/monthly",
        ),
        "marketing/newsletter": cron(
            f"{url}/newsletter",
            expr="0 9 * * 1",
            top='description = "Weekly newsletter (off until the new campaign)"\nenabled = false\n'
            'timezone = "Europe/Paris"\nlabels = { team = "marketing" }',
        ),
    }
    await setup(db, tmp_path, files, start)
    schedules = [task.schedule for task in load_dir(tmp_path, "tasks.d").tasks if task.spec.enabled]
    moments = sorted({fire.at for schedule in schedules for fire in occurrences(schedule, start, now)})
    outage = (now - timedelta(hours=4, minutes=50), now - timedelta(hours=2, minutes=50))
    clock = FixedClock(start)
    firer = Firer(concurrency=4)
    engine = Engine(db, EngineConfig("engine-7f9c2"), firer, clock)
    try:
        for n, moment in enumerate(moments):  # each occurrence claimed on time, but during the outage
            if not outage[0] < moment < outage[1]:
                sent = moment + timedelta(milliseconds=40 + 35 * (n % 5))
                clock.set(sent)
                monkeypatch.setattr(DATABASE, "offset", (sent - datetime.now(UTC)).total_seconds())
                await engine.run_once(moment)
    finally:
        await firer.close()
        await engine.deliverer.close()
    missed = [r for r in runs(dsn, "billing/dunning") if r["status"] == "missed"]
    assert missed
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    dashboard = Dashboard(Store(dsn), "PostgreSQL host=db.internal port=5432 dbname=scheduler user=reconciler")
    app = make_app()
    dashboard.add_routes(app)
    served = await serve(app, "127.0.0.1:0")
    tab = await open_tab(browser, served.url, refresh=True)
    try:
        await tab.open("/")
        await expect(tab.page.locator("table.tasks > tbody > tr")).to_have_count(len(files))
        await tab.page.screenshot(path=DOCS_IMAGES / "dashboard-tasks.png")
        at = missed[-1]["scheduled_for"]
        assert isinstance(at, datetime)
        await tab.open(f"/tasks/billing/dunning?at={quote(at.isoformat(), safe='')}")
        await expect(tab.page.locator("pre#explain")).to_be_visible()
        await tab.page.screenshot(path=DOCS_IMAGES / "dashboard-task.png")
        assert tab.problems() == []
    finally:
        await tab.close()
        await served.close()
        await dashboard.close()
