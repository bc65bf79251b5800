"""The simulator's HTTP plumbing: a threading server that can cut its connections, and the
handler that sends each request to the IMDS routes, the managed-identity token or the control API.

It serves a ``ServedHost`` (``server.SimulatorServer``): the routes' ``SimulatorHost`` plus the
two things only dispatching needs, which VM a path is for and the control API.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from se_forwarder.simulator import identity
from se_forwarder.simulator.host import SimulatorHost
from se_forwarder.simulator.imds_routes import IMDS_ROUTES, ImdsHandler

log = logging.getLogger("se_forwarder.simulator")

MAX_BODY = 1024 * 1024


class ServedHost(SimulatorHost, Protocol):
    def route_vm(self, path: str) -> tuple[str | None, str, bool]:
        """(VM name or None, the path after its prefix, whether the path had a /vm/ prefix)."""
        ...

    def control(self, method: str, sub: str, query: Mapping[str, str], body: bytes,
                vm: str | None) -> tuple[int, Any]:
        """A control API call: (HTTP status, JSON body)."""
        ...


class HttpServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that remembers open connections, so ``stop()`` can cut them."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: ServedHost) -> None:
        self.owner = owner
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a killed agent, a timeout) is normal here, not a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)

    def cut_connections(self) -> None:
        with self._open_lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class _Handler(ImdsHandler):
    """One HTTP request: routes to the IMDS part or the control API."""

    protocol_version = "HTTP/1.1"
    server_version = "se-forwarder-imds-simulator"
    timeout = 30  # idle keep-alive connections are closed after this
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    server: HttpServer

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        log.debug("%s %s", self.client_address[0], format % args)

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    # --- plumbing ------------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        try:
            body = self._read_body()
            if body is None:
                return
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            vm, rest, prefixed = self.server.owner.route_vm(unquote(parts.path))
            if vm is None:
                self._json(404, {"error": f"Not found. No VM {rest!r} on this simulator."})
            elif rest == "/control" or rest.startswith("/control/"):
                self._control(
                    method, rest[len("/control") :].rstrip("/"), query, body, vm if prefixed else None
                )
            elif rest.rstrip("/") == identity.TOKEN_PATH and self.owner.azure is not None:
                self._json(*self.owner.azure.identity_token(query, self.headers.get("Metadata")))
            elif rest.rstrip("/") in IMDS_ROUTES:
                self._imds(method, IMDS_ROUTES[rest.rstrip("/")], vm, query, body)
            else:
                self._json(404, {"error": "Not found"})
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            self._json(411, {"error": "Length Required: send a Content-Length"})
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._json(413 if length > 0 else 400, {"error": "Bad request. Bad Content-Length."})
            return None
        return self.rfile.read(length) if length else b""

    # --- control API ---------------------------------------------------------------------------

    def _control(self, method: str, sub: str, query: dict[str, str], body: bytes, vm: str | None) -> None:
        try:
            status, data = self.server.owner.control(method, sub, query, body, vm)
        except KeyError as exc:
            status, data = 404, {"error": str(exc.args[0]) if exc.args else "not found"}
        except (ValueError, TypeError) as exc:  # incl. ScenarioError, FaultError, ApprovalError
            status, data = 400, {"error": str(exc)}
        if status == 204:
            self._send(204)
        else:
            self._json(status, data)
