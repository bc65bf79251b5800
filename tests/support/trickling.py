"""A real HTTP server on loopback that answers 200 slowly: its body (and, with ``head_too``, its
status line and headers as well) arrives one byte per ``gap`` seconds, each byte well inside any
read timeout. For the tests of total deadlines."""

from __future__ import annotations

import socket
import threading


class TricklingServer:
    def __init__(self, gap: float = 0.2, length: int = 10_000, head_too: bool = False) -> None:
        self.gap, self.length, self.head_too = gap, length, head_too
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.closed = threading.Event()
        self.bytes_sent = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % self.length
        slow = (head if self.head_too else b"") + b"x" * self.length
        with conn:
            try:
                conn.recv(65536)  # the request (small)
                if not self.head_too:
                    conn.sendall(head)
                for byte in slow:
                    if self.closed.wait(self.gap):
                        return
                    conn.sendall(bytes([byte]))
                    self.bytes_sent += 1
            except OSError:
                return  # the client hung up: what a deadline should make it do

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
