"""Azure Resource Health for each simulated VM, from the simulator's one event model.

A VM's ``availabilityState`` (Resource Health's ``microsoft.resourcehealth/availabilitystatuses``):

- ``Unavailable`` while a ``Reboot`` or ``Redeploy`` whose ``Resources`` name it is ``Started``;
- ``Available`` otherwise (a Freeze, a Preempt or a Terminate leaves it as it was);
- or what ``POST /control/health`` set for it (``Unavailable``, ``Degraded``, ``Unknown`` or
  ``Available``: a failure no event explains), until the same route clears it (``null``).

Each change is one ``Microsoft.ResourceNotifications.HealthResources.AvailabilityStatusChanged``
CloudEvent (``cloud_event``: the shape of Event Grid's "health resources" event schema page), which
``azure_side.py`` publishes on the same feed as the maintenance events, and the VM's row of
Resource Graph's ``healthresources`` table (``row``: the shape of "VM availability information in
Azure Resource Graph"; ``properties`` carry ``targetResourceId``, ``targetResourceType``,
``occurredTime``, ``previousAvailabilityState``, ``availabilityState``, and ``reportedTime`` and
``summary`` as Resource Health's API has them). Every change is kept for ``GET /control/health``
(the last ``keep``).
"""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from se_forwarder.simulator.azure_fleet import AzureFleet, VmFacts
from se_forwarder.timestamps import rfc3339

AVAILABLE, UNAVAILABLE, DEGRADED, UNKNOWN = "Available", "Unavailable", "Degraded", "Unknown"
STATES = (AVAILABLE, UNAVAILABLE, DEGRADED, UNKNOWN)
DOWN_TYPES = ("Reboot", "Redeploy")
ROW_TYPE = "microsoft.resourcehealth/availabilitystatuses"
RESOURCE_TYPE = "Microsoft.ResourceHealth/availabilityStatuses"
EVENT_TYPE = "Microsoft.ResourceNotifications.HealthResources.AvailabilityStatusChanged"
DATA_API_VERSION = "2023-12-01"
EVENTS, CONTROL = "events", "control"


@dataclass(frozen=True)
class VmHealth:
    """One VM's availability as Resource Health reports it now."""

    vm: str
    state: str
    previous: str
    occurred: float  # when it took this state
    summary: str
    cause: str  # events | control


def target_type(vm: VmFacts) -> str:
    return ("Microsoft.Compute/virtualMachineScaleSets/virtualMachines" if vm.uniform
            else "Microsoft.Compute/virtualMachines")


