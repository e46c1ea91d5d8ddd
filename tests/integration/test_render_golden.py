"""Golden renderings of one plan (text, markdown, json) for fixed files and a fixed `now`.

Regenerate after an intended change with
RECONCILER_UPDATE_GOLDEN=1 python -m pytest tests/integration/test_render_golden.py
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from reconciler.db.store import Store
from reconciler.files.tasks import load_dir
from reconciler.output import plan_json, plan_markdown, plan_text
from reconciler.reconcile.apply import apply_tasks, read_plan
from tests.builders import write_tasks

GOLDEN = Path(__file__).parent.parent / "golden"
NOW = datetime(2026, 10, 20, 8, 0, tzinfo=UTC)
BASE = {
    "billing/invoices": 'timezone = "Europe/Berlin"\n[trigger]\nkind = "cron"\nexpr = "0 2 * * *"\n'
    '[target]\nurl = "http://127.0.0.1:9/invoices"\n',
    "ops/old-name": '[trigger]\nkind = "interval"\nevery = "15m"\n[target]\nurl = "http://127.0.0.1:9/warm"\n',
    "ops/retired": '[trigger]\nkind = "once"\nat = 2027-01-01T00:00:00Z\n[target]\nurl = "http://127.0.0.1:9/r"\n',
    "ops/steady": '[trigger]\nkind = "cron"\nexpr = "@daily"\n[target]\nurl = "http://127.0.0.1:9/s"\n',
    "ops/tampered": '[trigger]\nkind = "cron"\nexpr = "@hourly"\n[target]\nurl = "http://127.0.0.1:9/t"\n',
}
CHANGED = {
    "billing/invoices": BASE["billing/invoices"].replace("0 2 * * *", "30 2 * * *"),
    "ops/cache-warm": 'moved_from = "ops/old-name"\n' + BASE["ops/old-name"],
    "ops/steady": BASE["ops/steady"],
    "ops/tampered": BASE["ops/tampered"],
    "reports/monthly": 'timezone = "America/New_York"\n[trigger]\nkind = "calendar"\nunit = "months"\n'
    'at = "01:30"\nstart_at = 2026-01-31\n[target]\nurl = "http://127.0.0.1:9/m"\n',
}


@pytest.mark.parametrize(
    ("name", "renderer"),
    [("plan.txt", plan_text.plan_text), ("plan.md", plan_markdown.plan_markdown), ("plan.json", plan_json.plan_json)],
)
async def test_plan_rendering_matches_golden(store: Store, dsn: str, tmp_path: Path, name: str, renderer) -> None:  # type: ignore[no-untyped-def]
    write_tasks(tmp_path, BASE, replace=True)
    await apply_tasks(store, load_dir(tmp_path, "tasks.d").tasks, "default", NOW)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{description}', '\"edited by hand\"') "
            "WHERE id = 'ops/tampered'"
        )
    write_tasks(tmp_path, CHANGED, replace=True)
    loaded = load_dir(tmp_path, "tasks.d")
    assert loaded.errors == []
    plan = await read_plan(store, loaded.tasks, "default", NOW)
    # The state fingerprint includes row versions (xmin), which differ from run to run.
    text = renderer(plan).replace(plan.state_fingerprint, "sha256:<state>") + "\n"
    golden = GOLDEN / name
    if os.environ.get("RECONCILER_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()
