"""Agent CloudEvents as shared-contracts.md and design.md define them, and a fold to feed them to.

The coordinator is built against the contract, not against today's agent code: these builders are
the contract written down as test data (structured-mode dicts, as the hub delivers them).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from se_forwarder.fleet.coordinator import (
    Evaluation,
    FleetState,
    FoldStats,
    Policy,
    evaluate,
    to_dict,
)
from se_forwarder.fleet.coordinator import (
    claimed as fold_event,
)
from se_forwarder.fleet.coordinator.config import Limits
from se_forwarder.fleet.coordinator.decide import sent

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp()  # a Monday, 12:00 UTC
SUB = "11111111-2222-3333-4444-555555555555"
SOURCE = "urn:se-forwarder:coordinator:test"
PREFIX = "com.azure.scheduledevents."


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class AgentVm:
    name: str
    rg: str = "rg-web"
    fd: str = "0"
    ud: str = "0"
    zone: str = ""
    scale_set: str = ""
    location: str = "westeurope"
    sub: str = SUB
    tags: tuple[tuple[str, str], ...] = ()
    complete: bool = True

    @property
    def vm_id(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.sub}/{self.rg}/{self.name}"))

    @property
    def key(self) -> str:
        return self.vm_id if self.complete else f"host:{self.name.lower()}"

    @property
    def resource_id(self) -> str:
        return (f"/subscriptions/{self.sub}/resourceGroups/{self.rg}/providers/"
                f"Microsoft.Compute/virtualMachines/{self.name}")

    @property
    def source(self) -> str:
        return self.resource_id if self.complete else f"/virtualMachines/{self.name}"

    def data(self) -> dict[str, Any]:
        if not self.complete:
            keys = ("vmId", "resourceId", "subscriptionId", "resourceGroupName", "location", "zone",
                    "vmScaleSetName", "platformFaultDomain", "platformUpdateDomain", "placementGroupId")
            return {**dict.fromkeys(keys, ""), "name": self.name, "tags": {}, "complete": False}
        return {
            "vmId": self.vm_id, "name": self.name, "resourceId": self.resource_id,
            "subscriptionId": self.sub, "resourceGroupName": self.rg, "location": self.location,
            "zone": self.zone, "vmScaleSetName": self.scale_set, "platformFaultDomain": self.fd,
            "platformUpdateDomain": self.ud, "placementGroupId": "", "tags": dict(self.tags),
            "complete": True,
        }


def heartbeat(vm: AgentVm, t: float, events: tuple[tuple[str, str, str], ...] = ()) -> dict[str, Any]:
    """``events``: (EventId, EventStatus, EventType) the agent currently sees."""
    ident = vm.vm_id if vm.complete else vm.name
    return {
        "specversion": "1.0", "type": PREFIX + "heartbeat", "id": f"heartbeat/{ident}/{int(t)}",
        "source": vm.source, "subject": ident, "time": iso(t), "datacontenttype": "application/json",
        "vmid": ident,
        "data": {"AgentVersion": "0.2.0", "HeartbeatInterval": 60, "LastPollUtc": iso(t),
                 "DocumentIncarnation": 3,
                 "Events": [{"EventId": e, "EventStatus": s, "EventType": k} for e, s, k in events],
                 "EnrichmentComplete": vm.complete, "Backlog": {"hub": 0}, "Vm": vm.data()},
    }


def report(state: str, vm: AgentVm, event_id: str, t: float, *, event_type: str = "Reboot",
           resources: list[str] | None = None, not_before: float | None = None,
           source: str = "Platform", extra: dict[str, Any] | None = None, suffix: str = "") -> dict[str, Any]:
    """A transition or audit CloudEvent of ``vm`` for ``event_id`` (``state``: scheduled, started, ...)."""
    status = "Started" if state in ("started", "completed") else "Scheduled"
    raw = {
        "EventId": event_id, "EventType": event_type, "ResourceType": "VirtualMachine",
        "Resources": resources if resources is not None else [vm.name], "EventStatus": status,
        "NotBefore": format_datetime(datetime.fromtimestamp(not_before, UTC), usegmt=True)
        if not_before is not None and status == "Scheduled" else "",
        "Description": "maintenance", "EventSource": source, "DurationInSeconds": -1,
    }
    scheduled = not_before is not None and status == "Scheduled"
    data = {**raw, "NotBeforeUtc": iso(not_before) if scheduled else None,
            "DocumentIncarnation": 2, "AffectsThisVm": vm.name in raw["Resources"], "Vm": vm.data(),
            **(extra or {})}
    eventstatus = {"completed": "Completed", "canceled": "Canceled"}.get(state, status)
    return {
        "specversion": "1.0", "type": PREFIX + state, "id": f"{event_id}/{state}{suffix}",
        "source": vm.source, "subject": event_id, "time": iso(t), "datacontenttype": "application/json",
        "eventtype": event_type, "eventstatus": eventstatus, "incarnation": 2,
        "vmid": vm.vm_id if vm.complete else vm.name, "data": data,
    }


def approved(vm: AgentVm, event_id: str, t: float, by: str = "coordinator:" + SOURCE,
             **kw: Any) -> dict[str, Any]:
    return report("approved", vm, event_id, t, extra={"ApprovedBy": by}, **kw)


def rejected(vm: AgentVm, event_id: str, t: float, message_id: str, code: str) -> dict[str, Any]:
    event = report("approvalrejected", vm, event_id, t, suffix=f"/{message_id}")
    event["data"].update({"Reason": f"rejected: {code}", "ReasonCode": code,
                          "Message": {"Id": message_id, "Source": SOURCE, "EventId": event_id,
                                      "Authentic": True}})
    return event


@dataclass
class Fleet:
    """A coordinator's fold fed by hand; ``decide`` folds the decisions it makes, as the service does."""

    policy: Policy = field(default_factory=Policy)
    state: FleetState = field(default_factory=FleetState)
    stats: FoldStats = field(default_factory=FoldStats)
    limits: Limits = field(default_factory=Limits)

    def fold(self, *events: dict[str, Any]) -> None:
        for event in events:
            fold_event(self.state, event, self.stats, self.limits)

    def fold_one(self, event: dict[str, Any]) -> str:
        """Fold one event; the fold's outcome."""
        return fold_event(self.state, event, self.stats)

    def beat(self, *vms: AgentVm, t: float = T0) -> None:
        self.fold(*(heartbeat(vm, t) for vm in vms))

    def announce(self, event_id: str, affected: list[AgentVm], seen_by: list[AgentVm] | None = None, *,
                 t: float = T0, not_before: float | None = None, event_type: str = "Reboot",
                 source: str = "Platform") -> None:
        """Every VM of ``seen_by`` (default: the affected ones) reports the event Scheduled."""
        names = [vm.name for vm in affected]
        for vm in seen_by if seen_by is not None else affected:
            self.fold(report("scheduled", vm, event_id, t, event_type=event_type, resources=names,
                             not_before=not_before if not_before is not None else t + 900, source=source))

    def transition(self, state: str, event_id: str, affected: list[AgentVm], *, t: float,
                   event_type: str = "Reboot") -> None:
        names = [vm.name for vm in affected]
        for vm in affected:
            self.fold(report(state, vm, event_id, t, event_type=event_type, resources=names))

    def decide(self, now: float, *, apply: bool = True, send: bool = True) -> Evaluation:
        """A pass; ``apply`` folds its decisions, ``send`` then the ``sent`` record of every approval
        message it asks for, at ``now`` (the queue answers at once)."""
        result = evaluate(self.state, self.policy, now)
        if apply:
            for decision in result.decisions:
                fold_event(self.state, to_dict(decision, SOURCE))
            if send:
                self.sent(*result.sends, t=now)
        return result

    def sent(self, *approve_ids: str, t: float) -> None:
        """The service's ``sent`` records: each approval's message is in its queue at ``t``."""
        for ident in approve_ids:
            fold_event(self.state, to_dict(sent(self.state.decisions[ident], "queue", t), SOURCE))

    def apply(self, *decisions: Any) -> None:
        for decision in decisions:
            fold_event(self.state, to_dict(decision, SOURCE))

    def verdict(self, result: Evaluation, event_id: str) -> Any:
        return result.verdicts[event_id.lower()]