class ResourceHealth:
    """Each VM's availability, its changes, and how Azure shows them (module docstring)."""

    def __init__(self, fleet: AzureFleet, now: float, keep: int = 10_000) -> None:
        self.fleet = fleet
        self._health = {vm.name: VmHealth(vm.name, AVAILABLE, AVAILABLE, now, _summary(AVAILABLE), EVENTS)
                        for vm in fleet.vms}
        self._from_events = {vm.name: (AVAILABLE, "") for vm in fleet.vms}
        self._set: dict[str, tuple[str, str]] = {}  # VM -> (state, summary) set by the control route
        self.changes: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self._lock = threading.Lock()

    # -- the event model and the control route ------------------------------------------------

    def observe(self, events: Sequence[Mapping[str, Any]], now: float) -> list[VmHealth]:
        """The engine's events changed: what changed for Resource Health."""
        down: dict[str, str] = {}
        for event in events:
            if event.get("EventType") in DOWN_TYPES and event.get("EventStatus") == "Started":
                for vm in event.get("Resources") or []:
                    down.setdefault(str(vm), f"{event['EventType']} {event['EventId']} is in progress")
        with self._lock:
            self._from_events = {name: (UNAVAILABLE, down[name]) if name in down else (AVAILABLE, "")
                                 for name in self._health}
            return self._settle(now)

    def set(self, vm: str, state: str | None, summary: str,
            now: float) -> tuple[VmHealth, list[VmHealth]]:
        """Set ``vm``'s state (None: back to what the events say): its health now and the
        changes; KeyError for an unknown VM."""
        with self._lock:
            if vm not in self._health:
                raise KeyError(f"no VM {vm!r} in the simulated fleet")
            if state is None:
                self._set.pop(vm, None)
            else:
                self._set[vm] = (state, summary or f"set through the control API: {state}")
            changed = self._settle(now)
            return self._health[vm], changed

    def _settle(self, now: float) -> list[VmHealth]:
        changed = []
        for name, before in self._health.items():
            state, why = self._set.get(name) or self._from_events[name]
            cause = CONTROL if name in self._set else EVENTS
            if state == before.state:
                if (why or _summary(state), cause) != (before.summary, before.cause):
                    self._health[name] = replace(before, summary=why or _summary(state), cause=cause)
                continue
            after = VmHealth(name, state, before.state, now, why or _summary(state), cause)
            self._health[name] = after
            changed.append(after)
            self.changes.append(self.entry(after))
        return changed

    def clear(self, now: float) -> None:
        """The simulator was reset: every VM Available, nothing set, no change kept."""
        with self._lock:
            self._set.clear()
            self._from_events = {name: (AVAILABLE, "") for name in self._health}
            self._health = {name: VmHealth(name, AVAILABLE, AVAILABLE, now, _summary(AVAILABLE), EVENTS)
                            for name in self._health}
            self.changes.clear()

    # -- how Azure shows it -------------------------------------------------------------------

    def current(self) -> list[VmHealth]:
        with self._lock:
            return list(self._health.values())

    def entry(self, health: VmHealth) -> dict[str, Any]:
        """One VM's state for ``GET /control/health``."""
        return {"vm": health.vm, "availabilityState": health.state,
                "previousAvailabilityState": health.previous,
                "occurredTime": rfc3339(health.occurred, milliseconds=True), "summary": health.summary,
                "setBy": health.cause}

    def properties(self, health: VmHealth, reported: float) -> dict[str, Any]:
        vm = self.fleet.vm(health.vm)
        assert vm is not None
        return {
            "targetResourceType": target_type(vm),
            "targetResourceId": vm.resource_id,
            "occurredTime": rfc3339(health.occurred, milliseconds=True),
            "previousAvailabilityState": health.previous,
            "availabilityState": health.state,
            "reportedTime": rfc3339(reported, milliseconds=True),
            "summary": health.summary,
        }

    def rows(self, now: float) -> list[dict[str, Any]]:
        """The ``healthresources`` table: one ``availabilitystatuses/current`` row per VM."""
        out = []
        for health in self.current():
            vm = self.fleet.vm(health.vm)
            assert vm is not None
            row = self.fleet.row(f"{vm.resource_id}/providers/{RESOURCE_TYPE}/current", "current", ROW_TYPE)
            row["properties"] = self.properties(health, now)
            out.append(row)
        return out

    def cloud_event(self, health: VmHealth) -> dict[str, Any]:
        """The ``AvailabilityStatusChanged`` CloudEvent of one change."""
        vm = self.fleet.vm(health.vm)
        assert vm is not None
        change = str(uuid.uuid4())
        stamp = rfc3339(health.occurred, milliseconds=True)
        props = self.properties(health, health.occurred)
        return {
            "specversion": "1.0",
            "id": str(uuid.uuid4()),
            "source": f"/subscriptions/{self.fleet.subscription}",
            "subject": vm.resource_id,
            "type": EVENT_TYPE,
            "time": stamp,
            "data": {
                "resourceInfo": {
                    "id": f"{vm.resource_id}/providers/{RESOURCE_TYPE}/{change}",
                    "name": change,
                    "type": RESOURCE_TYPE,
                    "properties": {k: props[k] for k in ("targetResourceId", "targetResourceType",
                                                          "occurredTime", "previousAvailabilityState",
                                                          "availabilityState")},
                },
                "operationalInfo": {"resourceEventTime": stamp},
                "apiVersion": DATA_API_VERSION,
            },
        }


def _summary(state: str) -> str:
    return {
        AVAILABLE: "There aren't any known Azure platform problems affecting this virtual machine.",
        UNAVAILABLE: "This virtual machine is unavailable.",
        DEGRADED: "This virtual machine's performance is degraded.",
        UNKNOWN: "Resource Health cannot tell the state of this virtual machine.",
    }[state]


def parse_setting(spec: Any) -> tuple[str, str | None, str]:
    """``{"vm": "web-1", "availabilityState": "Unavailable", "summary": "..."}`` ->
    (vm, state or None to clear, summary); ValueError naming what is wrong."""
    if not isinstance(spec, dict) or set(spec) - {"vm", "availabilityState", "summary"}:
        raise ValueError('the body must be {"vm": "<name>", "availabilityState": '
                         '"Available"|"Unavailable"|"Degraded"|"Unknown"|null, "summary": "..."}')
    vm, state, summary = spec.get("vm"), spec.get("availabilityState"), spec.get("summary", "")
    if not isinstance(vm, str) or not vm:
        raise ValueError("vm must name a VM of the simulated fleet")
    if "availabilityState" not in spec or (state is not None and state not in STATES):
        raise ValueError(f"availabilityState must be one of {', '.join(STATES)}, or null to go back to "
                         "what the events say")
    if not isinstance(summary, str) or len(summary) > 1000:
        raise ValueError("summary must be text of at most 1000 characters")
    return vm, state, summary
