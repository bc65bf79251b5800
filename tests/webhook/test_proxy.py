"""Receivers beyond this machine are reached through the environment's proxy (CONNECT for
https), with TLS verified end to end through the tunnel; loopback never goes through a proxy."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator

import pytest

from se_forwarder.http_client import Origin, environ_proxy


class ConnectProxy:
    """A minimal HTTP CONNECT proxy on loopback; remembers the targets it was asked for."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += client.recv(4096)
        target = head.split(b" ")[1].decode()
        self.targets.append(target)
        host, _, port = target.rpartition(":")
        upstream = socket.create_connection(("127.0.0.1" if host == "localhost" else host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    p = ConnectProxy()
    yield p
    p.close()


def test_https_goes_through_the_proxy_tunnel_with_tls_verified(tls_receiver, tls, proxy):
    origin = Origin(f"https://localhost:{tls_receiver.port}", connect_timeout=3, proxy=proxy.url,
                    ssl_context=ssl.create_default_context(cafile=str(tls.ca_cert)))
    try:
        reply = origin.request("OPTIONS", "/", timeout=3, max_bytes=1000, truncate=True)
    finally:
        origin.close()
    assert reply.status < 500
    assert proxy.targets == [f"localhost:{tls_receiver.port}"]


def test_the_environment_proxy_applies_beyond_this_machine_only(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    assert environ_proxy("https://hooks.example/x") == "http://proxy.example:3128"
    assert environ_proxy("https://internal.example/x") is None
    assert environ_proxy("https://127.0.0.1:8443/x") is None
    assert environ_proxy("https://localhost/x") is None
