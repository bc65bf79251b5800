"""Azure's side of the contract as test data: Event Grid's CloudEvents and Resource Graph's rows
(docs/azure-feed.md), for the VMs of tests/coordinator/fleet.py, and a catch-up to fold them with.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from se_forwarder.fleet.coordinator.config import Policy
from se_forwarder.fleet.coordinator.edge import azure_facts
from se_forwarder.fleet.coordinator.fold import CatchUp

from .fleet import SUB, AgentVm, iso

EVENT_TYPE = azure_facts.EVENT_TYPE
BASE_CONFIG = {"signing": {"key_file": "/k"},
               "eventhub": {"fully_qualified_namespace": "ns.servicebus.windows.net"},
               "storage": {"account_url": "https://a.blob.core.windows.net"},
               "queues": {"account_url": "https://a.queue.core.windows.net"}, "api": {"token_file": "/t"}}
FRESH = 600.0  # policy.azure_fresh_for in these tests


def policy(**kwargs: Any) -> Policy:
    """A policy with Azure's input on (``acknowledge`` too unless told otherwise)."""
    return Policy(**{"acknowledge": True, "azure_fresh_for": FRESH, **kwargs})


def owner_id(vm: AgentVm, scale_set: str = "") -> str:
    base = f"/subscriptions/{vm.sub}/resourceGroups/{vm.rg}/providers/Microsoft.Compute"
    return f"{base}/virtualMachineScaleSets/{scale_set}" if scale_set else f"{base}/virtualMachines/{vm.name}"


def event_id_of(owner: str, event_id: str) -> str:
    return f"{owner}/providers/Microsoft.Maintenance/scheduledevents/{event_id}"


def properties(event_id: str, status: str, resources: list[str], not_before: float | None,
               event_type: str = "Reboot") -> dict[str, Any]:
    return {
        "DurationInSeconds": -1, "Description": "Azure maintenance", "EventId": event_id,
        "EventSource": "Platform", "EventStatus": status, "EventType": event_type,
        "NotBefore": format_datetime(datetime.fromtimestamp(not_before, UTC), usegmt=True)
        if not_before is not None and status == "Scheduled" else "",
        "Resources": resources, "ResourceType": "VirtualMachine",
    }


def feed(event_id: str, status: str, affected: list[AgentVm], t: float, *, not_before: float | None = None,
         event_type: str = "Reboot", scale_set: str = "", ident: str | None = None) -> dict[str, Any]:
    """Event Grid's ``ScheduledEventEmitted`` CloudEvent (CloudEvents schema) for one change."""
    rid = event_id_of(owner_id(affected[0], scale_set), event_id)
    return {
        "specversion": "1.0", "id": ident or f"eg-{event_id}-{status}",
        "source": f"/subscriptions/{affected[0].sub}", "subject": rid, "type": EVENT_TYPE, "time": iso(t),
        "data": {"resourceInfo": {"id": rid, "name": event_id,
                                  "type": "microsoft.maintenance/scheduledEvents",
                                  "location": "westeurope",
                                  "properties": properties(event_id, status, [v.name for v in affected],
                                                           not_before, event_type)},
                 "operationalInfo": {"resourceEventTime": iso(t)}, "apiVersion": "2024-07-01"},
    }


def with_member(event: dict[str, Any], path: list[str], value: object) -> dict[str, Any]:
    """A copy of ``event`` with the member at ``path`` set to ``value``."""
    out = copy.deepcopy(event)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def facts(event: dict[str, Any]) -> azure_facts.EventFacts:
    found = azure_facts.feed_event(event, [SUB])
    assert isinstance(found, azure_facts.EventFacts), found
    return found


def row(event_id: str, status: str, affected: list[AgentVm], *, not_before: float | None = None,
        scale_set: str = "") -> dict[str, Any]:
    """The event's ``maintenanceresources`` row."""
    rid = event_id_of(owner_id(affected[0], scale_set), event_id)
    return {"id": rid, "name": event_id, "type": "microsoft.maintenance/scheduledevents",
            "resourceGroup": affected[0].rg.lower(), "subscriptionId": affected[0].sub,
            "properties": properties(event_id, status, [v.name for v in affected], not_before)}


def vm_row(vm: AgentVm, avset: str = "web", *, fd: str | None = None, ud: str | None = None,
           zone: str | None = None, tags: dict[str, str] | None = None) -> dict[str, Any]:
    """The VM's ``resources`` row (an availability set's VM: no domains; pass them as from its view)."""
    props: dict[str, Any] = {"vmId": vm.vm_id}
    if avset:
        props["availabilitySet"] = {"id": f"/subscriptions/{vm.sub}/resourceGroups/{vm.rg}/providers/"
                                          f"Microsoft.Compute/availabilitySets/{avset}"}
    return {"id": vm.resource_id, "name": vm.name, "type": "microsoft.compute/virtualmachines",
            "location": vm.location, "zones": [zone or vm.zone] if (zone or vm.zone) else None,
            "tags": tags if tags is not None else dict(vm.tags), "properties": props,
            "_domains": (vm.fd if fd is None else fd, vm.ud if ud is None else ud)}


def catch_up(t: float, vms: list[dict[str, Any]] = (), events: list[dict[str, Any]] = (),  # type: ignore[assignment]
             covered: bool = True, opted_in: bool = True) -> CatchUp:
    """What azure_graph.Graph.catch_up would give for these rows (VMs with their views' domains,
    opted in to Azure's feed through their set unless ``opted_in`` is false)."""
    result = CatchUp(t, covered=(SUB,) if covered else (), topology=(SUB,) if vms or covered else ())
    for item in vms:
        fd, ud = item.get("_domains", ("", ""))
        parsed = azure_facts.vm_row({k: v for k, v in item.items() if k != "_domains"}, [SUB])
        assert isinstance(parsed, azure_facts.VmFacts), parsed
        from dataclasses import replace
        result.vms.append(replace(parsed, fault_domain=parsed.fault_domain or fd,
                                  update_domain=parsed.update_domain or ud, opted_in=opted_in))
    for item in events:
        parsed_event = azure_facts.event_row(item, [SUB], t)
        assert isinstance(parsed_event, azure_facts.EventFacts), parsed_event
        result.events.append(parsed_event)
    return result
