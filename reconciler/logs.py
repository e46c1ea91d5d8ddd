"""Logging: one line per event, text for people or JSON objects for machines."""

from __future__ import annotations

import json
import logging
import sys
import time
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


class TextFormatter(logging.Formatter):
    """`asctime level logger: message`; the time text is made once per second, not per record
    (the engine logs every run)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second[0]:
            self._second = (second, time.strftime("%Y-%m-%d %H:%M:%S", self.converter(record.created)))
        return f"{self._second[1]},{int(record.msecs):03d}"


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
        handler.setFormatter(TextFormatter())
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
