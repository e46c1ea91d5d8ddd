"""A plan that parses only the changed files (load_files) is the plan that parses every file (load_dir).

Each scenario applies four files, changes something (files, rows, the parser's version, the
schema), then plans both ways: the same errors, the same tasks, the same plan in every rendering,
and the files expected to stand on their rows did, unparsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.db import task_writes
from reconciler.db.store import Store
from reconciler.files import digests as loader
from reconciler.files.tasks import LoadResult, load_dir
from reconciler.output.plan_json import plan_json
from reconciler.output.plan_markdown import plan_markdown
from reconciler.output.plan_text import plan_text
from reconciler.reconcile.apply import PlanRefused, apply_tasks, load_files, read_plan
from reconciler.reconcile.plan import Plan
from tests.builders import cron_trigger, task_text, write_tasks
from tests.conftest import SuiteServer, with_db

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SOURCE = "default"
TARGET = '\n[target]\nurl = "http://127.0.0.1:9/hook"\njson = { n = 1 }\n'


def cron(expr: str = "0 * * * *", head: str = "") -> str:
    return task_text(head + 'timezone = "Europe/Berlin"', trigger=cron_trigger(expr), target="json = { n = 1 }")


FILES = {
    "a": cron(),
    "b": f'description = "every 90 s"\n[trigger]\nkind = "interval"\nevery = "90s"\n{TARGET}',
    # A calendar across the fall-back night of 2027 and a `once` already past: previews with warnings.
    "team/c": (
        'timezone = "America/New_York"\n[trigger]\nkind = "calendar"\nunit = "days"\nevery = 1\nat = "01:30"\n'
        f"start_at = 2026-01-01\n{TARGET}"
    ),
    "d": f'enabled = false\n[trigger]\nkind = "once"\nat = 2026-06-01T00:00:00\n{TARGET}',
}
ALL = set(FILES)


def remove(root: Path, task_id: str) -> None:
    (root / f"{task_id}.toml").unlink()


def sql(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement.encode())


def rendered(plan: Plan) -> list[str]:
    """Everything a plan shows or decides: its renderings (fingerprints and digest in the json), its verdict."""
    decided = [f"{c.op} {c.id} retime={c.retime} drift={c.drift}" for c in plan.changes]
    return [plan_json(plan), plan_text(plan), plan_markdown(plan), *plan.refused, *decided]


async def same_plan(store: Store, root: Path, source: str = SOURCE) -> LoadResult:
    """Plan both ways and check they agree; the digest path's load, whose tasks say which stood on their rows."""
    full = load_dir(root, "tasks.d")
    fast = await load_files(store, root, "tasks.d")
    assert [str(e) for e in fast.errors] == [str(e) for e in full.errors]
    assert [(t.id, t.path, t.spec_hash, t.digest) for t in fast.tasks] == [
        (t.id, t.path, t.spec_hash, t.digest) for t in full.tasks
    ]
    if not full.errors:
        slow, quick = [await read_plan(store, loaded.tasks, source, NOW) for loaded in (full, fast)]
        assert rendered(quick) == rendered(slow)
    return fast


def standing(loaded: LoadResult) -> set[str]:
    return {task.id for task in loaded.tasks if task.stored is not None}


async def apply_files(store: Store, root: Path, source: str = SOURCE) -> int:
    """What `reconciler apply` does: load by the digests, upgrade the schema, apply."""
    loaded = await load_files(store, root, "tasks.d")
    assert not loaded.errors
    await store.init_schema()
    return (await apply_tasks(store, loaded.tasks, source, NOW)).written


@dataclass
class World:
    root: Path
    dsn: str
    store: Store
    monkeypatch: pytest.MonkeyPatch


async def nothing(world: World) -> None:
    pass


async def create(world: World) -> None:
    write_tasks(world.root, {"e": cron("5 4 * * *")})


async def update(world: World) -> None:
    write_tasks(world.root, {"a": cron("30 * * * *")})


async def change_and_back(world: World) -> None:
    write_tasks(world.root, {"a": cron("30 * * * *")})
    await same_plan(world.store, world.root)
    write_tasks(world.root, {"a": FILES["a"]})


async def change_apply_and_back(world: World) -> None:
    write_tasks(world.root, {"a": cron("30 * * * *")})
    await apply_files(world.store, world.root)
    write_tasks(world.root, {"a": FILES["a"]})


async def move(world: World) -> None:
    remove(world.root, "b")
    # A byte order mark before moved_from: its line is 1 in every error that names it.
    write_tasks(world.root, {"team/b2": '\ufeffmoved_from = "b"\n' + FILES["b"]})


async def move_applied(world: World) -> None:
    await move(world)
    await apply_files(world.store, world.root)  # team/b2 keeps naming b: a leftover pointer


async def old_id_again(world: World) -> None:
    await move_applied(world)
    write_tasks(world.root, {"b": FILES["b"]})  # team/b2, unchanged, now names an existing file


async def delete(world: World) -> None:
    remove(world.root, "d")


