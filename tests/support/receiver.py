"""A real webhook receiver for tests and benchmarks: HTTP or HTTPS on 127.0.0.1.

Every POST is parsed with the ``cloudevents`` SDK in the mode its headers announce (structured,
binary or batch) and its Standard Webhooks signature is verified with the ``standardwebhooks``
library against every secret it was given; anything that does not parse or verify is recorded in
``errors``. A request whose body never fully arrives (the client died, or ``stop`` cut it) is
dropped unanswered, as any HTTP server drops it, and only counted in ``cut``. Replies are scripted
per request (``script(503, 503, 200)``) and default to 200. The receiver can be stopped (port
closed, open connections cut) and started again on the same port. The TLS helpers make a throwaway
CA and a server certificate for 127.0.0.1 signed by it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cloudevents.core.bindings.http import HTTPMessage, from_binary, from_structured
from cloudevents.core.formats.json import JSONFormat
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
_FORMAT = JSONFormat()


# -- TLS material -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_tls(directory: Path, hosts: Iterable[str] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A self-signed CA and a server certificate for ``hosts`` signed by it, as PEM files (the
    simulator's per-run test CA, ``se_forwarder.simulator.tls``)."""
    from se_forwarder.simulator.tls import TestCa

    directory.mkdir(parents=True, exist_ok=True)
    ca = TestCa.create("se-forwarder test CA")
    server = ca.issue_server(hosts, common_name="receiver")
    files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    ca.write_ca(files.ca_cert)
    files.server_cert.write_bytes(server.cert_pem)
    files.server_key.write_bytes(server.key_pem)
    return files


# -- what the receiver saw ----------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """What to answer to one request."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0  # seconds to wait before answering (read timeouts)


