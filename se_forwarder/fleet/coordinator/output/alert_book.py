"""The alerts a running part raised (view/alerts.py): one call to open one, one to clear it.

``Service.alerts`` is an ``AlertBook``; any thread may use it::

    service.alerts.raise_(Alert("gate-closed/web", "gate-closed", "gate web closed for 2 h", "warning"))
    service.alerts.clear("gate-closed/web")

Raising an open alert again replaces its words (the pager is not told again unless they changed);
clearing an alert that is not open does nothing. output/alerting.py reads ``open()`` about once a
second and sends what changed. A part raises again while its condition holds: the book is not
kept across a restart (view/alerts.py says what that guarantees).
"""

from __future__ import annotations

import threading

from ..view.alerts import Alert


class AlertBook:
    def __init__(self) -> None:
        self._open: dict[str, Alert] = {}
        self._lock = threading.Lock()

    def raise_(self, alert: Alert) -> None:
        """Open ``alert`` (or replace the open one of its id)."""
        with self._lock:
            self._open[alert.id] = alert

    def clear(self, ident: str) -> None:
        """Resolve the alert ``ident``, if it is open."""
        with self._lock:
            self._open.pop(ident, None)

    def open(self) -> list[Alert]:
        with self._lock:
            return list(self._open.values())
