"""Plans that post and print safely: a comment that always fits GitHub, content that cannot
break out of its fence or reach a terminal raw, secrets masked, every change kind marked."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.cli.parser import main
from reconciler.db.errors import scrub_dsn_echo
from reconciler.db.rows import TaskRow
from reconciler.files.tasks import Task, load_dir, load_text
from reconciler.output import plan_json, plan_markdown, plan_text
from reconciler.output.masking import MASK, mask_spec, mask_text, mask_url
from reconciler.output.text import safe
from reconciler.reconcile.plan import make_plan
from tests.builders import run_main

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
BASE = '[trigger]\nkind = "cron"\nexpr = "@daily"\n[target]\nurl = "http://127.0.0.1:9/x"\n'


def one(task_id: str, text: str = BASE) -> Task:
    task, errors = load_text(task_id, f"tasks.d/{task_id}.toml", text)
    assert task is not None, errors
    return task


def row_of(task: Task, **spec_changes: Any) -> TaskRow:
    """The row an apply of `task` wrote, then edited by hand (spec_changes) outside the reconciler."""
    spec = {**task.normalized, **spec_changes}
    return TaskRow(task.id, "default", json.dumps(spec), task.spec_hash, True, "UTC", None, "1", bool(spec_changes))


def fences_hold(markdown: str) -> None:
    """Every fence opened is closed by the same fence, and no content line can close it."""
    lines = markdown.split("\n")
    open_fence: str | None = None
    for line in lines:
        ticks = re.match(r"^ {0,3}(`{3,})", line)
        if open_fence is None:
            if ticks:
                open_fence = ticks[1]
        elif ticks and ticks[1] == open_fence and line.strip() == open_fence:
            open_fence = None
        else:
            assert not (ticks and len(ticks[1]) >= len(open_fence)), f"{line!r} closes {open_fence}"
    assert open_fence is None


def named_ids(markdown: str) -> set[str]:
    """Every id a comment names: in a details summary, or in the id listing (folders, ranges)."""
    text = html.unescape(markdown)
    ids = set(re.findall(r"<summary>\S+ (?:create|update|delete) (\S+)</summary>", text))
    ids |= set(re.findall(r"<summary>\S+ move \S+ → (\S+)</summary>", text))
    for line in re.findall(r"^\S+ \*\*\w+\*\* \(\d+\): (.*)$", text, re.M):
        for group in line.split(" · "):
            folder, _, names = group.rpartition("</code> ")
            folder = folder.removeprefix("<code>")
            for name in names.split(", "):
                found = re.fullmatch(r"(.*)\{(\d+)\.\.(\d+)\}", name)
                if found:
                    width = len(found[2])
                    span = range(int(found[2]), int(found[3]) + 1)
                    ids |= {f"{folder}{found[1]}{n:0{width}d}" for n in span}
                else:
                    ids.add(folder + name)
    return ids


@pytest.mark.parametrize(
    "make_id",
    [
        lambda i: f"team-{i % 7}/task-number-{i:05d}",
        lambda i: f"team-platform-observability/synthetic-check-number-{i:04d}",
        lambda i: f"team-{i % 13}/{'abcdefghij'[i % 10]}{'klmnopqrst'[i // 10 % 10]}-check-{i * 7919 % 10007}",
    ],
    ids=["short", "long-numbered", "scattered"],
)
def test_markdown_for_2000_new_tasks_fits_a_comment_and_names_every_id(make_id: Callable[[int], str]) -> None:
    tasks = [one(make_id(i)) for i in range(2000)]
    text = plan_markdown.plan_markdown(make_plan(tasks, [], "default", NOW))
    assert len(text) <= plan_markdown.MARKDOWN_BUDGET < plan_markdown.GITHUB_COMMENT_LIMIT - 1000
    assert named_ids(text) == {t.id for t in tasks}
    assert "more change(s)**, full plan in the job log" in text
    fences_hold(text)


def test_markdown_budget_holds_for_long_ids_and_many_refusals() -> None:
    tasks = [one(f"{'x' * 60}/{'y' * 60}/n{i:04d}") for i in range(600)]
    text = plan_markdown.plan_markdown(make_plan(tasks, [], "default", NOW))
    assert len(text) <= plan_markdown.MARKDOWN_BUDGET and named_ids(text) == {t.id for t in tasks}
    fences_hold(text)
    rows = [row_of(t) for t in tasks]  # every file's id belongs to another source: 600 conflicts
    plan = make_plan(
        tasks, [TaskRow(r.id, "other", r.spec_text, r.spec_hash, True, "UTC", None) for r in rows], "me", NOW
    )
    plan.refused = [str(c) for c in plan.conflicts] * 4
    text = plan_markdown.plan_markdown(plan)
    assert len(text) <= plan_markdown.MARKDOWN_BUDGET and "… and 2380 more (all of them in the job log)" in text
    fences_hold(text)


def test_every_change_kind_is_marked_where_github_colours_it() -> None:
    kept, edited, gone = one("kept"), one("edited"), one("gone")
    moved = one("new-name", 'moved_from = "old-name"\n' + BASE)
    desired = [kept, one("edited", BASE.replace("@daily", "@hourly")), moved, one("fresh")]
    rows = [row_of(kept), row_of(edited), row_of(gone), row_of(one("old-name"))]
    text = plan_markdown.plan_markdown(make_plan(desired, rows, "default", NOW))
    diff_lines = [line for block in re.findall(r"```diff\n(.*?)\n```", text, re.S) for line in block.split("\n")]
    assert diff_lines and all(line[0] in "+-!" for line in diff_lines), diff_lines
    for marker in ("🟢 create fresh", "🟡 update edited", "🔵 move old-name → new-name", "🔴 delete gone"):
        assert marker in html.unescape(text)


HOSTILE = "line\n```\n</details><script>alert(1)</script>\n````` \x1b[2J\x1b]0;owned\x07 \u202e evil \x9b31m"


def test_hostile_content_stays_in_its_fence_and_never_reaches_a_terminal_raw() -> None:
    task = one("victim", f'description = """fine\n```\n</details>\n~~~\n"""\n{BASE}')  # a fence from the file
    row = row_of(task, description=HOSTILE, target={**task.normalized["target"], "method": HOSTILE})
    plan = make_plan([task], [row], "src\x1b[31m`", NOW)
    text, markdown = plan_text.plan_text(plan), plan_markdown.plan_markdown(plan)
    for shown in (text, markdown):
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", shown), shown
    fences_hold(markdown)
    outside = re.sub(r"(?ms)^(`{3,})diff$.*?^\1$", "", markdown)
    assert "<script>" not in outside and "</details><script>" not in outside


