"""The simulated ARM on a real HTTPS port: TLS with the simulator's test CA, bound to loopback.

Each request goes to ``arm.ArmApi.handle``; this module owns only the socket, TLS and HTTP/1.1.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from se_forwarder.simulator.arm import ArmApi
from se_forwarder.simulator.tls import ServerCert, server_context

log = logging.getLogger("se_forwarder.simulator")
MAX_BODY = 1024 * 1024


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: ArmApi, cert: ServerCert) -> None:
        self.api = api
        super().__init__(address, _Handler)
        self.socket = server_context(cert).wrap_socket(
            self.socket, server_side=True, do_handshake_on_connect=False
        )

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up or fails the TLS handshake is normal here, not a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            log.debug("ARM simulator: connection from %s ended: %s", client_address[0], exc)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "se-forwarder-arm-simulator"
    timeout = 30
    server: _Server

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        log.debug("ARM %s %s", self.client_address[0], format % args)

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._reply(
                413 if length > 0 else 400,
                {},
                {"error": {"code": "InvalidRequestContent", "message": "Bad Content-Length."}},
            )
            return
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, extra, data = self.server.api.handle(
            method, unquote(parts.path), query, headers, body, self.client_address[0]
        )
        self._reply(status, extra, data)

    def _reply(self, status: int, headers: dict[str, str], data: Any) -> None:
        body = json.dumps(data).encode("utf-8")
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-ms-request-id", "00000000-0000-0000-0000-000000000000")
        self.end_headers()
        self.wfile.write(body)


class ArmHttpServer:
    """``ArmApi`` served over HTTPS on ``host:port`` (port 0: a free one)."""

    def __init__(self, api: ArmApi, cert: ServerCert, host: str = "127.0.0.1", port: int = 0) -> None:
        self.api, self.cert, self.host, self._port = api, cert, host, port
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._httpd is not None:
            return
        self._httpd = _Server((self.host, self._port), self.api, self.cert)
        self._port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"arm-sim-{self._port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self._port}"
