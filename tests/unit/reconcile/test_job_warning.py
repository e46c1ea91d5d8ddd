"""A plan of files holding tasks that complete by callback warns that every engine needs its public URL."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from reconciler.files.tasks import load_dir
from reconciler.reconcile.plan import make_plan

BASE = '[trigger]\nkind = "cron"\nexpr = "0 3 * * *"\n[target]\nurl = "https://etl.example.com/{name}"\n'
JOB = 'completion = "callback"\ndeadline = "6h"\n'


def test_a_plan_of_callback_tasks_warns_once_naming_them(tmp_path: Path) -> None:
    root = tmp_path / "tasks.d"
    root.mkdir()
    for name in ("etl", "export", "plain"):
        (root / f"{name}.toml").write_text(BASE.format(name=name) + (JOB if name != "plain" else ""))
    plan = make_plan(load_dir(root, "tasks.d").tasks, [], "default", datetime(2026, 12, 7, tzinfo=UTC))
    [warning] = [w for w in plan.warnings if "callback" in w]
    assert warning.startswith("etl, export: ") and "--public-url" in warning and "RECONCILER_PUBLIC_URL" in warning
    assert "plain" not in warning


def test_a_plan_without_callback_tasks_says_nothing_of_it(tmp_path: Path) -> None:
    root = tmp_path / "tasks.d"
    root.mkdir()
    (root / "plain.toml").write_text(BASE.format(name="plain"))
    plan = make_plan(load_dir(root, "tasks.d").tasks, [], "default", datetime(2026, 12, 7, tzinfo=UTC))
    assert not [w for w in plan.warnings if "callback" in w]
