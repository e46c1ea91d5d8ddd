"""A kind of declared file costs a model and a registration: a `greetings.d/` kind (tests/greetings.py) is read,
checked with one-line errors (file, line, key, fix), digested and diffed by the code tasks and notifiers use;
tests/integration/test_new_kind.py takes it through validate, plan, apply, export and the JSON Schema."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.files.calendars import CALENDARS
from reconciler.files.directory import read_dir
from reconciler.files.kinds import spec_hash, validate
from reconciler.files.limits import LIMITS
from reconciler.files.notifiers import NOTIFIERS
from reconciler.files.registry import KINDS
from reconciler.files.tasks import TASKS
from reconciler.reconcile.diff import FieldDiff, diff_declared
from tests.greetings import GREETINGS


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())


def test_a_new_kind_is_read_and_checked_like_the_others(tmp_path: Path) -> None:
    root = tmp_path / "greetings.d"
    write(
        root,
        {
            "hello.toml": 'text = "hello"\n',
            "typo.toml": '# a greeting\ntxt = "hi"\n',
            "long.toml": 'text = "' + "a" * 30 + '"\n',
            "nul.toml": 'text = "a\\u0000b"\n',
            "empty.toml": "",
            "broken.toml": "text = \n",
            "Caps.toml": 'text = "x"\n',
            "sub/deep.toml": 'text = "x"\n',
            "latin1.toml": b'text = "caf\xe9"\n',
            "_ignored.toml": "not toml",
        },
    )
    files = read_dir(GREETINGS, root, "greetings.d")
    items, errors = files.check()
    assert [(g.name, g.spec.text) for g in items] == [("hello", "hello")]
    assert [str(e) for e in errors] == [
        "greetings.d/Caps.toml:0: name: a greeting's file name must match [a-z0-9][a-z0-9_.-]{0,62}.toml; "
        "rename the file",
        "greetings.d/broken.toml:1: toml: syntax error, column 8: Invalid value; fix the TOML syntax",
        'greetings.d/empty.toml:0: (file): empty greeting file; write text = "hello"',
        "greetings.d/latin1.toml:1: (file): not UTF-8 text: byte 0xE9 in column 12 cannot be read as UTF-8 "
        "(invalid continuation byte); save the file as UTF-8",
        "greetings.d/long.toml:1: text: may have at most 20 characters",
        "greetings.d/nul.toml:1: text: contains a NUL character (\\u0000), which PostgreSQL cannot store; remove it",
        "greetings.d/sub/deep.toml:0: (file): greeting files sit directly in greetings.d; move it up",
        "greetings.d/typo.toml:2: txt: unknown key 'txt'; did you mean 'text'? (allowed here: text)",
    ]
    assert files.failed(errors) == {"Caps", "broken", "empty", "latin1", "long", "nul", "deep", "typo"}


def test_a_new_kind_is_digested_and_diffed_like_notifiers() -> None:
    hello, problems = validate(GREETINGS, "hello", "greetings.d/hello.toml", 'text = "hello"\n')
    assert problems == [] and hello is not None
    assert hello.normalized == {"text": "hello"}
    assert hello.canonical == '{"text":"hello"}'
    assert hello.spec_hash == spec_hash({"text": "hello"})
    assert hello.line_of("text") == 1

    @dataclass(frozen=True)
    class Row:  # what a table of greetings would hold per source and name
        source: str
        name: str
        spec: dict[str, Any]
        spec_hash: str

    rows = [
        Row("main", "hello", {"text": "hi"}, spec_hash({"text": "hi"})),
        Row("main", "bye", {"text": "bye"}, spec_hash({"text": "bye"})),
        Row("other", "mine", {"text": "x"}, spec_hash({"text": "x"})),
    ]
    changes = diff_declared({"hello": hello}, rows, "main")
    assert [(c.op, c.name, c.fields) for c in changes] == [
        ("delete", "bye", []),
        ("update", "hello", [FieldDiff("text", "hi", "hello")]),
    ]
    assert diff_declared({"hello": hello}, [Row("main", "hello", {"text": "hello"}, hello.spec_hash)], "main") == []


def test_the_registry_lists_every_kind_in_the_order_apply_writes_them() -> None:
    # a task's [notify] names notifiers, its trigger and policy name calendars, its policy limits: they are
    # written first
    assert KINDS == (CALENDARS, LIMITS, NOTIFIERS, TASKS)
    assert [kind.directory for kind in KINDS] == ["calendars.d", "limits.d", "notifiers.d", "tasks.d"]


def test_the_allowed_keys_are_read_from_the_models() -> None:
    allowed = TASKS.keys.allowed
    assert allowed[("trigger", "cron")] == [
        "business_days",
        "end_at",
        "expr",
        "kind",
        "on_non_business_day",
        "start_at",
    ]
    assert allowed[("target", "auth", "bearer")] == ["kind", "token"]
    assert ("target", "headers") not in allowed  # a value, not a table of keys
    assert NOTIFIERS.keys.root_tags == ("webhook", "slack")
    assert LIMITS.keys.allowed == {(): ["burst", "description", "max_in_flight", "rate_per_second"]}
    assert ("auth", "basic") in NOTIFIERS.keys.tags
    assert GREETINGS.keys.allowed == {(): ["text"]}


def test_every_kind_of_the_registry_has_a_json_schema() -> None:
    from reconciler.spec.jsonschema import file_schema

    for kind in (*KINDS, GREETINGS):
        schema = file_schema(kind.name, kind.model, kind.title, kind.description)
        assert schema["$id"] == f"urn:reconciler:schema:{kind.name}" and schema["title"] == kind.title
