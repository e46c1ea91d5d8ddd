"""`reconciler export`: the database's tasks and the items of every declared kind written back as files (adoption).

Safe by construction: a new directory by default (`exported.d`, each kind's files in its directory beside it:
`notifiers.d`, `calendars.d`, `limits.d`, where `plan` looks for them), no existing file
replaced without --force (every target is checked before any is written), only the keys whose value
differs from the model's default, the model's types (a float field holding 30.0 is written 30), no
`moved_from`, and no literal secret: an old row's literal credential becomes an `{ env = "EXPORTED_…" }`
placeholder with a warning. Every valid file is re-loaded before anything is written; it must give the
stored spec's hash (moved_from aside).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel

from reconciler.db.rows import TaskRow
from reconciler.errors import UserError
from reconciler.files.kinds import Kind, NamedKind, check_data, spec_hash, validate
from reconciler.files.problems import FileError, printable
from reconciler.files.tasks import TASKS
from reconciler.files.writer import fields_of, member_for, shaped, submodel, to_toml
from reconciler.reconcile.diff import StoredRow
from reconciler.spec.target import Target, is_credential_name
from reconciler.spec.task import TaskSpec
from reconciler.spec.values import ID_SEGMENT, MAX_NAME, EnvRef, id_problem

DEFAULT_OUT_DIR = "exported.d"
PLACEHOLDER_PREFIX = "EXPORTED_"  # not RECONCILER_*: engines refuse to hand their own settings to tasks


# ---------------------------------------------------------------- secrets and nulls


@dataclass
class Placeholders:
    """Environment variable names handed out in one export (unique across it)."""

    used: set[str] = field(default_factory=set)

    def name(self, task_id: str, where: str, key: str) -> str:
        stem = re.sub(r"[^A-Z0-9]+", "_", f"{task_id}_{where}_{key}".upper()).strip("_")
        base = PLACEHOLDER_PREFIX + stem
        if len(base) > MAX_NAME - 12:
            base = base[: MAX_NAME - 24] + "_" + hashlib.sha256(base.encode()).hexdigest()[:10].upper()
        name, n = base, 1
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name


def scrub_secrets(
    label: str, model: type[BaseModel], spec: dict[str, Any], names: Placeholders
) -> tuple[dict[str, Any], list[str]]:
    """A stored spec of `model` with every literal credential replaced by an `{ env = … }` placeholder, and one
    warning each: the target it is (a webhook notifier) or holds (a task's `[target]`, see scrub_target), and each
    value that is a secret as a whole (a Slack notifier's url)."""
    warnings: list[str] = []
    spec = dict(spec)
    if issubclass(model, Target):
        spec, warnings = scrub_target(label, spec, names, "")
    for key, info in fields_of(model).items():
        value = spec.get(key)
        sub = submodel(info, value) if isinstance(value, dict) else None
        if sub is not None and issubclass(sub, Target) and isinstance(value, dict):
            spec[key], found = scrub_target(label, value, names, f"{key}.")
            warnings += found
        elif info.annotation is EnvRef and isinstance(value, str):
            warnings.append(_placeholder(label, spec, ("", key, key), names))
    return spec, warnings


def _placeholder(label: str, table: dict[str, Any], at: tuple[str, str, str], names: Placeholders) -> str:
    """table[key] as an `{ env = … }` placeholder (`at`: where, key, the key's path in the file); its warning."""
    where, key, path = at
    env = names.name(label, where, key)
    table[key] = {"env": env}
    return (
        f"{label}: {path} held a literal secret, written as {{ env = {json.dumps(env)} }}; "
        "set that variable for the engines (or rename it) before applying"
    )


def scrub_target(label: str, target: dict[str, Any], names: Placeholders, at: str) -> tuple[dict[str, Any], list[str]]:
    """A target (a task's, whose keys are at `target.`, or a webhook notifier's, at the top) with every literal
    credential replaced by an `{ env = … }` placeholder, and one warning each, worded for `label`.

    Literal credentials are those the model refuses today (an older row may hold them): the
    value of a credential-looking header or query parameter, and an auth token, password or
    client secret. The values never reach a file or a message.
    """
    target = dict(target)
    warnings: list[str] = []
    for section, where in (("headers", "header"), ("query", "query")):
        table = target.get(section)
        if isinstance(table, dict):
            table = target[section] = dict(table)
            for key, value in list(table.items()):
                if isinstance(value, str) and is_credential_name(key):
                    warnings.append(_placeholder(label, table, (where, key, f"{at}{section}.{printable(key)}"), names))
    if isinstance(target.get("url"), str):
        target["url"] = _scrub_url(label, target, names, warnings, at)
    auth = target.get("auth")
    if isinstance(auth, dict):
        model = submodel(Target.model_fields["auth"], auth)
        auth = target["auth"] = dict(auth)
        warnings += [
            _placeholder(label, auth, ("auth", key, f"{at}auth.{key}"), names)
            for key, info in (fields_of(model).items() if model else ())
            if info.annotation is EnvRef and isinstance(auth.get(key), str)
        ]
    return target, warnings


def _scrub_url(label: str, target: dict[str, Any], names: Placeholders, warnings: list[str], at: str) -> str:
    """The target's url without userinfo (dropped: basic auth is its auth) and without credential query
    values (moved to its query as `{ env = … }` placeholders)."""
    url = str(target["url"])
    try:
        parts = urlsplit(url)
    except ValueError:
        return url  # validation names it when the exported file is loaded
    netloc = parts.netloc
    if "@" in netloc:
        netloc = netloc.rpartition("@")[2]
        warnings.append(f"{label}: {at}url held credentials before the host; dropped (use {at}auth)")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    secret = [k for k, _ in pairs if is_credential_name(k)]
    query = parts.query
    if secret:
        query = urlencode([(k, v) for k, v in pairs if not is_credential_name(k)])
        table = target["query"] = dict(target.get("query") or {})
        for key in secret:
            env = names.name(label, "query", key)
            table[key] = {"env": env}
            warnings.append(
                f"{label}: {at}url held a literal {printable(key)} in its query string; written as "
                f"{at}query.{printable(key)} = {{ env = {json.dumps(env)} }}; set that variable for the engines"
            )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _without_nulls(value: Any, path: str, dropped: list[str]) -> Any:
    """TOML has no null: JSON nulls (only a drifted row holds one) are left out, their paths noted."""
    if isinstance(value, dict):
        items = [(f"{path}.{k}" if path else str(k), k, v) for k, v in value.items()]
        dropped.extend(where for where, _, v in items if v is None)
        return {k: _without_nulls(v, where, dropped) for where, k, v in items if v is not None}
    if isinstance(value, list):
        items = [(f"{path}[{i}]", i, v) for i, v in enumerate(value)]
        dropped.extend(where for where, _, v in items if v is None)
        return [_without_nulls(v, where, dropped) for where, _, v in items if v is not None]
    return value


# ---------------------------------------------------------------- one file


@dataclass
class Exported:
    """One file's text (None when it cannot be written) and the warnings to print; `id` is a task's id or a
    notifier's name (the file's path below its directory, without .toml)."""

    id: str
    text: str | None
    warnings: list[str] = field(default_factory=list)


def _problems(errors: list[FileError]) -> str:
    first = errors[0]
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first.key}: {first.message}{more}"


def _written(kind: Kind[Any], normalized: dict[str, Any]) -> dict[str, Any]:
    """What of a normalized spec its file says: not what apply derives (a task's leftover moved_from pointer, a
    calendar's resolved holidays)."""
    return {key: value for key, value in normalized.items() if key not in kind.derived}


def _export_spec(
    kind: Kind[Any], file_id: str, label: str, spec: dict[str, Any], model: type[BaseModel], warnings: list[str]
) -> Exported:
    """A stored spec (its secrets already placeholders) as its kind's file, checked: a valid spec re-loads to
    the stored one (a task's moved_from aside); one that no longer validates is written as stored (`model`:
    the model that shapes it then), with a warning."""
    item, errors = check_data(kind, file_id, file_id, spec)
    if item is None:
        warnings.append(
            f"{label}: the stored spec no longer validates ({_problems(errors)}); "
            "written as stored, fix the file before plan or apply"
        )
        data = shaped(model, spec)
    else:
        expected = _written(kind, item.normalized)
        model = type(item.model())  # a tagged union's member (a webhook or a Slack notifier)
        data = shaped(model, expected)
    dropped: list[str] = []
    data = _without_nulls(data, "", dropped)
    if dropped:
        warnings.append(f"{label}: null at {', '.join(dropped)} left out (TOML has no null)")
    try:
        text = to_toml(data, model)
    except (TypeError, ValueError) as exc:
        return Exported(file_id, None, [*warnings, f"{label}: skipped, not writable as TOML ({exc})"])
    if item is not None:
        reloaded, _ = validate(kind, file_id, file_id, text)
        if reloaded is None or spec_hash(_written(kind, reloaded.normalized)) != spec_hash(expected):  # fail safe
            text = to_toml(_without_nulls(shaped(model, expected, slim=False), "", []), model)
            warnings.append(f"{label}: written with every key (the short form would not re-load identically)")
    return Exported(file_id, text, warnings)


def export_row(row: TaskRow, names: Placeholders) -> Exported:
    """The task file for one row, checked: a valid spec re-loads to the stored one (moved_from aside)."""
    problem = id_problem(row.id)
    if problem:
        return Exported(row.id, None, [f"{printable(row.id)}: skipped, the id cannot be a file name ({problem})"])
    if not isinstance(row.spec, dict):
        return Exported(row.id, None, [f"{row.id}: skipped, the stored spec is not a table (JSON object)"])
    spec, warnings = scrub_secrets(row.id, TaskSpec, _written(TASKS, row.spec), names)
    return _export_spec(TASKS, row.id, row.id, spec, TaskSpec, warnings)


def export_item(kind: NamedKind[Any], row: StoredRow, names: Placeholders) -> Exported:
    """The file of one stored item of a kind named by its files (`limits.d/NAME.toml`), checked like a task's:
    `{ env = … }` values stay references, a literal secret an older row holds becomes an `EXPORTED_…`
    placeholder, and what apply derives is left out."""
    label = f"{kind.name} {printable(row.name)}"
    if not ID_SEGMENT.fullmatch(row.name):
        return Exported(row.name, None, [f"{label}: skipped, the name cannot be a file name"])
    if not isinstance(row.spec, dict):
        return Exported(row.name, None, [f"{label}: skipped, the stored spec is not a table (JSON object)"])
    model = member_for(kind.model, row.spec)
    spec, warnings = scrub_secrets(label, model, _written(kind, row.spec), names)
    return _export_spec(kind, row.name, label, spec, model, warnings)


def one_per_name(rows: list[StoredRow], what: str) -> tuple[list[StoredRow], list[str]]:
    """The items of a kind (`what`: notifier, …) of one exported directory: each name once (rows of several sources
    share it).
    A name the sources declare alike is one file; one they declare differently is written from the first
    source (in order), with a warning naming the others."""
    by_name: dict[str, list[StoredRow]] = {}
    for row in sorted(rows, key=lambda r: (r.name, r.source)):
        by_name.setdefault(row.name, []).append(row)
    warnings = [
        f"{what} {printable(name)}: sources {', '.join(repr(r.source) for r in found)} declare it differently; "
        f"written from {found[0].source!r} (export one source at a time with --source SOURCE)"
        for name, found in by_name.items()
        if len({r.spec_hash for r in found}) > 1
    ]
    return [found[0] for found in by_name.values()], warnings


# ---------------------------------------------------------------- files


# A file below a symlinked folder lands wherever the link points, and the loader would not read it back (it
# follows no symlinked folder). A symlinked file is not written through either: see _write.
THROUGH_SYMLINK = (
    "is a symlink; export writes no file through one: remove it or choose another --out-dir (nothing was written)"
)


def check_targets(out: Path, targets: list[Path], force: bool, option: str = "--out-dir") -> None:
    """Refuse before anything is written: an existing file without --force, or a path that cannot be a file
    (`out`: the directory they go to, named as `option` names it)."""
    if os.path.lexists(out) and not out.is_dir():
        raise UserError(f"export: {option} {printable(str(out))} exists and is not a directory; nothing was written")
    for target in targets:
        for parent in target.relative_to(out).parents:
            folder = out / parent
            if parent.parts and folder.is_symlink():  # --out-dir itself may be one: the user named it
                raise UserError(f"export: {printable(str(folder))} {THROUGH_SYMLINK}")
            if os.path.lexists(folder) and not folder.is_dir():
                raise UserError(f"export: {printable(str(folder))} exists and is not a directory; nothing was written")
        if target.is_dir():
            raise UserError(f"export: {printable(str(target))} is a directory; nothing was written")
        if os.path.lexists(target) and not force:
            raise UserError(
                f"export: {printable(str(target))} already exists; pass --force to overwrite it, "
                "or choose an empty --out-dir (nothing was written)"
            )


def check_beside_dir(folder: Path, out: Path, force: bool, what: str) -> None:
    """A declared kind's files (`what`: notifiers, calendars, …) go only into a new directory (beside --out-dir,
    where `plan --tasks-dir OUT` reads them), unless --force: with the default --out-dir that is the project's own
    notifiers.d (say), whose every file the next apply would apply."""
    if os.path.lexists(folder) and not force:
        raise UserError(
            f"export: {printable(str(folder))} already exists (export writes {what} beside --out-dir "
            f"{printable(str(out))}, where plan reads them); pass an --out-dir in a new folder, e.g. "
            f"--out-dir exported/tasks.d (its {what} go to exported/{folder.name}), or --force to write into it "
            "(nothing was written)"
        )


def write_new(target: Path, text: str, force: bool) -> None:
    """Write one file: exclusively without --force; with it, by rename (a symlink is replaced, not followed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    if not force:
        with open(target, "xb") as handle:
            handle.write(data)
        return
    temporary = target.with_name(f".{target.name}.export-{os.getpid()}")  # dot names are never loaded
    try:
        temporary.write_bytes(data)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
