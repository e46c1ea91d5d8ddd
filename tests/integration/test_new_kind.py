"""A new kind of declared file is one registration end to end: the `greetings.d/` kind of tests/greetings.py, made
and registered by the test alone, goes through validate, plan (text, markdown, json), apply, a second plan, an
update and a delete, export and the JSON Schema with no line of the package naming it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from reconciler.db.store import Store
from reconciler.files import registry
from reconciler.files.declared import Declared, load_declared
from reconciler.files.locations import Directories
from reconciler.files.tasks import load_dir
from reconciler.output.plan_json import plan_dict
from reconciler.output.plan_markdown import plan_markdown
from reconciler.output.plan_text import plan_text
from reconciler.reconcile.apply import apply_tasks, read_plan
from reconciler.reconcile.declared import stored_rows
from reconciler.reconcile.export import Placeholders, export_item
from reconciler.spec.jsonschema import file_schema
from tests.greetings import GREETINGS

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
TASK = '[trigger]\nkind = "cron"\nexpr = "0 3 * * *"\n[target]\nurl = "http://127.0.0.1:9/"\n'


def project(root: Path, greetings: dict[str, str]) -> Directories:
    """A project with one task and these greeting files; every kind's directory beside tasks.d."""
    (root / "tasks.d").mkdir(parents=True, exist_ok=True)
    (root / "tasks.d" / "nightly.toml").write_text(TASK)
    folder = root / "greetings.d"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.toml"):
        old.unlink()
    for name, text in greetings.items():
        (folder / f"{name}.toml").write_text(text)
    paths = {kind: str(root / f"{kind}s.d") for kind in ("calendar", "limit", "notifier", "greeting", "task")}
    return Directories(paths)


def loaded(dirs: Directories) -> Declared:
    return load_declared(dirs, load_dir(Path(dirs.tasks_dir), "tasks.d"))


async def test_a_registered_kind_is_validated_planned_applied_exported_and_has_a_schema(
    monkeypatch: pytest.MonkeyPatch, store: Store, dsn: str, tmp_path: Path
) -> None:
    # the registration, and all of it: greetings among the registry's kinds, before the tasks
    monkeypatch.setattr(registry, "KINDS", (*registry.KINDS[:-1], GREETINGS, registry.KINDS[-1]))

    # validate: its files' errors come with the others', one line each
    bad = loaded(project(tmp_path, {"hello": 'text = "hello"\n', "typo": 'txt = "hi"\n'}))
    assert [str(e).removeprefix(str(tmp_path) + "/") for e in bad.errors] == [
        "greetings.d/typo.toml:1: txt: unknown key 'txt'; did you mean 'text'? (allowed here: text)"
    ]

    # plan: created, in the three renderings
    dirs = project(tmp_path, {"hello": 'text = "hello"\n'})
    declared = loaded(dirs)
    assert declared.ok and list(declared.named) == ["calendar", "limit", "notifier", "greeting"]
    plan = await read_plan(store, declared.tasks, "default", NOW, declared=list(declared.named.values()))
    assert [(c.op, c.name) for c in plan.changes_of(GREETINGS)] == [("create", "hello")]
    text = plan_text(plan)
    assert "+ greeting hello\n+     says 'hello'" in text
    assert "; greetings: 1 to create, 0 to update, 0 to delete." in text
    assert "**Greetings: 1 change(s)**" in plan_markdown(plan)
    assert plan_dict(plan)["greetings"] == [
        {
            "op": "create",
            "name": "hello",
            "fields": [],
            "before": None,
            "after": {"text": "hello"},
            "summary": "says 'hello'",
        }
    ]

    # apply: stored by kind in scheduler.declared, in the apply's one transaction (and its audit row)
    result = await apply_tasks(store, declared.tasks, "default", NOW, declared=list(declared.named.values()))
    assert result.written == 2  # the task and the greeting
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT kind, source, name, spec FROM scheduler.declared").fetchall()
        audit = conn.execute("SELECT details FROM scheduler.audit WHERE action = 'apply'").fetchone()
    assert rows == [("greeting", "default", "hello", {"text": "hello"})]
    assert audit is not None and audit[0]["greetings"] == {"hello": "create"}
    again = await read_plan(store, declared.tasks, "default", NOW, declared=list(declared.named.values()))
    assert not again.has_changes

    # an update shows the field; a deleted file deletes the row
    changed = loaded(project(tmp_path, {"hello": 'text = "hi there"\n'}))
    plan = await read_plan(store, changed.tasks, "default", NOW, declared=list(changed.named.values()))
    [update] = plan.changes_of(GREETINGS)
    assert (update.op, [(f.path, f.old, f.new) for f in update.fields]) == ("update", [("text", "hello", "hi there")])
    assert '~     text: "hello" → "hi there"' in plan_text(plan)
    await apply_tasks(store, changed.tasks, "default", NOW, declared=list(changed.named.values()))

    # export: the stored item written back as the file it came from
    async with store.connection() as conn:
        [row] = await stored_rows(conn, GREETINGS)
    exported = export_item(GREETINGS, row, Placeholders())
    assert (exported.id, exported.text, exported.warnings) == ("hello", 'text = "hi there"\n', [])

    gone = loaded(project(tmp_path, {}))
    plan = await read_plan(store, gone.tasks, "default", NOW, declared=list(gone.named.values()))
    assert [(c.op, c.name) for c in plan.changes_of(GREETINGS)] == [("delete", "hello")]
    assert "-     says 'hi there'" in plan_text(plan)
    await apply_tasks(store, gone.tasks, "default", NOW, declared=list(gone.named.values()))
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM scheduler.declared").fetchone() == (0,)

    # the JSON Schema, from the same model
    schema = file_schema(GREETINGS.name, GREETINGS.model, GREETINGS.title, GREETINGS.description)
    assert schema["title"] == "greeting file" and schema["additionalProperties"] is False
    assert (schema["properties"]["text"]["type"], schema["properties"]["text"]["maxLength"]) == ("string", 20)
