"""A file's digest: its bytes, its id and everything else its parse depends on. The same digest, the same parse."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

# Bump when a change to spec/, files/ or schedule/ changes what some file parses to, or
# whether it parses: every file's digest changes with it, so each file is parsed again once.
PARSER_VERSION = 1


@cache
def parser_key() -> bytes:
    """Everything besides a file's id and bytes that its parse depends on: the versions of reconciler,
    its parser, Python, pydantic and croniter, and of the time zone data (a zone's new rules can put
    a `once` into a gap)."""
    import sys
    import zoneinfo

    import pydantic
    from croniter import croniter

    from reconciler import __version__

    # croniter has no __version__, and importlib.metadata costs `validate` 40 ms to import: its code stands in.
    cron_file = sys.modules[croniter.__module__].__file__
    cron_code = hashlib.sha256(Path(cron_file).read_bytes()).hexdigest() if cron_file else "unknown"
    # The package's own code, every module of every subpackage (the models are in spec/, not beside this
    # file): a change that forgets PARSER_VERSION still re-parses.
    package = Path(__file__).parent.parent
    code = hashlib.sha256(b"".join(path.read_bytes() for path in sorted(package.rglob("*.py")))).hexdigest()
    parts = [f"reconciler {__version__} parser {PARSER_VERSION} code {code}", f"python {sys.version}"]
    parts += [f"pydantic {pydantic.VERSION}", f"croniter {cron_code}"]
    for folder in zoneinfo.TZPATH:  # the first folder with an index names the system's tz data version
        index = Path(folder, "tzdata.zi")
        if index.is_file():
            with index.open() as lines:
                parts.append(f"{folder} {lines.readline().strip()}")
            break
    try:
        import tzdata  # type: ignore[import-untyped]  # the fallback ZoneInfo reads when a zone is not in TZPATH

        parts.append(f"tzdata {tzdata.IANA_VERSION}")
    except ImportError:
        pass
    return "\n".join(parts).encode() + b"\0"


def file_digest(task_id: str, data: bytes) -> str:
    """sha256 of a task file's bytes, its id and parser_key(): the same digest, the same parse."""
    return hashlib.sha256(parser_key() + task_id.encode() + b"\0" + data).hexdigest()