async def two_moves_from_one(world: World) -> None:
    write_tasks(world.root, {"x": cron(head='moved_from = "gone"\n')})
    write_tasks(world.root, {"y": cron(head='moved_from = "gone"\n')})


async def moved_from_an_unchanged_file(world: World) -> None:
    write_tasks(world.root, {"x": cron(head='moved_from = "a"\n')})


async def invalid(world: World) -> None:
    write_tasks(world.root, {"a": cron("61 * * * *")})


async def not_utf8(world: World) -> None:
    write_tasks(world.root, {"a": b"\xff\xfe" + FILES["a"].encode("utf-16-le")})


async def a_directory(world: World) -> None:
    remove(world.root, "a")
    (world.root / "a.toml").mkdir()


async def disabled_by_hand(world: World) -> None:
    sql(world.dsn, "UPDATE scheduler.tasks SET enabled = false WHERE id = 'a'")


async def zone_by_hand(world: World) -> None:
    sql(world.dsn, "UPDATE scheduler.tasks SET timezone = 'UTC' WHERE id = 'team/c'")


async def spec_by_hand(world: World) -> None:
    sql(world.dsn, "UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{enabled}', 'false') WHERE id = 'a'")


async def spec_hash_by_hand(world: World) -> None:
    sql(world.dsn, "UPDATE scheduler.tasks SET spec_hash = 'sha256:0' WHERE id = 'a'")


async def new_parser(world: World) -> None:
    world.monkeypatch.setattr(loader, "PARSER_VERSION", loader.PARSER_VERSION + 1)
    loader.parser_key.cache_clear()


async def old_reconciler_rows(world: World) -> None:
    sql(world.dsn, "UPDATE scheduler.tasks SET file_digest = NULL")


async def old_schema(world: World) -> None:
    sql(world.dsn, "ALTER TABLE scheduler.tasks DROP COLUMN file_digest")


async def same_bytes_other_id(world: World) -> None:
    write_tasks(world.root, {"z": FILES["a"]})


@dataclass(frozen=True)
class Scenario:
    name: str
    change: Callable[[World], Awaitable[None]]
    stand: set[str]  # the ids whose files the digest path does not parse
    source: str = SOURCE
    errors: bool = False


SCENARIOS = [
    Scenario("no-op", nothing, ALL),
    Scenario("create", create, ALL),
    Scenario("update", update, ALL - {"a"}),
    Scenario("changed and changed back", change_and_back, ALL),
    Scenario("changed, applied, changed back", change_apply_and_back, ALL - {"a"}),
    Scenario("move", move, ALL - {"b"}),
    Scenario("move applied, moved_from kept", move_applied, ALL - {"b"} | {"team/b2"}),
    Scenario("moved, then the old id created again", old_id_again, ALL - {"b"} | {"team/b2"}, errors=True),
    Scenario("delete", delete, ALL - {"d"}),
    Scenario("two moves from one id", two_moves_from_one, ALL, errors=True),
    Scenario("moved_from names an unchanged file", moved_from_an_unchanged_file, ALL, errors=True),
    Scenario("file with errors", invalid, ALL - {"a"}, errors=True),
    Scenario("file no longer UTF-8", not_utf8, ALL - {"a"}, errors=True),
    Scenario("file replaced by a directory", a_directory, ALL - {"a"}, errors=True),
    Scenario("enabled column edited: drift", disabled_by_hand, ALL),
    Scenario("timezone column edited: drift", zone_by_hand, ALL),
    Scenario("spec edited: drift", spec_by_hand, ALL - {"a"}),
    Scenario("spec_hash edited", spec_hash_by_hand, ALL - {"a"}),
    Scenario("new parser version", new_parser, set()),
    Scenario("rows written by an older reconciler", old_reconciler_rows, set()),
    Scenario("database without file_digest", old_schema, set()),
    Scenario("rows of another source", nothing, ALL, source="team-b"),
    Scenario("same bytes under another id", same_bytes_other_id, ALL),
]


