"""A WebSocket front for the broker fixture: AMQP over WebSockets, as Event Hubs serves it on port 443.

Event Hubs accepts AMQP 1.0 inside binary WebSocket messages at ``/$servicebus/websocket`` with the
subprotocol ``AMQPWSB10``. This front stands in for that endpoint only (plain ``ws://`` on loopback,
as the SDK uses with ``UseDevelopmentEmulator=true``): it accepts the upgrade with the ``websockets``
library and carries the bytes both ways to the broker's TCP port, where the real AMQP session runs.
"""

from __future__ import annotations

import socket
import threading

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

SUBPROTOCOL = "AMQPWSB10"
PATH = "/$servicebus/websocket"


class WebSocketFront:
    """``ws://127.0.0.1:<port>/$servicebus/websocket`` in front of ``127.0.0.1:<upstream>``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.paths: list[str] = []  # the request path of each connection, to check the SDK's
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.socket.getsockname()[1]

    def __enter__(self) -> WebSocketFront:
        self._server = serve(self._handle, "127.0.0.1", 0, subprotocols=[SUBPROTOCOL],
                             max_size=None, compression=None)
        self._thread = threading.Thread(target=self._server.serve_forever, name="eh-websocket-front",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._thread.join(10)

    def _handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self.paths.append(ws.request.path)
        if ws.request.path != PATH or ws.subprotocol != SUBPROTOCOL:
            ws.close(1008, "not the Event Hubs WebSocket endpoint")
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
        upstream.settimeout(None)

        def to_client() -> None:
            try:
                while data := upstream.recv(65536):
                    ws.send(data)
            except (OSError, ConnectionClosed):
                pass
            finally:
                ws.close()

        pump = threading.Thread(target=to_client, name="eh-websocket-pump", daemon=True)
        pump.start()
        try:
            for message in ws:
                upstream.sendall(message if isinstance(message, bytes) else message.encode())
        except (OSError, ConnectionClosed):
            pass
        finally:
            upstream.close()
            pump.join(10)