def kinds(result: Evaluation) -> list[tuple[str, str | None, str]]:
    """(kind, EventId, ReasonCode) of each decision of a pass."""
    return [(d.kind, d.event_id, d.code) for d in result.decisions]


def approvals(result: Evaluation) -> list[str]:
    return [d.event_id or "" for d in result.decisions if d.kind == "approve"]


# An availability set of six VMs over three fault and five update domains, as most tests use.
SET = [AgentVm(f"web-{i}", fd=str(i % 3), ud=str(i % 5)) for i in range(6)]


def avset(policy: Policy | None = None, vms: list[AgentVm] = SET, t: float = T0) -> Fleet:
    """A watched availability set whose VMs learned their group from one past event."""
    fleet = Fleet(policy or Policy())
    fleet.beat(*vms, t=t)
    fleet.announce("OLD", [vms[0]], vms, t=t - 7200, not_before=t - 6000)
    fleet.transition("completed", "OLD", [vms[0]], t=t - 3600)
    return fleet


def pause_event(scope: str, seq: int = 1, t: float = T0) -> dict:
    return {"type": "com.azure.scheduledevents.coordinator.pause", "id": f"coordinator/pause/{scope}/{seq}",
            "source": SOURCE, "subject": scope, "time": report("scheduled", SET[0], "x", t)["time"],
            "data": {"Scope": scope, "Sequence": seq, "Actor": "person:ops", "Reason": "incident"}}
