"""Plans that post and print safely: a comment that always fits GitHub, content that cannot
break out of its fence or reach a terminal raw, secrets masked, every change kind marked."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler import planview
from reconciler.cli import main
from reconciler.loader import Task, load_dir, load_text
from reconciler.masking import MASK, mask_spec, mask_text, mask_url
from reconciler.plan import make_plan
from reconciler.render import safe
from reconciler.store import TaskRow, scrub_dsn_echo

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


def test_markdown_for_2000_new_tasks_fits_a_comment_and_names_every_id() -> None:
    tasks = [one(f"team-{i % 7}/task-number-{i:05d}") for i in range(2000)]
    plan = make_plan(tasks, [], "default", NOW)
    text = planview.plan_markdown(plan)
    assert len(text) <= planview.GITHUB_COMMENT_LIMIT
    assert all(f"`{t.id}`" in text or f"create {t.id}" in text for t in tasks)
    assert "more change(s)** — full plan in the job log" in text
    fences_hold(text)


def test_markdown_budget_holds_for_long_ids_too() -> None:
    tasks = [one(f"{'x' * 60}/{'y' * 60}/n{i:04d}") for i in range(600)]
    text = planview.plan_markdown(make_plan(tasks, [], "default", NOW))
    assert len(text) <= planview.GITHUB_COMMENT_LIMIT
    fences_hold(text)


def test_every_change_kind_is_marked_where_github_colours_it() -> None:
    kept, edited, gone = one("kept"), one("edited"), one("gone")
    moved = one("new-name", 'moved_from = "old-name"\n' + BASE)
    desired = [kept, one("edited", BASE.replace("@daily", "@hourly")), moved, one("fresh")]
    rows = [row_of(kept), row_of(edited), row_of(gone), row_of(one("old-name"))]
    text = planview.plan_markdown(make_plan(desired, rows, "default", NOW))
    diff_lines = [line for block in re.findall(r"```diff\n(.*?)\n```", text, re.S) for line in block.split("\n")]
    assert diff_lines and all(line[0] in "+-!" for line in diff_lines), diff_lines
    for marker in ("🟢 create fresh", "🟡 update edited", "🔵 move old-name → new-name", "🔴 delete gone"):
        assert marker in text


HOSTILE = "line\n```\n</details><script>alert(1)</script>\n````` \x1b[2J\x1b]0;owned\x07 \u202e evil \x9b31m"


def test_hostile_content_stays_in_its_fence_and_never_reaches_a_terminal_raw() -> None:
    task = one("victim", f'description = """fine\n```\n</details>\n~~~\n"""\n{BASE}')  # a fence from the file
    row = row_of(task, description=HOSTILE, target={**task.normalized["target"], "method": HOSTILE})
    plan = make_plan([task], [row], "src\x1b[31m`", NOW)
    text, markdown = planview.plan_text(plan), planview.plan_markdown(plan)
    for shown in (text, markdown):
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", shown), shown
    fences_hold(markdown)
    outside = re.sub(r"(?ms)^(`{3,})diff$.*?^\1$", "", markdown)
    assert "<script>" not in outside and "</details><script>" not in outside


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
    for shown in (planview.plan_text(plan), planview.plan_markdown(plan), planview.plan_json(plan)):
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


def test_usage_errors_exit_1_and_abbreviations_are_refused(capsys: Any) -> None:
    for argv in (["plan", "--bogus"], ["pla"], ["apply", "--max-del", "3"], ["plan", "--format", "yaml"], []):
        assert main_exit(argv) == 1, argv
    assert "--max-del" in capsys.readouterr().err


def main_exit(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_the_shipped_examples_plan_with_their_targets(tmp_path: Path) -> None:
    loaded = load_dir(Path(__file__).parents[2] / "tasks.d", "tasks.d")
    text = planview.plan_text(make_plan(loaded.tasks, [], "default", NOW))
    assert text.count("    target: ") == len(loaded.tasks)
    assert "auth oauth2_client_credentials" in text or "auth " in text
