"""Hostile HTTP targets on 127.0.0.1, on raw asyncio sockets so every byte is under control.

Paths (the status may be chosen with `?status=N`):
  /nul          a body with NUL and invalid UTF-8 bytes
  /endless      a chunked body that never ends (bounded here at ENDLESS_BYTES)
  /trickle      headers, then one body byte per second (TRICKLE_BYTES of them)
  /echo         the request head and body echoed back (headers, credentials and all)
  /cut          reads the request, then closes the connection without an answer
  /retry-after  503 with Retry-After: 3600
anything else   204

Run standalone (`python -m tests.hostile PORT`) for subprocess tests; `GET /_stats` then
returns the counters as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

ENDLESS_BYTES = 2 * 1024**3  # every load loop is bounded: 2 GiB, far more than any client should read
TRICKLE_BYTES = 60
HEAD_LIMIT = 64 * 1024


@dataclass
class Stats:
    """Requests per path, and the most in flight at once per path (max_running_instances checks)."""

    requests: dict[str, int] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    max_in_flight: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, path: str) -> None:
        with self.lock:
            self.requests[path] = self.requests.get(path, 0) + 1
            self.in_flight[path] = self.in_flight.get(path, 0) + 1
            self.max_in_flight[path] = max(self.max_in_flight.get(path, 0), self.in_flight[path])

    def leave(self, path: str) -> None:
        with self.lock:
            self.in_flight[path] -= 1

    def as_json(self) -> bytes:
        with self.lock:
            return json.dumps({"requests": self.requests, "max_in_flight": self.max_in_flight}).encode()


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    body = await reader.readexactly(length) if length else b""
    target = head.split(b" ", 2)[1].decode("latin-1")
    return target, head + body


async def _answer(path: str, status: int | None, request: bytes, writer: asyncio.StreamWriter) -> None:
    if path == "/nul":
        body = b"before\x00after \xff\xfe invalid utf-8 \x00"
        writer.write(_head(status or 200, {"Content-Length": str(len(body))}) + body)
    elif path == "/endless":
        writer.write(_head(status or 200, {"Transfer-Encoding": "chunked"}))
        chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
        for _ in range(ENDLESS_BYTES // 65536):
            writer.write(chunk)
            await writer.drain()
    elif path == "/trickle":
        writer.write(_head(status or 200, {"Content-Length": str(TRICKLE_BYTES)}))
        for _ in range(TRICKLE_BYTES):
            await writer.drain()
            await asyncio.sleep(1)
            writer.write(b".")
    elif path == "/echo":
        writer.write(_head(status or 200, {"Content-Length": str(len(request))}) + request)
    elif path == "/cut":
        return
    elif path == "/retry-after":
        writer.write(_head(status or 503, {"Retry-After": "3600", "Content-Length": "0"}))
    else:
        writer.write(_head(status or 204, {"Content-Length": "0"}))
    await writer.drain()


def make_handler(stats: Stats) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:  # keep-alive, as real servers do
                request = await _read_request(reader)
                if request is None:
                    break
                target, raw = request
                parts = urlsplit(target)
                if parts.path == "/_stats":
                    body = stats.as_json()
                    writer.write(_head(200, {"Content-Length": str(len(body))}) + body)
                    await writer.drain()
                    continue
                status = parse_qs(parts.query).get("status")
                stats.enter(parts.path)
                try:
                    await _answer(parts.path, int(status[0]) if status else None, raw, writer)
                finally:
                    stats.leave(parts.path)
                if parts.path in ("/cut", "/endless", "/trickle"):
                    break
        writer.close()

    return handle


@contextmanager
def hostile_serving(port: int = 0) -> Iterator[tuple[str, Stats]]:
    """Serve the hostile paths on 127.0.0.1 from a thread; yields (base URL, stats)."""
    stats = Stats()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, asyncio.base_events.Server] = {}

    async def start() -> None:
        holder["server"] = await asyncio.start_server(make_handler(stats), "127.0.0.1", port, limit=HEAD_LIMIT)
        ready.set()

    def run() -> None:
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30), "hostile server did not start"
    bound = holder["server"].sockets[0].getsockname()[1]

    async def shutdown() -> None:
        holder["server"].close()
        current = asyncio.current_task()
        handlers = [task for task in asyncio.all_tasks() if task is not current]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        loop.stop()

    try:
        yield f"http://127.0.0.1:{bound}", stats
    finally:
        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        thread.join(10)


if __name__ == "__main__":
    with hostile_serving(int(sys.argv[1])) as (url, _):
        print(url, flush=True)
        while True:
            time.sleep(3600)
