"""The fleet demo's slow application: the one VM whose service takes a while to come back.

``SlowApp`` is an HTTP server on 127.0.0.1 (a free port) that stands for the application of the VM
``SLOW``: its ``/healthz`` answers 200, but 503 from when that VM's Reboot Started until
``BACK_AFTER`` seconds after it ended (a service slow to start after the reboot). The VM's agent
probes it (its ``[health]`` section, as a user would write it: ``probe_table``), so its heartbeats
say ``unhealthy`` meanwhile and its ``recovered`` report comes only once the probe passes; the
coordinator (``free_slot = "recovered"``) holds the group's only slot until then.

A thread follows the simulator's record of the rollout (its history, as the summary reads it) and
notes when the application went down and came back (``down_at``, ``back_at``: wall-clock seconds),
for the summary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..simulator.history import EventLife

SLOW = "web-1"
BACK_AFTER = 8.0  # s after its Reboot ended until the application answers again


class SlowApp:
    def __init__(self, lives: Callable[[], list[EventLife]]) -> None:
        self.lives = lives
        self.event_id: str | None = None  # SLOW's Reboot, once the rollout announced it
        self.down_at: float | None = None
        self.back_at: float | None = None
        app = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                healthy = app.down_at is None or app.back_at is not None
                self.send_response(200 if healthy and self.path == "/healthz" else
                                   404 if healthy else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self.server.serve_forever, name="demo-app", daemon=True),
                         threading.Thread(target=self._follow, name="demo-app-follow", daemon=True)]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/healthz"

    def probe_table(self) -> dict[str, Any]:
        """The ``[health]`` table of ``SLOW``'s agent: one HTTP probe, checked every second."""
        return {"interval": 1, "timeout": 0.5, "healthy_threshold": 1, "unhealthy_threshold": 1,
                "probes": [{"type": "http", "name": "app", "url": self.url}]}

    def start(self) -> SlowApp:
        for thread in self._threads:
            thread.start()
        return self

    def _follow(self) -> None:
        while not self._stop.wait(0.1):
            life = next((x for x in self.lives() if x.event_id == self.event_id), None)
            if life is None or life.started is None:
                continue
            if self.down_at is None:
                self.down_at = time.time()
            if life.ended is not None and self.back_at is None and time.time() >= life.ended + BACK_AFTER:
                self.back_at = time.time()
                return

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
