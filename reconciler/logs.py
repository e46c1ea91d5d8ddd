"""Logging: one line per event, text for people or JSON objects for machines."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any, TextIO

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
        # The whole traceback in one field (its newlines escaped by JSON): the last line alone says what
        # failed but not where, and a bug is logged for its stack.
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(data, default=str)


class TextFormatter(logging.Formatter):
    """`asctime level logger: message`; the time text is made once per second, not per record
    (the engine logs every run)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        # The format above without logging's general machinery (a dict lookup per field): run lines.
        record.message = record.getMessage()
        return f"{self.formatTime(record)} {record.levelname} {record.name}: {record.message}"

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second[0]:
            self._second = (second, time.strftime("%Y-%m-%d %H:%M:%S", self.converter(record.created)))
        return f"{self._second[1]},{int(record.msecs):03d}"


class ConsoleFormatter(logging.Formatter):
    """`[HH:MM:SS] warning: message` (UTC): `up`'s log lines in the form of its run and apply lines."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.gmtime(record.created))
        line = f"[{stamp}] {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class TurnHandler(logging.StreamHandler[TextIO]):
    """Writes the lines logged during one event-loop turn together, at the end of the turn: the
    engine logs a line per run, and one write and flush per line was a tenth of a fire's CPU.

    Outside a running loop (another thread, before and after `asyncio.run`) a line is written at
    once, after those still pending, so the order holds. No line waits for a later turn: a line
    is at most one turn late; `kill -9` can lose that turn's lines.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._pending: list[str] = []
        self._due: object = None  # the loop a flush is scheduled on (one that stopped first runs none)

    def emit(self, record: logging.LogRecord) -> None:  # called with the handler's lock held
        try:
            self._pending.append(self.format(record) + self.terminator)
        except Exception:
            self.handleError(record)
            return
        aio = sys.modules.get("asyncio")  # not imported: no loop runs (`--version` need not import it)
        try:
            loop = aio.get_running_loop() if aio is not None else None
        except RuntimeError:
            loop = None
        if loop is None:
            self.flush()
            return
        if self._due is not loop:
            self._due = loop
            loop.call_soon(self.flush)

    def flush(self) -> None:
        with self.lock or contextlib.nullcontext():
            self._due = None
            if self._pending:
                text = "".join(self._pending)
                self._pending.clear()
                try:
                    self.stream.write(text)
                    self.stream.flush()
                except (OSError, ValueError):  # stderr closed or gone: nothing to tell it with
                    pass


def flush_logs() -> None:
    """Write what the handlers hold (before exit, or before reading stderr in-process)."""
    for handler in logging.getLogger().handlers:
        handler.flush()


def setup_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """Route every logger (ours at `level`, libraries' warnings) to stderr in one format.

    In json mode every line on stderr is one JSON object, library warnings included; `console` is `up`'s
    form for people (see ConsoleFormatter).
    """
    # No caller, thread or process lookups per record (the logging HOWTO's "Optimization"): no
    # format shows them, and the engine logs every run.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = TurnHandler(sys.stderr)
    formatters = {"json": JsonFormatter, "console": ConsoleFormatter}
    handler.setFormatter(formatters.get(fmt, TextFormatter)())
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
