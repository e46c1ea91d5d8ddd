"""Logging: one line per event, text for people or JSON objects for machines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any


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
    """Route reconciler's loggers to stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("reconciler")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    # httpx logs every request line at INFO (with URLs); keep it quiet.
    logging.getLogger("httpx").setLevel(logging.WARNING)