def test_hostile_ids_from_the_database_are_escaped_in_the_id_listing() -> None:
    evil = "azzz`<img src=x onerror=alert(1)> @octocat [x](http://evil) \x1b[31m"
    rows = [row_of(one(f"t{i:04d}")) for i in range(3000)]
    rows.append(TaskRow(evil, "default", rows[0].spec_text, rows[0].spec_hash, True, "UTC", None))
    plan = make_plan([], rows, "default", NOW)
    markdown = plan_markdown.plan_markdown(plan)
    assert len(markdown) <= plan_markdown.MARKDOWN_BUDGET
    assert "\x1b" not in markdown
    outside = re.sub(r"(?ms)^(`{3,})(diff|text)$.*?^\1$", "", markdown)  # fenced text is shown literally
    for raw in ("<img", "@octocat", "](http", "`<"):
        assert raw not in outside, raw
    assert evil.replace("\x1b", "\\x1b") in html.unescape(markdown)  # named, shown as text


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=200))
def test_safe_text_has_no_control_characters(text: str) -> None:
    assert not re.search("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]", safe(text))


def test_secrets_in_an_older_row_are_masked_in_every_format() -> None:
    task = one("legacy")
    old_target = {
        **task.normalized["target"],
        "url": "https://user:hunter2@api.example.com/x?token=hunter3&page=2",
        "headers": {"X-Api-Key": "hunter4", "Accept": "text/plain"},
        "query": {"access_token": "hunter5"},
    }
    plan = make_plan([], [row_of(task, target=old_target)], "default", NOW, prune=True)
    for shown in (plan_text.plan_text(plan), plan_markdown.plan_markdown(plan), plan_json.plan_json(plan)):
        assert "hunter" not in shown, shown
        assert "api.example.com" in shown and "X-Api-Key" in shown and "page=2" in shown
    assert "hunter" not in json.dumps(mask_spec(json.loads(row_of(task, target=old_target).spec_text)))


