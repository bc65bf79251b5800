"""CloudEvents shaped as the agent and the coordinator send them (design.md, shared contracts).

Built here as plain dicts, so the tests say exactly what each event carries; ``store`` puts them in
a real outbox the way the agent does, for the delivery worker to hand to a sink.
"""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from se_forwarder.model import Document
from se_forwarder.outbox import NewEvent, Outbox
from se_forwarder.sinks.base import StoredEvent

PREFIX = "com.azure.scheduledevents."
NOW = datetime(2033, 9, 19, 14, 15, tzinfo=UTC)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def vm(name: str = "web-3", fd: str = "1", ud: str = "0", zone: str = "2", **extra: Any) -> dict[str, Any]:
    """data.Vm as the contract fixes it (fault/update domains are strings, as IMDS gives them)."""
    return {
        "vmId": f"0b1c2d3e-0000-4000-8000-{zlib.crc32(name.encode()):012d}", "name": name,
        "resourceId": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/"
                      + name,
        "subscriptionId": "s", "resourceGroupName": "rg", "location": "westeurope", "zone": zone,
        "vmScaleSetName": "", "platformFaultDomain": fd, "platformUpdateDomain": ud,
        "placementGroupId": "", "tags": {}, "complete": True, **extra,
    }


def agent_event(state: str, event_id: str = "6b0c1f52-aaaa-4bbb-8ccc-000000000001", *,
                event_type: str = "Reboot", not_before: datetime | None = NOW + timedelta(minutes=15),
                observed: datetime = NOW, machine: dict[str, Any] | None = None,
                status: str = "Scheduled", **data: Any) -> dict[str, Any]:
    """One agent CloudEvent (structured mode) for ``state``, with the IMDS event and enrichment."""
    machine = machine if machine is not None else vm()
    body = {
        "EventId": event_id, "EventType": event_type, "ResourceType": "VirtualMachine",
        "Resources": [machine.get("name", "web-3")], "EventStatus": status,
        "NotBefore": not_before.strftime("%a, %d %b %Y %H:%M:%S GMT") if not_before else "",
        "Description": "Host server is undergoing maintenance.", "EventSource": "Platform",
        "DurationInSeconds": -1,
        "NotBeforeUtc": rfc3339(not_before) if not_before else None,
        "DocumentIncarnation": 7, "AffectsThisVm": True, "Vm": machine, **data,
    }
    return {
        "specversion": "1.0", "type": PREFIX + state, "source": machine.get("resourceId", ""),
        "id": f"{event_id}/{state}", "subject": event_id, "time": rfc3339(observed),
        "datacontenttype": "application/json", "eventtype": event_type,
        "eventstatus": {"completed": "Completed", "canceled": "Canceled"}.get(state, status),
        "incarnation": 7, "vmid": machine.get("vmId", ""), "data": body,
    }


def heartbeat(machine: dict[str, Any] | None = None, at: datetime = NOW) -> dict[str, Any]:
    machine = machine if machine is not None else vm()
    seconds = int(at.timestamp())
    return {
        "specversion": "1.0", "type": PREFIX + "heartbeat", "source": machine["resourceId"],
        "id": f"heartbeat/{machine['vmId']}/{seconds}", "subject": machine["vmId"], "time": rfc3339(at),
        "datacontenttype": "application/json", "vmid": machine["vmId"],
        "data": {"AgentVersion": "0.2.0", "HeartbeatInterval": 60, "LastPollUtc": rfc3339(at),
                 "DocumentIncarnation": 7, "Events": [], "EnrichmentComplete": True,
                 "Backlog": {"hook": 0}, "Vm": machine},
    }


def decision(action: str, event_id: str = "6b0c1f52-aaaa-4bbb-8ccc-000000000001",
             **data: Any) -> dict[str, Any]:
    """A coordinator decision CloudEvent (``com.azure.scheduledevents.coordinator.<action>``), its data
    shaped as fleet/coordinator/events.py publishes it (tests/notify/test_coordinator_messages.py uses
    the core's own decisions)."""
    vm = {"name": "web-3", "vmId": "3c9e4d0a-0000-4000-8000-000000000003", "group": "tag/web"}
    body = {"Decision": action, "EventId": event_id, "EventType": "Reboot", "EventSource": "Platform",
            "NotBeforeUtc": rfc3339(NOW + timedelta(hours=2)), "Resources": ["web-3"], "Affected": [vm],
            "Target": vm if action == "approve" else None, "ReasonCode": "", "Reason": "",
            "Actor": "coordinator",
            "Budgets": [{"scope": "group:tag/web", "kind": "group", "size": 6, "used": 0, "withEvent": 1,
                         "max": 1}],
            "Shadow": False, "Attempt": 1 if action == "approve" else None, "Scope": None, "Sequence": None,
            "Overrides": [], **data}
    return {
        "specversion": "1.0", "type": f"{PREFIX}coordinator.{action}", "source": "/se-forwarder/coordinator",
        "id": f"coordinator/{event_id}/{action}", "subject": event_id, "time": rfc3339(NOW),
        "datacontenttype": "application/json", "data": body,
    }


def store(state_dir: Path, events: list[dict[str, Any]], sink: str = "chat") -> list[StoredEvent]:
    """Put ``events`` in a real outbox, as the agent does, with ``sink`` registered."""
    rows = [
        NewEvent(ce_id=e["id"], event_id=str(e.get("subject", "")), state=e["type"].rsplit(".", 1)[-1],
                 ce_type=e["type"], payload=json.dumps(e), observed_at=NOW.timestamp())
        for e in events
    ]
    with Outbox(state_dir) as box:
        box.register_sinks([sink])
        return box.record(Document(7), rows)
