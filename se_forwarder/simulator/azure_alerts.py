"""Azure Monitor alerts as Resource Graph shows them (``alertsmanagementresources``), set by a test.

Azure Monitor has no emulator and the simulator evaluates no alert rule: a test fires an alert
(``POST /control/alerts``), and Resource Graph serves it as Azure Monitor's alert instance
(type ``microsoft.alertsmanagement/alerts``, the "common alert schema" ``properties.essentials``:
``severity`` ``Sev0``..``Sev4``, ``signalType``, ``alertState`` ``New``/``Acknowledged``/``Closed``,
``monitorCondition`` ``Fired``/``Resolved``, ``monitorService``, ``targetResource`` and its name,
group and type, ``alertRule``, ``startDateTime``, ``lastModifiedDateTime``,
``monitorConditionResolvedDateTime``). ``PATCH /control/alerts/<id or rule name>`` resolves it
(``{"monitorCondition": "Resolved"}``) or changes its ``alertState``; a resolved alert keeps its
row, as in Azure, so a reader must look at ``monitorCondition``.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from se_forwarder.simulator.azure_fleet import AzureFleet
from se_forwarder.timestamps import rfc3339

ROW_TYPE = "microsoft.alertsmanagement/alerts"
PROVIDER = "Microsoft.AlertsManagement/alerts"
SEVERITIES = ("Sev0", "Sev1", "Sev2", "Sev3", "Sev4")
SIGNALS = ("Metric", "Log", "ActivityLog")
STATES = ("New", "Acknowledged", "Closed")
CONDITIONS = ("Fired", "Resolved")
_FIRE_KEYS = ("name", "severity", "target", "description", "signalType", "monitorService", "alertState")


class FiredAlerts:
    """The alert instances a test fired (module docstring)."""

    def __init__(self, fleet: AzureFleet) -> None:
        self.fleet = fleet
        self._alerts: dict[str, dict[str, Any]] = {}  # alert id -> its row
        self._lock = threading.Lock()

    def fire(self, spec: Any, now: float) -> dict[str, Any]:
        """A new fired alert from ``spec`` (``_FIRE_KEYS``); ValueError naming a bad key."""
        if not isinstance(spec, dict) or set(spec) - set(_FIRE_KEYS):
            raise ValueError(f"the body must be an object with some of: {', '.join(_FIRE_KEYS)}")
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError("name must be the alert rule's name, e.g. \"HighCpu\"")
        severity = _choice(spec, "severity", SEVERITIES, "Sev3")
        signal = _choice(spec, "signalType", SIGNALS, "Metric")
        state = _choice(spec, "alertState", STATES, "New")
        description, service = spec.get("description", ""), spec.get("monitorService", "Platform")
        if not isinstance(description, str) or not isinstance(service, str):
            raise ValueError("description and monitorService must be text")
        target, target_name, target_type, group = self._target(spec.get("target"))
        alert_id = str(uuid.uuid4())
        rid = f"/subscriptions/{self.fleet.subscription}/providers/{PROVIDER}/{alert_id}"
        row = self.fleet.row(rid, name, ROW_TYPE)
        stamp = rfc3339(now, milliseconds=True)
        rule = (f"/subscriptions/{self.fleet.subscription}/resourceGroups/{self.fleet.resource_group}"
                f"/providers/microsoft.insights/metricalerts/{name}")
        row.update(location="global", resourceGroup=group, properties={
            "essentials": {
                "severity": severity, "signalType": signal, "alertState": state,
                "monitorCondition": "Fired", "monitorService": service, "targetResource": target,
                "targetResourceName": target_name, "targetResourceGroup": group,
                "targetResourceType": target_type, "sourceCreatedId": str(uuid.uuid4()),
                "alertRule": rule, "startDateTime": stamp, "lastModifiedDateTime": stamp,
                "monitorConditionResolvedDateTime": None, "lastModifiedUserName": "System",
                "actionStatus": {"isSuppressed": False}, "description": description,
            },
            "context": {}, "egressConfig": {},
        })
        with self._lock:
            self._alerts[alert_id] = row
        return _copy(row)

    def update(self, key: str, spec: Any, now: float) -> dict[str, Any]:
        """Resolve an alert or change its state; KeyError for an unknown one."""
        if not isinstance(spec, dict) or not spec or set(spec) - {"monitorCondition", "alertState"}:
            raise ValueError('the body must be {"monitorCondition": "Fired"|"Resolved"} and/or '
                             '{"alertState": "New"|"Acknowledged"|"Closed"}')
        condition = _choice(spec, "monitorCondition", CONDITIONS, None)
        state = _choice(spec, "alertState", STATES, None)
        with self._lock:
            row = self._find(key)
            essentials = row["properties"]["essentials"]
            stamp = rfc3339(now, milliseconds=True)
            if condition is not None and condition != essentials["monitorCondition"]:
                essentials["monitorCondition"] = condition
                essentials["monitorConditionResolvedDateTime"] = stamp if condition == "Resolved" else None
            if state is not None:
                essentials["alertState"] = state
                essentials["lastModifiedUserName"] = "se-forwarder-simulator"
            essentials["lastModifiedDateTime"] = stamp
            return _copy(row)

    def clear(self) -> None:
        with self._lock:
            self._alerts.clear()

    def rows(self) -> list[dict[str, Any]]:
        """The ``alertsmanagementresources`` table, oldest alert first."""
        with self._lock:
            return [_copy(r) for r in self._alerts.values()]

    def _find(self, key: str) -> dict[str, Any]:
        """An alert by its ARM id, its last segment, or its rule's name (the latest alert of it)."""
        last = key.rstrip("/").rsplit("/", 1)[-1]
        if last in self._alerts:
            return self._alerts[last]
        named = [r for r in self._alerts.values() if r["name"] == key]
        if not named:
            raise KeyError(f"no alert {key!r} (give its id or its name)")
        return named[-1]

    def _target(self, target: Any) -> tuple[str, str, str, str]:
        """(targetResource, its name, its type, its resource group) of a VM name or an ARM id;
        the simulated resource group when none is given."""
        group = self.fleet.resource_group.lower()
        if target is None:
            rid = f"/subscriptions/{self.fleet.subscription}/resourcegroups/{group}"
            return rid, group, "resourcegroups", group
        if not isinstance(target, str) or not target:
            raise ValueError("target must be a VM of the simulated fleet or an ARM resource id")
        vm = self.fleet.vm(target)
        rid = vm.resource_id if vm is not None else target
        if not rid.startswith("/subscriptions/"):
            raise ValueError(f"target {target!r} is neither a simulated VM nor an ARM resource id")
        parts = rid.lower().split("/")
        kind = parts[-2] if len(parts) > 5 else "subscriptions"
        rg = parts[4] if len(parts) > 4 and parts[3] == "resourcegroups" else ""
        return rid.lower(), rid.rsplit("/", 1)[-1], kind, rg


def _choice(spec: dict[str, Any], key: str, allowed: tuple[str, ...], default: str | None) -> Any:
    value = spec.get(key, default)
    if value is not default and value not in allowed:
        raise ValueError(f"{key} must be one of {', '.join(allowed)}")
    return value


def _copy(row: dict[str, Any]) -> dict[str, Any]:
    essentials = dict(row["properties"]["essentials"])
    essentials["actionStatus"] = dict(essentials["actionStatus"])
    return {**row, "properties": {**row["properties"], "essentials": essentials}}
