"""``/metrics`` (Prometheus text format) and ``/healthz``: the agent's small HTTP server, started by
``telemetry`` only when ``prometheus_port`` is set (so an agent without it never loads
``http.server``)."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .errors import ConfigError, one_line

log = logging.getLogger("se_forwarder.telemetry")


class MetricsServer:
    """``/metrics`` (Prometheus text format) and ``/healthz`` on one small HTTP server.

    It sleeps in ``select`` until a request comes (no periodic wake-ups); ``close`` wakes it with a
    connection of its own.
    """

    def __init__(self, host: str, port: int, registry: Any,
                 health: Callable[[], tuple[bool, str]]) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        try:
            self.httpd = Server((host, port), _Handler)
        except OSError as exc:
            raise ConfigError(
                f"telemetry.prometheus_port: cannot listen on {host}:{port}: "
                f"{one_line(exc)} (is another agent or exporter using it? choose another "
                "port)") from exc
        self.httpd.timeout = None
        self.httpd.registry = registry  # type: ignore[attr-defined]
        self.httpd.health = health  # type: ignore[attr-defined]
        self.port = self.httpd.server_address[1]
        self.display = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        wake_host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        self._wake = (wake_host, self.port)
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name="metrics-http", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopped:
            self.httpd.handle_request()

    def close(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            socket.create_connection(self._wake, timeout=1.0).close()
        self._thread.join(2.0)
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_version = "se-forwarder"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            try:
                self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - a scrape failure is one line, not a crash
                log.warning("metrics scrape failed: %s", exc)
                self._send(500, b"metrics collection failed\n")
        elif path == "/healthz":
            ok, line = self.server.health()  # type: ignore[attr-defined]
            self._send(200 if ok else 503, (line + "\n").encode())
        else:
            self._send(404, b"not found: /metrics or /healthz\n")

    def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - never log scrapes
        pass
