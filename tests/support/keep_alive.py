"""A keep-alive HTTP/1.1 server on loopback for the HTTP clients' tests."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Server:
    """HTTP/1.1 on loopback; counts the connections it accepted. ``close_after_each`` answers
    every request with keep-alive and then closes the connection anyway (a server's idle timeout)."""

    def __init__(self, body: bytes = b"{}", close_after_each: bool = False) -> None:
        self.connections = 0
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                owner.connections += 1
                super().setup()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                if close_after_each:
                    self.wfile.flush()
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
