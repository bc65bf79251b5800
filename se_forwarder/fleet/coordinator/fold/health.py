"""Health in the fold: each VM's application verdict from its heartbeats, Azure's Resource Health of
each VM, and the ``recovered`` reports. Pure, never raises on content.

- **The agent's verdict.** A verified heartbeat newer than the VM's last carries ``data.Health``
  (docs/health.md): ``{"Verdict": "healthy" | "unhealthy" | "unknown", "Probe", "Reason", ...}`` or
  ``null`` without ``[health]``. The newest heartbeat's verdict is the VM's (``Vm.health``, ``""``
  for none or anything else); while unhealthy, ``Vm.health_reason`` says which probe and why (at
  most ``REASON_CHARS`` printable characters). decide/availability.py counts an unhealthy VM down.
- **Azure's word** (``AzureView.health``, keyed by the VM's ARM id in lower case): from the feed's
  ``AvailabilityStatusChanged`` events and Resource Graph's ``healthresources`` rows, as
  edge/azure_facts.py read them. The observation with the newest ``occurredTime`` wins; of two at
  one time, a down state (Unavailable, Degraded) wins, then the state's name and the source: so any order of
  arrival, and any repeat, gives the same view.
- **``recovered``**: fold/reports.py records a VM's own ``recovered`` report of an event
  (``EventRecord.recovered``, its earliest); decide/recovery.py reads it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .azure_state import DOWN_STATES, AzureHealth, HealthFacts
from .caps import FOLDED, free_text
from .state import EventRecord, FleetState, Vm

VERDICTS = ("healthy", "unhealthy", "unknown")
REASON_CHARS = 300


_VERDICTS = {verdict: verdict for verdict in VERDICTS}
_RANK = {"": 0, "healthy": 1, "unknown": 2, "unhealthy": 3}


def verdict(state: FleetState, vm: Vm, data: dict[str, Any], capped: Counter[str], *,
            tie: bool = False) -> None:
    """The VM's verdict from its newest heartbeat's ``data`` (module docstring). ``tie``: a heartbeat
    of the same time as the one read last: the worse of the two is kept, so any order gives one."""
    health = data.get("Health")
    said = health.get("Verdict") if isinstance(health, dict) else None
    found = _VERDICTS.get(said, "") if isinstance(said, str) else ""  # the constant: one string for all VMs
    why = ""
    if found == "unhealthy":
        assert isinstance(health, dict)
        probe = free_text(health.get("Probe"), 80, capped)
        reason = free_text(health.get("Reason"), REASON_CHARS, capped)
        why = (f"{probe}: {reason}" if probe and reason else probe or reason)[:REASON_CHARS]
    if not tie or (_RANK[found], why) > (_RANK[vm.health], vm.health_reason):
        vm.health, vm.health_reason = found, why
        if found == "unhealthy" and state.unhealthy is not None:
            state.unhealthy.add(vm.key)


def unhealthy(state: FleetState) -> set[str]:
    """The keys of the VMs whose agent says they are unhealthy now: kept as verdicts are folded (a
    VM that is well again, or gone, is dropped here), so a decision pass does not look at every VM."""
    if state.unhealthy is None:
        state.unhealthy = {key for key, vm in state.vms.items() if vm.health == "unhealthy"}
    vms = state.vms
    well = [key for key in state.unhealthy if (vm := vms.get(key)) is None or vm.health != "unhealthy"]
    state.unhealthy.difference_update(well)
    return state.unhealthy


def _order(health: AzureHealth) -> tuple[float, bool, str, str]:
    return (health.occurred, health.state in DOWN_STATES, health.state, health.via)


def fold_azure_health(state: FleetState, facts: HealthFacts) -> str:
    """One observation of a VM's availability by Resource Health (module docstring)."""
    new = AzureHealth(facts.state, facts.occurred, facts.via)
    old = state.azure.health.get(facts.resource_id)
    if old is None or _order(new) > _order(old):
        state.azure.health[facts.resource_id] = new
        state.note("azure_health", facts.resource_id)
    return FOLDED


def azure_health(state: FleetState, vm_key: str) -> AzureHealth | None:
    """What Resource Health last said of the VM (by its ARM id, Azure's or its agent's), or None."""
    view = state.azure
    if not view.health:
        return None
    facts = view.vms.get(vm_key)
    rid = facts.resource_id if facts is not None else ""
    if not rid:
        vm = state.vms.get(vm_key)
        rid = vm.resource_id if vm is not None else ""
    return view.health.get(rid.lower()) if rid else None


def awaiting_recovery(state: FleetState, record: EventRecord) -> bool:
    """A VM still in the fleet reported ``record`` completed and not yet ``recovered``
    (retention.py keeps such an event while ``free_slot = "recovered"``)."""
    return any(vm not in record.recovered and vm in state.vms for vm in record.finished)


def forget(state: FleetState) -> None:
    """Drop Azure's health of VMs the fold no longer knows, once Azure's topology is known."""
    view = state.azure
    if not view.health or not view.vms:
        return
    known = {v.resource_id.lower() for v in view.vms.values()} | \
        {v.resource_id.lower() for v in state.vms.values() if v.resource_id}
    for rid in [r for r in view.health if r not in known]:
        del view.health[rid]
        state.note("azure_health", rid)
