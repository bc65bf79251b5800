"""The fleet demo's alert: one that fires for a while and closes the scale set's gate meanwhile.

``AlertFeed`` is an HTTP server on 127.0.0.1 (a free port) that stands for an operator's "may we
maintain?" endpoint, such as a monitoring system's or a deploy tool's. The coordinator asks it
through an ``http`` gate (``[[gates]]``, config/gates.py: 2xx is open, any other answer closed), as
a user would configure it (``gate_table``): the gate ``GATE`` of the scale set's group, asked every
second. It answers 200 until the first Redeploy of the rollout Started, then 423 with a body naming
the alert that fires (``ALERT``) for ``FIRES_FOR`` seconds, then 200 again. While the gate is
closed the coordinator approves no api VM early, whatever the budgets say; the web VMs go on.

A thread follows the simulator's record of the rollout (its history) and notes when the alert
fired and when it resolved (``fired_at``, ``resolved_at``: wall-clock seconds), for the summary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..simulator.history import EventLife
from .application import local_server

GATE = "api-alerts"
ALERT = "ApiErrorRate"
FIRES_FOR = 10.0  # s the alert fires
GATE_SCOPE = "group:tag/api"  # the scale set's group (groups are named by the `group` tag)


class AlertFeed:
    def __init__(self, lives: Callable[[], list[EventLife]]) -> None:
        self.lives = lives
        self.event_ids: set[str] = set()  # the scale set's Redeploys, once the rollout announced them
        self.fired_at: float | None = None
        self.resolved_at: float | None = None
        self.server = local_server(self._answer)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self.server.serve_forever, name="demo-alert", daemon=True),
                         threading.Thread(target=self._follow, name="demo-alert-follow", daemon=True)]

    def _answer(self, _: str) -> tuple[int, bytes]:
        if self.fired_at is not None and self.resolved_at is None:
            return 423, f"alert {ALERT} fires: api error rate above 5% (severity=page)".encode()
        return 200, b"no alert fires"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/can-maintain"

    def gate_table(self) -> dict[str, Any]:
        """The coordinator's ``[[gates]]`` entry for it."""
        return {"name": GATE, "type": "http", "scope": GATE_SCOPE, "url": self.url, "interval": "1s",
                "timeout": "1s"}

    def start(self) -> AlertFeed:
        for thread in self._threads:
            thread.start()
        return self

    def _follow(self) -> None:
        while not self._stop.wait(0.1):
            if self.fired_at is None:
                if any(x.event_id in self.event_ids and x.started is not None for x in self.lives()):
                    self.fired_at = time.time()
            elif time.time() >= self.fired_at + FIRES_FOR:
                self.resolved_at = time.time()
                return

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
