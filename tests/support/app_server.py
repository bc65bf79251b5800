"""A VM's application as the tests play it: an HTTP(S) health endpoint and a TCP port on 127.0.0.1
whose answers the test sets (``status``), stops and starts again on the same port."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .ports import free_port
from .receiver import TlsFiles


class AppServer:
    """``GET /healthz`` answers ``status`` (200 until told otherwise); ``hang`` delays answers;
    with ``tls`` (``receiver.make_tls``), over HTTPS with that server certificate."""

    def __init__(self, port: int | None = None, tls: TlsFiles | None = None) -> None:
        self.port = port or free_port()
        self.tls = tls
        self.status = 200
        self.hang = 0.0
        self.requests: list[str] = []
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/healthz"

    def start(self) -> AppServer:
        app = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                with app._lock:
                    app.requests.append(self.path)
                if app.hang:
                    threading.Event().wait(app.hang)
                body = b"ok\n" if app.status < 400 else b"not ready\n"
                self.send_response(app.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls.server_cert, self.tls.server_key)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, name="app-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> AppServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TcpPort:
    """A listening TCP socket on 127.0.0.1 that accepts (and closes) every connection."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._sock: socket.socket | None = None
        self._stop = threading.Event()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpPort:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(16)
        sock.settimeout(0.2)
        self._sock, self._stop = sock, threading.Event()

        def accept() -> None:
            while not self._stop.is_set():
                try:
                    conn, _ = sock.accept()
                except (TimeoutError, OSError):
                    continue
                conn.close()

        threading.Thread(target=accept, name="tcp-port", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            # a listening socket stays open while another thread waits in accept(): wake it
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
            self._sock = None

    def __enter__(self) -> TcpPort:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
