"""``/metrics`` (Prometheus text format) and ``/healthz``, served so that no client can starve the agent.

One thread runs one asyncio event loop for every connection: a thousand idle or trickling clients
cost sockets, never threads (a thread per connection once exhausted the unit's ``TasksMax``, and a
prepare hook's thread could not start). Bounds, whatever clients do:

- each connection has ``REQUEST_TIMEOUT`` seconds to send its request head and the same again to
  take the answer, then it is closed;
- at most ``MAX_CONNECTIONS`` are open at once: a new one closes the oldest (a scraper that sends
  its request at once is answered in milliseconds, so only idle connections are ever old);
- a request head longer than ``MAX_HEAD`` bytes is refused with 431.

Answers are HTTP/1.1 with ``Connection: close`` (one request per connection, as Prometheus and
health probes use it). Making an answer reads the registry and the sink snapshot on the loop
thread: both take milliseconds and never wait on the network.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from .errors import ConfigError

log = logging.getLogger("se_forwarder.telemetry")

MAX_CONNECTIONS = 64
REQUEST_TIMEOUT = 5.0  # seconds for the request head, and again for the answer
MAX_HEAD = 8192  # bytes: request line and headers
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}
Answer = tuple[int, bytes, str]


class MetricsServer:
    """The endpoint on ``host:port``, served on its own thread until ``close``."""

    def __init__(self, host: str, port: int, registry: Any,
                 health: Callable[[], tuple[bool, str]]) -> None:
        self.registry = registry
        self.health = health
        self._open: dict[asyncio.Task[None], None] = {}  # oldest first
        self._loop = asyncio.new_event_loop()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.create_server((host, port), family=family, backlog=128)
        except OSError as exc:
            self._loop.close()
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ConfigError(
                f"telemetry.prometheus_port: cannot listen on {host}:{port}: {why} (is another "
                "agent or exporter using it? choose another port)") from exc
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve_one, sock=sock, limit=MAX_HEAD))
        self.port = self._server.sockets[0].getsockname()[1]
        self.display = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        self._thread = threading.Thread(target=self._loop.run_forever, name="metrics-http",
                                        daemon=True)
        self._thread.start()

    @property
    def connections(self) -> int:
        """Connections open now (read on any thread; for tests and curious operators)."""
        return len(self._open)

    def close(self) -> None:
        """Stop listening, close every connection, end the thread (within a couple of seconds)."""
        if self._loop.is_closed():
            return

        async def stop() -> None:
            self._server.close()
            # every connection, also those evicted and not finished yet
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(stop(), self._loop)
            self._thread.join(2.0)
        if not self._thread.is_alive():
            self._loop.close()

    # -- on the loop thread -----------------------------------------------------------------------
    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._open[task] = None
        while len(self._open) > MAX_CONNECTIONS:
            oldest = next(iter(self._open))
            self._open.pop(oldest)
            oldest.cancel()
        try:
            answer = await self._answer(reader)
            if answer is not None:
                writer.write(_response(*answer))
                await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT)
        except (asyncio.CancelledError, TimeoutError, OSError):
            pass
        finally:
            self._open.pop(task, None)
            writer.transport.abort()  # no lingering close handshake with a client that stalls

    async def _answer(self, reader: asyncio.StreamReader) -> Answer | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
        except asyncio.LimitOverrunError:
            return 431, b"request head too large\n", "text/plain; charset=utf-8"
        except TimeoutError:
            return 408, b"request not received in time\n", "text/plain; charset=utf-8"
        except asyncio.IncompleteReadError:
            return None  # the client went away
        return self.route(head)

    def route(self, head: bytes) -> Answer:
        """The answer to one request head (request line and headers, ending in a blank line)."""
        text = "text/plain; charset=utf-8"
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, b"bad request\n", text
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method != b"GET":
            return 405, b"only GET\n", text
        if target == b"/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            try:
                return 200, generate_latest(self.registry), CONTENT_TYPE_LATEST
            except Exception as exc:  # noqa: BLE001 - a scrape failure is one line, not a crash
                log.warning("metrics scrape failed: %s", exc)
                return 500, b"metrics collection failed\n", text
        if target == b"/healthz":
            ok, line = self.health()
            return (200 if ok else 503), (line + "\n").encode(), text
        return 404, b"not found: /metrics or /healthz\n", text


def _response(status: int, body: bytes, ctype: str) -> bytes:
    head = (f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\n"
            f"Server: se-forwarder\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n")
    return head.encode("latin-1") + body


__all__ = ["MAX_CONNECTIONS", "REQUEST_TIMEOUT", "MetricsServer"]
