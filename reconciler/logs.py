"""Logging: one line per event, text for people or JSON objects for machines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from reconciler.clock import utcnow


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the structured `fields` passed as `extra`."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(data, default=str)


def setup_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """Route every logger (ours at `level`, libraries' warnings) to stderr in one format.

    In json mode every line on stderr is one JSON object, library warnings included.
    """
    # No caller, thread or process lookups per record (the logging HOWTO's "Optimization"): no
    # format shows them, and the engine logs every run.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    ours = logging.getLogger("reconciler")
    ours.handlers.clear()
    ours.setLevel(level)
    ours.propagate = True
    logging.captureWarnings(True)


def error_line(message: str, fmt: str) -> str:
    """A user error for stderr: the plain line, or a JSON object in json mode."""
    if fmt == "json":
        return json.dumps({"ts": utcnow().isoformat(), "level": "error", "message": message})
    return f"error: {message}"
