"""What ``status`` and the page show of Azure's view: agentless VMs, and each place where Azure and a
VM's agent disagree (a *finding*). Pure, JSON-serialisable.

A finding is ``{"name", "vmId", "field", "agent", "azure", "eventId"}``:

- ``field`` ``status``: the agent reported an event completed or canceled that Azure still shows
  Scheduled or Started (the fold takes Azure's: fold/azure.py). While Azure's feed is a few
  seconds behind an honest agent this shows briefly; one that stays is a VM saying its
  maintenance is over when it is not.
- ``field`` ``subscription``, ``resource group``, ``zone``, ``scale set``, ``fault domain``,
  ``update domain`` or ``tag:<name>``: what the agent said of its own VM (its claim,
  fold/topology.py) is not what Azure says; Azure's is used. A VM that lies about its group is a
  finding.
- ``field`` ``health``: the agent's ``[health]`` verdict (its newest heartbeat, sent after Resource
  Health's last change) and Azure's availability disagree: the agent says ``healthy`` while Azure
  says Unavailable or Degraded, or ``unhealthy`` while Azure says Available. Either way the VM
  counts as down (decide/availability.py); the finding says which side to look at.

``said(state, vm, event)``: what the VM's agent and what Azure last said of one event, for the
page and ``status`` (``{"agent": "completed" | ... | None, "azure": "Started" | ... | None}``).
"""

from __future__ import annotations

from typing import Any

from ..decide.scopes import ScopeIndex
from ..fold.health import azure_health
from ..fold.state import CANCELED, COMPLETED, RANK_NAMES, TERMINAL, FleetState
from ..fold.topology import agent_reported, claim

AZURE_STATUS = {1: "Scheduled", 2: "Started", 3: "Canceled", 4: "Completed"}
FIELDS = ("subscription", "resource group", "zone", "scale set", "fault domain", "update domain")


def said(state: FleetState, vm_key: str, event_key: str) -> dict[str, str | None]:
    record = state.events.get(event_key)
    event = state.azure.events.get(event_key)
    agent = record.reports.get(vm_key) if record is not None else None
    return {"agent": RANK_NAMES.get(agent) if agent else None,
            "azure": AZURE_STATUS.get(event.rank) if event is not None else None}


def findings(state: FleetState, idx: ScopeIndex) -> list[dict[str, Any]]:
    """Every current disagreement between Azure and an agent (module docstring), by VM name."""
    out: list[dict[str, Any]] = []
    members = set(idx.members)
    for key, was in state.azure.claims.items():
        vm = state.vms.get(key)
        if vm is None or key not in members or key not in state.azure.vms or not was[0]:
            continue
        now = claim(vm)
        for name, agent, azure in zip(FIELDS, was[:6], now[:6], strict=True):
            if agent.lower() != azure.lower():
                out.append(_finding(vm.name, vm.vm_id, name, agent, azure))
        azure_tags = dict(now[6])
        for tag, value in was[6]:
            if azure_tags.get(tag, "").lower() != value.lower():
                out.append(_finding(vm.name, vm.vm_id, f"tag:{tag}", value, azure_tags.get(tag, "")))
    for event_key, event in state.azure.events.items():
        record = state.events.get(event_key)
        if record is None or event.rank >= TERMINAL:
            continue
        for reporter, rank in record.reports.items():
            vm = state.vms.get(idx.key(reporter))
            if rank in (COMPLETED, CANCELED) and vm is not None:
                out.append(_finding(vm.name, vm.vm_id, "status", RANK_NAMES[rank],
                                    AZURE_STATUS.get(event.rank, ""), record.event_id))
    out += health_findings(state, idx)
    return sorted(out, key=lambda f: (f["name"].lower(), f["field"], f["eventId"] or ""))


def health_findings(state: FleetState, idx: ScopeIndex) -> list[dict[str, Any]]:
    """Where a VM's agent and Resource Health disagree on its health (module docstring)."""
    out: list[dict[str, Any]] = []
    if not state.azure.health:
        return out
    for key in idx.members:
        vm = state.vms[key]
        azure = azure_health(state, key) if vm.health in ("healthy", "unhealthy") else None
        if azure is None or vm.last_heartbeat is None or vm.last_heartbeat < azure.occurred:
            continue
        healthy = vm.health == "healthy"
        if (healthy and azure.down) or (not healthy and azure.state == "Available"):
            agent = vm.health if vm.health == "healthy" else f"unhealthy ({vm.health_reason})"
            out.append(_finding(vm.name, vm.vm_id, "health", agent, azure.state))
    return out


def _finding(name: str, vm_id: str, field: str, agent: str, azure: str,
             event_id: str | None = None) -> dict[str, Any]:
    return {"name": name, "vmId": vm_id, "field": field, "agent": agent, "azure": azure, "eventId": event_id}


def agentless(state: FleetState, idx: ScopeIndex) -> set[str]:
    """VMs Azure lists that no agent ever reported."""
    return {k for k in state.azure.vms if k in idx.fleet and not agent_reported(state.vms[k])}


def summary(state: FleetState, idx: ScopeIndex, now: float) -> dict[str, Any] | None:
    """``status``'s ``azure`` part: None without Azure's input."""
    view = state.azure
    if not view.vms and not view.events and not view.synced:
        return None
    return {
        "vms": len(view.vms), "events": len(view.events),
        "agentless": sorted(state.vms[k].name for k in agentless(state, idx)),
        "syncedAgeSeconds": {sub: round(max(0.0, now - t), 1) for sub, t in sorted(view.synced.items())},
        "findings": findings(state, idx),
    }