@dataclass
class Request:
    """One request as received, with the events parsed from it and the answer given."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    at: float  # when the request was read
    status: int = 0
    answered_at: float = 0.0  # when the reply was sent
    mode: str = ""  # structured | binary | batch (POSTs only)
    events: list[Any] = field(default_factory=list)  # cloudevents.core.v1.event.CloudEvent
    verified_with: list[int] = field(default_factory=list)  # indexes of the secrets that verify

    @property
    def webhook_id(self) -> str | None:
        return self.headers.get("webhook-id")

    @property
    def ids(self) -> list[str]:
        return [e.get_id() for e in self.events]


class Receiver:
    """A webhook receiver over real HTTP(S) on 127.0.0.1; see the module docstring."""

    def __init__(
        self,
        *,
        tls: TlsFiles | None = None,
        secrets: Iterable[str] = (),
        path: str = "/hook",
        allow_origin: str | None = None,
        allowed_rate: str | None = None,
    ) -> None:
        self.tls = tls
        self.secrets = list(secrets)
        self.path = path
        self.allow_origin = allow_origin  # handshake answer; None: OPTIONS gets 405
        self.allowed_rate = allowed_rate
        self.requests: list[Request] = []
        self.errors: list[str] = []
        self.cut = 0  # requests whose body never fully arrived: neither served nor recorded
        self.port = 0
        self._script: deque[Reply] = deque()
        self._routes: dict[str, Reply] = {}
        self._responder: Callable[[Request], Reply | None] | None = None
        self._lock = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._open: set[socket.socket] = set()

    # -- life cycle -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}{self.path}"

    def start(self) -> Receiver:
        """Listen (again on the same port after a stop)."""
        server = _Server(("127.0.0.1", self.port), _Handler, self)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="webhook-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the port and cut every open connection (a receiver that is down)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._open.clear()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting ------------------------------------------------------------------------------
    def script(self, *replies: int | Reply) -> None:
        """Answer the next POSTs to the hook path with these, in order; 200 after them."""
        with self._lock:
            self._script.extend(r if isinstance(r, Reply) else Reply(r) for r in replies)

    def route(self, path: str, reply: Reply) -> None:
        """Answer every request to ``path`` (other than the hook path) with ``reply``."""
        self._routes[path] = reply

    def respond_with(self, responder: Callable[[Request], Reply | None]) -> None:
        """Decide each POST's reply from the parsed request (None: the script / 200)."""
        self._responder = responder

    # -- observations ---------------------------------------------------------------------------
    def posts(self, path: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.requests
                    if r.method == "POST" and r.path.split("?")[0] == (path or self.path)]

    def accepted(self) -> list[Request]:
        """POSTs answered with a 2xx, in arrival order."""
        return [r for r in self.posts() if 200 <= r.status < 300]

    def accepted_ids(self) -> list[str]:
        """CloudEvent ids of the accepted deliveries, in arrival order (repeats kept)."""
        return [i for r in self.accepted() for i in r.ids]

    def wait_for(self, count: int, timeout: float) -> list[str]:
        """Wait until ``count`` distinct events were accepted; their ids in arrival order."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                ids = self.accepted_ids()
                if len(set(ids)) >= count or time.monotonic() >= deadline:
                    return ids
                self._lock.wait(min(0.2, max(0.0, deadline - time.monotonic())))

    # -- handling (called from the server's threads) -------------------------------------------
    def _handle(self, request: Request) -> Reply:
        path = request.path.split("?")[0]
        if request.method == "OPTIONS" and path == self.path:
            return self._handshake(request)
        if path != self.path:
            return self._routes.get(path, Reply(404, body=b"no such hook"))
        if request.method != "POST":
            return Reply(405)
        self._parse(request)
        reply = self._responder(request) if self._responder else None
        if reply is None:
            with self._lock:
                reply = self._script.popleft() if self._script else Reply(200)
        return reply

    def _handshake(self, request: Request) -> Reply:
        origin = request.headers.get("webhook-request-origin")
        if self.allow_origin is None or origin is None:
            return Reply(405, body=b"no handshake here")
        if self.allow_origin not in ("*", origin):
            return Reply(403, body=b"origin not allowed")
        headers = {"WebHook-Allowed-Origin": self.allow_origin}
        if self.allowed_rate is not None:
            headers["WebHook-Allowed-Rate"] = self.allowed_rate
        return Reply(200, headers)

    def _parse(self, request: Request) -> None:
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        has_ce_headers = any(k.startswith("ce-") for k in request.headers)
        message = HTTPMessage(request.headers, request.body)
        try:
            if content_type == STRUCTURED:
                request.mode = "structured"
                if has_ce_headers:
                    self.errors.append(f"structured delivery with ce-* headers: {request.headers}")
                request.events = [from_structured(message, _FORMAT)]
            elif content_type == BATCH:
                request.mode = "batch"
                items = json.loads(request.body)
                if not isinstance(items, list):
                    raise ValueError("a batch must be a JSON array")
                request.events = [_FORMAT.read(None, json.dumps(item)) for item in items]
            elif has_ce_headers:
                request.mode = "binary"
                request.events = [from_binary(message, _FORMAT)]
            else:
                raise ValueError(f"not a CloudEvents request (content-type {content_type!r})")
        except Exception as exc:  # noqa: BLE001 - recorded for the test to assert on
            self.errors.append(f"unparsable delivery: {type(exc).__name__}: {exc}")
        for index, secret in enumerate(self.secrets):
            try:
                Webhook(secret).verify(request.body, request.headers, json_parse=False)
                request.verified_with.append(index)
            except WebhookVerificationError as exc:
                self.errors.append(f"signature does not verify with secret {index}: {exc}")

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)
            self._lock.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, receiver: Receiver) -> None:
        self.receiver = receiver
        self.context: ssl.SSLContext | None = None
        if receiver.tls is not None:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(receiver.tls.server_cert, receiver.tls.server_key)
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Runs in the connection's thread: the TLS handshake happens here, not in accept()."""
        conn = request
        self._track(conn, True)
        try:
            if self.context is not None:
                try:
                    conn = self.context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    return  # the client refused our certificate: nothing to serve
                finally:
                    self._track(request, False)
                self._track(conn, True)
            super().finish_request(conn, client_address)
        finally:
            self._track(conn, False)
            if conn is not request:
                conn.close()

    def _track(self, conn: socket.socket, opened: bool) -> None:
        with self.receiver._lock:
            if opened:
                self.receiver._open.add(conn)
            else:
                self.receiver._open.discard(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # connections cut by stop() are expected


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the client died or stop() cut it mid-body: an HTTP server drops it
            self.close_connection = True
            with self.server.receiver._lock:
                self.server.receiver.cut += 1
            return
        request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                          body, time.time())
        receiver = self.server.receiver
        reply = receiver._handle(request)
        if reply.delay:
            time.sleep(reply.delay)
        request.status = reply.status
        receiver._record(request)
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if reply.body:
            self.wfile.write(reply.body)
        self.wfile.flush()
        request.answered_at = time.time()

    do_POST = _serve
    do_OPTIONS = _serve
    do_GET = _serve
