"""A file's text as TOML data: the parse, values no model may see (and their harmless copies), and the
line each key is on."""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterator
from typing import Any

from reconciler.files.problems import FileError

MAX_FILE_BYTES = 1 << 20  # 1 MiB: a task file is a few hundred bytes; this bounds parse time and stored size
MAX_DEPTH = 32  # nesting of tables and arrays: bounds every recursive step after the parse
INT64 = 1 << 63  # TOML integers are 64-bit (tomllib reads any size)
TOO_BIG = f"larger than {MAX_FILE_BYTES // 1024} KiB; a task or notifier file is one small TOML document"
BOM = "\ufeff"  # a UTF-8 byte order mark, as some Windows editors write: not part of the text
NUL_MESSAGE = "contains a NUL character (\\u0000), which PostgreSQL cannot store; remove it"


def parse_toml(display: str, source: str) -> tuple[dict[str, Any] | None, list[FileError]]:
    """A file's text as TOML data, or the one-line error that says why it is not."""
    if len(source) > MAX_FILE_BYTES:
        return None, [FileError(display, 0, "(file)", TOO_BIG)]
    try:
        return tomllib.loads(source), []
    except RecursionError:
        line = _deep_line(source)
        return None, [FileError(display, line, "toml", f"nested more than {MAX_DEPTH} levels deep; flatten it")]
    except tomllib.TOMLDecodeError as exc:
        text = str(exc)
        where = re.search(r"\(at line (\d+), column (\d+)\)", text)
        line = int(where.group(1)) if where else 0
        if "(at end of document)" in text:
            line = len(source.splitlines()) or 1
        reason = re.sub(r"\s*\(at .*\)$", "", text)
        col = f", column {where.group(2)}" if where else ""
        return None, [FileError(display, line, "toml", f"syntax error{col}: {reason}; fix the TOML syntax")]
    except ValueError:  # int() refuses a literal of more than 4300 digits
        where = re.search(r"\d{4300}", source)
        line = source.count("\n", 0, where.start()) + 1 if where else 0
        return None, [FileError(display, line, "toml", "integer out of range; TOML integers are 64-bit")]


def _deep_line(source: str) -> int:
    """The line where bracket nesting first exceeds MAX_DEPTH (strings not excluded: a hint for the error)."""
    depth = 0
    for index, char in enumerate(source):
        depth += char in "[{"
        depth -= char in "]}"
        if depth > MAX_DEPTH:
            return source.count("\n", 0, index) + 1
    return 0


def hostile_values(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """(key path, message) for values no model may see: too deep, NUL, NaN/infinity, integers beyond 64 bits."""
    if len(path) > MAX_DEPTH:
        yield path, f"nested more than {MAX_DEPTH} levels deep; flatten it"
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\0" in key:
                yield (*path, key), "the key " + NUL_MESSAGE
            else:
                yield from hostile_values(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from hostile_values(item, (*path, str(index)))
    elif isinstance(value, str):
        if "\0" in value:
            yield path, NUL_MESSAGE
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield path, f"{value} is not a finite number; write a number such as 1.5"
    elif isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        yield path, "integer out of range; TOML integers are 64-bit"


def defused(value: Any, depth: int = 0) -> Any:
    """A copy of parsed TOML with each value `hostile_values` reports made harmless, so the models check the rest."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, dict):
        return {key: defused(item, depth + 1) for key, item in value.items() if "\0" not in key}
    if isinstance(value, list):
        return [defused(item, depth + 1) for item in value]
    if isinstance(value, str):
        return value.replace("\0", "")
    if isinstance(value, float) and not math.isfinite(value):
        return 0.0
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        return 0
    return value


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEYVAL = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")


def _split_key(text: str) -> list[str]:
    parts = re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", text)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


def key_lines(source: str) -> dict[tuple[str, ...], int]:
    """Map each dotted key path found in a TOML text to its 1-based line (tables and keys). The N-th table of an
    array of tables (`[[window]]`) is `window.N` (0-based, as the models' error locations have it), and its
    first one `window` too."""
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    arrays: dict[tuple[str, ...], int] = {}  # an array of tables (path as written) → index of its last table
    for number, line in enumerate(source.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            written = tuple(_split_key(header.group(1)))
            table = _indexed(written, arrays)
            if line.lstrip().startswith("[["):
                arrays[written] = arrays.get(written, -1) + 1
                found.setdefault(table, number)  # `window`: the first table of the array
                table = (*table, str(arrays[written]))
            found.setdefault(table, number)
            continue
        keyval = _KEYVAL.match(line)
        if keyval:
            path = table + tuple(_split_key(keyval.group(1)))
            found.setdefault(path, number)
            # Keys of an inline table on this line: `headers = { X-Api-Key = {...} }`.
            rest = line[keyval.end() :]
            for inner in re.finditer(r"""([A-Za-z0-9_-]+|"[^"]*")\s*=""", rest):
                found.setdefault((*path, inner.group(1).strip("\"'")), number)
    return found


def _indexed(written: tuple[str, ...], arrays: dict[tuple[str, ...], int]) -> tuple[str, ...]:
    """A table header's path with the index of the current table of each array of tables it lies in:
    `[window.sub]` after the second `[[window]]` is `window.1.sub`."""
    out: list[str] = []
    for size, part in enumerate(written, start=1):
        out.append(part)
        if size < len(written) and written[:size] in arrays:
            out.append(str(arrays[written[:size]]))
    return tuple(out)


def locate(lines: dict[tuple[str, ...], int], key: tuple[str, ...]) -> int:
    """The line of the longest prefix of `key` present in the file, else 0."""
    for size in range(len(key), 0, -1):
        if key[:size] in lines:
            return lines[key[:size]]
    return 0
