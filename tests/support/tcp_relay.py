"""A TCP relay on loopback that can hang: one client's own path to a server, cut without a sound.

``TcpRelay(target_port).start()`` listens on a free port and passes bytes both ways. ``hang()``
makes it stop reading and accepting, exactly as a server process stopped with SIGSTOP looks to
the client: connections stay open, requests sit in the socket buffers unanswered, new
connections wait in the listen backlog. ``resume()`` carries on with everything that waited. It
lets a test cut one client (one coordinator instance) off a server that others keep using.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class TcpRelay:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host, self.target_port = host, target_port
        self.port = 0
        self._listener: socket.socket | None = None
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._hung = threading.Event()
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-relay", daemon=True)

    def start(self) -> TcpRelay:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(128)
        listener.setblocking(False)
        self._listener, self.port = listener, listener.getsockname()[1]
        self._thread.start()
        return self

    def hang(self) -> None:
        self._hung.set()
        self._changed.set()

    def resume(self) -> None:
        self._hung.clear()
        self._changed.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in [*self._pairs, self._listener]:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        registered = False
        while not self._stop.is_set():
            want = not self._hung.is_set()
            if want != registered:
                self._register(sel, want)
                registered = want
            if not registered:
                self._changed.wait(0.1)
                self._changed.clear()
                continue
            for key, _ in sel.select(0.1):
                if key.fileobj is self._listener:
                    self._accept(sel)
                else:
                    self._pass(sel, key.fileobj)  # type: ignore[arg-type]
        sel.close()

    def _register(self, sel: selectors.BaseSelector, on: bool) -> None:
        for sock in [self._listener, *self._pairs]:
            if sock is None:
                continue
            if on:
                sel.register(sock, selectors.EVENT_READ)
            else:
                with contextlib.suppress(KeyError, ValueError):
                    sel.unregister(sock)

    def _accept(self, sel: selectors.BaseSelector) -> None:
        assert self._listener is not None
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            upstream = socket.create_connection((self.host, self.target_port), timeout=5)
        except OSError:
            client.close()
            return
        for sock in (client, upstream):
            sock.setblocking(True)
            sock.settimeout(5)
            sel.register(sock, selectors.EVENT_READ)
        self._pairs[client], self._pairs[upstream] = upstream, client

    def _pass(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        other = self._pairs.get(sock)
        try:
            data = sock.recv(65536)
            if data and other is not None:
                other.sendall(data)
                return
        except OSError:
            pass
        for s in (sock, other):
            if s is None:
                continue
            self._pairs.pop(s, None)
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(s)
            with contextlib.suppress(OSError):
                s.close()