def test_mask_helpers() -> None:
    assert mask_url("https://u:p@h.example/x?sig=abc&a=1") == f"https://{MASK}@h.example/x?sig={MASK}&a=1"
    assert "s3cr3t" not in mask_text("postgresql://app:s3cr3t@db/x password=s3cr3t api_key=s3cr3t")
    assert mask_text("timeout_seconds = 30") == "timeout_seconds = 30"
    assert scrub_dsn_echo('missing "=" after "s3cr3t" in connection info string', "host=x s3cr3t") == (
        'missing "=" after "***" in connection info string'
    )
    assert "s3cr3t" not in scrub_dsn_echo("FATAL: s3cr3t rejected", "host=x user=u password=s3cr3t")


def test_a_dsn_password_never_reaches_the_error_line(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "a.toml").write_text(BASE)
    for dsn in ("host=127.0.0.1 port=1 user=u password=s3cr3t connect_timeout=2", "host=x password= s3cr3t"):
        assert main(["--dsn", dsn, "--tasks-dir", str(tmp_path), "plan"]) == 1
        captured = capsys.readouterr()
        assert "s3cr3t" not in captured.out + captured.err and captured.err.startswith("error: ")


def test_usage_errors_exit_1_and_abbreviations_are_refused() -> None:
    for argv in (["plan", "--bogus"], ["pla"], ["apply", "--max-del", "3"], ["plan", "--format", "yaml"], []):
        code, _, err = run_main(argv)
        assert code == 1, argv
        if "--max-del" in argv:
            assert "--max-del" in err


def test_the_shipped_examples_plan_with_their_targets(tmp_path: Path) -> None:
    loaded = load_dir(Path(__file__).parents[3] / "tasks.d", "tasks.d")
    text = plan_text.plan_text(make_plan(loaded.tasks, [], "default", NOW))
    assert text.count("    target: ") == len(loaded.tasks)
    created, target_lines = re.findall(r"^\+ create (\S+)$", text, re.M), re.findall(r"^    target: (.*)$", text, re.M)
    targets = dict(zip(created, target_lines, strict=True))
    auths = {task_id: re.findall(r"\(auth (\w+);", line) for task_id, line in targets.items()}
    assert auths == {
        "billing/invoices": [],
        "ops/cache-warm": ["bearer"],
        "ops/monthly-report": ["oauth2_client_credentials"],
        "ops/ping": [],
        "ops/xmas-banner": ["basic"],
    }, text


def test_rows_edited_into_any_shape_still_render() -> None:
    task = one("odd")
    shapes = [
        TaskRow("odd", "default", "[]", "x", True, "UTC", None, "1", True),  # not an object
        TaskRow("odd", "default", '{"target": {"timeout_seconds": "30", "url": 5}}', "x", True, "Nowhere/Zone", None),
        TaskRow("odd", "default", '{"target": [], "policy": 7, "enabled": "yes"}', "x", False, "UTC", None),
    ]
    for row in shapes:
        for plan in (make_plan([task], [row], "default", NOW), make_plan([], [row], "default", NOW)):
            for render in (plan_text.plan_text, plan_markdown.plan_markdown, plan_json.plan_json):
                assert render(plan), (row, render)
