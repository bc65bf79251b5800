"""What Azure says about the fleet's health, beside its maintenance events: Resource Health
(``azure_health.py``) and fired Azure Monitor alerts (``azure_alerts.py``).

``AzureSignals`` is composed by ``azure_side.py``: it follows the engine's changes (Resource Health
goes Unavailable while a Reboot or Redeploy is Started), publishes each availability change on the
feed, answers Resource Graph's ``healthresources`` and ``alertsmanagementresources`` tables, and
serves the control routes that set what no event explains::

    GET  /control/health            every VM's availability and the changes so far
    POST /control/health            {"vm": "web-1", "availabilityState": "Unavailable", "summary": "..."}
                                    (null: back to what the events say)
    GET  /control/alerts            the alert rows
    POST /control/alerts            fire one: {"name": "HighCpu", "severity": "Sev1", "target": "web-1"}
    PATCH /control/alerts/<id|name> {"monitorCondition": "Resolved"} or {"alertState": "Closed"}
    DELETE /control/alerts          forget every alert
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from se_forwarder.simulator.azure_alerts import FiredAlerts
from se_forwarder.simulator.azure_fleet import AzureFleet
from se_forwarder.simulator.azure_health import ResourceHealth, parse_setting

TABLES = ("healthresources", "alertsmanagementresources")
ROUTES = ("health", "alerts")


class AzureSignals:
    """Resource Health and alerts of one simulator (module docstring)."""

    def __init__(self, fleet: AzureFleet, publish: Callable[[dict[str, Any]], None],
                 clock: Callable[[], float]) -> None:
        self.health = ResourceHealth(fleet, clock())
        self.alerts = FiredAlerts(fleet)
        self._publish = publish
        self._clock = clock

    def observe(self, events: Sequence[Mapping[str, Any]], now: float) -> None:
        """The engine's events changed: publish each change of a VM's availability."""
        for change in self.health.observe(events, now):
            self._publish(self.health.cloud_event(change))

    def clear(self) -> None:
        """The simulator was reset."""
        self.health.clear(self._clock())
        self.alerts.clear()

    def table(self, name: str) -> list[dict[str, Any]]:
        """The rows of ``healthresources`` or ``alertsmanagementresources``."""
        return self.health.rows(self._clock()) if name == TABLES[0] else self.alerts.rows()

    def control(self, method: str, sub: str, body: bytes) -> tuple[int, Any]:
        """``/control/health...`` and ``/control/alerts...``; KeyError -> 404, ValueError -> 400."""
        now = self._clock()
        if sub == "/health":
            if method == "GET":
                return 200, {"vms": [self.health.entry(h) for h in self.health.current()],
                             "changes": list(self.health.changes)}
            if method == "POST":
                vm, state, summary = parse_setting(_json(body))
                entry, changed = self.health.set(vm, state, summary, now)
                for change in changed:
                    self._publish(self.health.cloud_event(change))
                return 200, self.health.entry(entry)
        elif sub == "/alerts":
            if method == "GET":
                return 200, self.alerts.rows()
            if method == "POST":
                return 201, self.alerts.fire(_json(body), now)
            if method == "DELETE":
                self.alerts.clear()
                return 204, None
        elif sub.startswith("/alerts/"):
            if method == "PATCH":
                return 200, self.alerts.update(sub[len("/alerts/"):], _json(body), now)
        else:
            raise KeyError(f"no control route /control{sub}")
        return 405, {"error": f"{method} not allowed on /control{sub}"}


def _json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8") or "null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
