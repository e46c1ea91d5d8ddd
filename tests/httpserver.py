"""A real HTTP server on 127.0.0.1 for tests and benchmarks: records every request, answers by script.

Run standalone (`python -m tests.httpserver PORT`) for subprocess tests and benches; it then
serves `GET /_requests` with what it recorded.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Script:
    """How to answer one path: statuses are used in turn (the last repeats)."""

    statuses: list[int] = field(default_factory=lambda: [200])
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    calls: int = 0


class Recorder:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.scripts: dict[str, Script] = {}
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}
        # OAuth2 token endpoint state
        self.tokens_issued = 0
        self.token_lifetime = 3600
        self.valid_tokens: set[str] = set()
        self.client = ("scheduler", "client-secret-value")

    def script(self, path: str, **kwargs: Any) -> Script:
        self.scripts[path] = Script(**kwargs)
        return self.scripts[path]

    def paths(self, prefix: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path.startswith(prefix)]


def make_handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?")[0]
            if path == "/_requests":
                with recorder.lock:
                    data = [{"path": r.path, "headers": r.headers, "at": r.at} for r in recorder.requests]
                return self._send(200, json.dumps(data).encode(), {"Content-Type": "application/json"})
            with recorder.lock:
                recorder.requests.append(Recorded(self.command, path, dict(self.headers.items()), body, time.time()))
                recorder.in_flight[path] = recorder.in_flight.get(path, 0) + 1
                recorder.max_in_flight[path] = max(recorder.max_in_flight.get(path, 0), recorder.in_flight[path])
            open_ = True  # counted in flight until its answer starts: the client may send its next one then

            def answered() -> None:
                nonlocal open_
                with recorder.lock:
                    if open_:
                        recorder.in_flight[path] -= 1
                        open_ = False

            try:
                if path == "/oauth/token":
                    return self._token()
                script = recorder.scripts.get(path) or Script()
                with recorder.lock:
                    status = script.statuses[min(script.calls, len(script.statuses) - 1)]
                    script.calls += 1
                if script.delay:
                    time.sleep(script.delay)
                if path.startswith("/protected"):
                    token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    if token not in recorder.valid_tokens:
                        status = 401
                answered()
                self._send(status, script.body, script.headers)
            finally:
                answered()

        def _token(self) -> None:
            expected = base64.b64encode(f"{recorder.client[0]}:{recorder.client[1]}".encode()).decode()
            if self.headers.get("Authorization") != f"Basic {expected}":
                return self._send(401, b'{"error":"invalid_client"}', {"Content-Type": "application/json"})
            with recorder.lock:
                recorder.tokens_issued += 1
                token = f"token-{recorder.tokens_issued}"
                recorder.valid_tokens.add(token)
            payload = {"access_token": token, "token_type": "Bearer", "expires_in": recorder.token_lifetime}
            self._send(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    return Handler


class _Server(ThreadingHTTPServer):
    # The default listen backlog (5) overflows when an engine opens dozens of connections at once.
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request (the chaos test's kill -9) is expected, not worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serving(port: int = 0) -> Iterator[tuple[str, Recorder]]:
    """Serve on 127.0.0.1 in a thread; yields (base URL, recorder)."""
    recorder = Recorder()
    server = _Server(("127.0.0.1", port), make_handler(recorder))
    server.daemon_threads = True
    # A short poll interval: shutdown() waits for it, and every test using the server pays it once.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorder
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    with serving(int(sys.argv[1])) as (url, _):
        print(url, flush=True)
        threading.Event().wait()