@pytest.fixture(autouse=True)
def fresh_parser_key() -> Iterator[None]:
    """parser_key() is cached per process: a test that changes PARSER_VERSION must not leak its key."""
    loader.parser_key.cache_clear()
    yield
    loader.parser_key.cache_clear()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_digest_path_plans_as_a_full_parse(
    scenario: Scenario, store: Store, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "tasks.d"
    for task_id, text in FILES.items():
        write_tasks(root, {task_id: text})
    assert await apply_files(store, root) == len(FILES)
    world = World(root, dsn, store, monkeypatch)
    await scenario.change(world)
    loaded = await same_plan(store, root, scenario.source)
    assert standing(loaded) == scenario.stand
    assert bool(loaded.errors) == scenario.errors
    if scenario.errors or scenario.source != SOURCE:
        return
    # Applying what the digest path loaded leaves nothing to do, by either path.
    await apply_files(store, root)
    full = await read_plan(store, load_dir(root, "tasks.d").tasks, SOURCE, NOW)
    assert not full.has_changes and full.summary["drift"] == 0
    await same_plan(store, root)


def versions(dsn: str) -> dict[str, str]:
    """Each row's xmin: any write to a row changes it."""
    with psycopg.connect(dsn) as conn:
        return {row[0]: row[1] for row in conn.execute("SELECT id, xmin::text FROM scheduler.tasks")}


async def applied_by_an_older_reconciler(store: Store, dsn: str, root: Path) -> None:
    """FILES applied, then their rows stripped of file_digest, as an older reconciler left them."""
    for task_id, text in FILES.items():
        write_tasks(root, {task_id: text})
    await apply_files(store, root)
    sql(dsn, "UPDATE scheduler.tasks SET file_digest = NULL")


async def test_noop_apply_does_not_seal_rows(store: Store, dsn: str, tmp_path: Path) -> None:
    root = tmp_path / "tasks.d"
    await applied_by_an_older_reconciler(store, dsn, root)
    before = versions(dsn)
    assert await apply_files(store, root) == 0
    assert versions(dsn) == before  # no row written: a plan saved before stays valid
    assert standing(await same_plan(store, root)) == set()


async def test_writing_apply_seals_the_unchanged_rows(store: Store, dsn: str, tmp_path: Path) -> None:
    root = tmp_path / "tasks.d"
    await applied_by_an_older_reconciler(store, dsn, root)
    write_tasks(root, {"a": cron("30 * * * *")})
    assert await apply_files(store, root) == 1
    assert standing(await same_plan(store, root)) == ALL


@asynccontextmanager
async def twin(test_server: SuiteServer) -> AsyncIterator[tuple[Store, str]]:
    """A second fresh database on the test server."""
    name = test_server.create()
    try:
        async with Store(with_db(test_server.dsn, name)) as store:
            await store.init_schema()
            yield store, with_db(test_server.dsn, name)
    finally:
        test_server.drop(name)


def all_rows(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT * FROM scheduler.tasks ORDER BY id").fetchall()


async def test_copy_apply_writes_the_rows_batched_inserts_write(
    store: Store, dsn: str, tmp_path: Path, test_server: SuiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "tasks.d"
    count = task_writes.COPY_CREATES + 10
    for index in range(count):
        write_tasks(root, {f"t/{index:03d}": cron(f"{index % 60} * * * *") if index % 2 else FILES["team/c"]})
    write_tasks(root, {"d": FILES["d"]})  # disabled: next_run_at NULL
    assert await apply_files(store, root) == count + 1
    monkeypatch.setattr(task_writes, "COPY_CREATES", 10**9)
    async with twin(test_server) as (batched, batched_dsn):
        assert await apply_files(batched, root) == count + 1
        copied, inserted = all_rows(dsn), all_rows(batched_dsn)
    assert copied == inserted and len(copied) == count + 1
    assert standing(await same_plan(store, root)) == {t.id for t in load_dir(root).tasks}


# ---------------------------------------------------------------- random edits

IDS = ["a", "b", "team/c"]
VARIANTS = [cron(), cron("15 3 * * *", "enabled = false\n"), FILES["team/c"]]
Op = tuple[str, str, int]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "delete", "move", "garbage", "apply", "apply", "row"]),
        st.sampled_from(IDS),
        st.integers(0, len(VARIANTS) - 1),
    ),
    max_size=8,
)
ROW_EDITS = [
    "UPDATE scheduler.tasks SET enabled = NOT enabled WHERE id = '{id}'",
    "UPDATE scheduler.tasks SET spec = jsonb_set(spec, '{{description}}', '\"edited\"') WHERE id = '{id}'",
    "UPDATE scheduler.tasks SET file_digest = NULL WHERE id = '{id}'",
]


async def play(dsn: str, ops: list[Op]) -> None:
    root = Path(tempfile.mkdtemp()) / "tasks.d"
    root.mkdir()
    try:
        async with Store(dsn) as store:
            await store.init_schema()
            sql(dsn, "TRUNCATE scheduler.tasks, scheduler.applies, scheduler.runs")
            for kind, task_id, variant in ops:
                path = root / f"{task_id}.toml"
                if kind == "write":
                    write_tasks(root, {task_id: VARIANTS[variant]})
                elif kind == "delete" and path.exists():
                    path.unlink()
                elif kind == "move" and path.exists():
                    path.unlink()
                    write_tasks(root, {f"{task_id}-{variant}": f'moved_from = "{task_id}"\n' + VARIANTS[variant]})
                elif kind == "garbage":
                    write_tasks(root, {task_id: "[trigger\n"})
                elif kind == "row":
                    sql(dsn, ROW_EDITS[variant].format(id=task_id))
                elif kind == "apply":
                    loaded = await load_files(store, root, "tasks.d")
                    if not loaded.errors:
                        with contextlib.suppress(PlanRefused):  # a prune rail; the plans must still agree
                            await apply_tasks(store, loaded.tasks, SOURCE, NOW)
                await same_plan(store, root)
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_random_edits_plan_alike_both_ways(ops: list[Op], dsn: str) -> None:
    asyncio.run(play(dsn, ops))
