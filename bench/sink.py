"""A fast HTTP sink on 127.0.0.1 for engine benchmarks: answers 204, records arrival lag.

`python -m bench.sink PORT` serves until killed; a path under `/slow/` is answered after
SLOW_SECONDS; `POST /v1/traces` is an OTLP/HTTP collector that counts what it is sent (not a fire).
`GET /_stats` returns {"count", "lags": [arrival − X-Reconciler-Scheduled-For, s], "keys_unique",
"first" (arrival), "last" (arrival), "done" (last answer sent), "trace_exports", "trace_bytes"}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime

SLOW_SECONDS = 0.2


class Sink:
    def __init__(self) -> None:
        self.lags: list[float] = []
        self.keys: set[str] = set()
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.done = 0.0
        self.trace_exports = 0  # OTLP/HTTP requests (span batches) received, and their bytes
        self.trace_bytes = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                now = time.time()
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                length = int(headers.get("content-length", "0"))
                if length:
                    await reader.readexactly(length)
                if lines[0].startswith("GET /_stats"):
                    body = json.dumps(
                        {
                            "count": self.count,
                            "lags": self.lags,
                            "keys_unique": len(self.keys),
                            "first": self.first,
                            "last": self.last,
                            "done": self.done,
                            "trace_exports": self.trace_exports,
                            "trace_bytes": self.trace_bytes,
                        }
                    ).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                elif lines[0].startswith("GET /_count"):
                    body = str(self.count).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                elif lines[0].startswith("POST /v1/traces"):
                    self.trace_exports += 1
                    self.trace_bytes += length
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
                    )
                elif lines[0].startswith("POST /_reset"):
                    self.__init__()  # type: ignore[misc]
                    writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                else:
                    self.count += 1
                    self.first = self.first or now
                    self.last = now
                    if "idempotency-key" in headers:
                        self.keys.add(headers["idempotency-key"])
                    scheduled = headers.get("x-reconciler-scheduled-for")
                    if scheduled:
                        self.lags.append(now - datetime.fromisoformat(scheduled).timestamp())
                    if lines[0].split(" ")[1].startswith("/slow/"):
                        await asyncio.sleep(SLOW_SECONDS)
                    writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                    self.done = time.time()
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def main(port: int) -> None:
    sink = Sink()
    server = await asyncio.start_server(sink.handle, "127.0.0.1", port, backlog=1024)
    print(f"http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
