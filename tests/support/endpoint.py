"""A tiny real HTTP endpoint on 127.0.0.1 that records every request and answers with scripted
statuses (OTLP collectors, health checks, anything that only needs a status back)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class HttpEndpoint:
    """A real HTTP server on 127.0.0.1 recording every request; it answers with the ``script``ed
    statuses first, then always ``status``."""

    def __init__(self, status: int = 200, script: Iterable[int] = ()) -> None:
        self.status = status
        self.script = list(script)
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with owner._lock:
                    owner.requests.append(Received(self.command, self.path,
                                                   dict(self.headers.items()), body))
                    status = owner.script.pop(0) if owner.script else owner.status
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_OPTIONS = do_PUT = _any  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def posts(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and (path is None or r.path == path)]

    def __enter__(self) -> HttpEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
