"""Each VM's state in its group, as ``/v1/groups`` and the fleet page show it. Pure, JSON-serialisable.

``groups(state, policy, now, group=None, search=None)``: per group ``{"group", "size",
"unavailable", "vms": [...]}`` with each VM ``{"name", "vmId", "resourceGroup", "zone",
"faultDomain", "updateDomain", "state", "watched", "heartbeatAgeSeconds", "event"}``; ``state`` is
``started``, ``due`` (started by Azure at its NotBefore, nobody reported it yet), ``approved``,
``completed`` (within min_healthy), ``prepare-failed``, ``not-watched``, ``recovering``,
``not-recovered``, ``unhealthy``, ``azure-unavailable`` (decide/availability.py),
``pending`` (a Scheduled event affects it) or ``ok``; ``event`` is ``{"eventId", "eventType",
"notBeforeUtc", "status", "said"}`` of the event behind that state (``said``: what the VM's agent
and what Azure said of it, azure_view.said), or null; ``agentless``: Azure lists it and no agent
ever reported; ``findings``: where its agent and Azure disagree (``"<field>: agent X, Azure Y"``).
``search`` keeps the VMs whose name contains it (case-insensitive); groups with no VM left are omitted.

``Rows(state, policy, now, evaluation)`` is what ``groups`` works from, made once per evaluation:
``state_of(key)`` a VM's state alone (a few lookups: what a group's summary counts), ``vm(key)`` the
whole entry. ``summarise(rows, listed)`` gives every group's counts and its VMs that are not
``ok`` or that Azure and their agent disagree on (at most ``listed`` of them per group): the fleet
page's groups above a size (view/page.py), where a group's other VMs are fetched when it is opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ....timestamps import rfc3339_or_none
from ..config.policy import Policy
from ..decide.availability import is_due, unwatched
from ..decide.evaluate import Evaluation, evaluate
from ..decide.scopes import last_heartbeat, resolve
from ..fold.state import COMPLETED, RANK_NAMES, STARTED, EventRecord, FleetState, Vm
from . import azure as azure_view


def _event_ref(record: EventRecord, status: str) -> dict[str, Any]:
    return {"eventId": record.event_id, "eventType": record.event_type,
            "notBeforeUtc": rfc3339_or_none(record.not_before), "status": status}


def _events_by_vm(state: FleetState, ev: Evaluation) -> dict[str, dict[str, Any]]:
    """VM key -> the event behind its state: a started or approved one first, then a pending one."""
    assert ev.index is not None
    out: dict[str, dict[str, Any]] = {}
    weight: dict[str, int] = {}
    keys = list(state.open_events) + [k for k in state.settling if k in state.events]
    for key in sorted(keys):
        record = state.events[key]
        if record.rank == STARTED or (record.ran and key in state.open_events):
            status, w = "started", 4  # started, or ended for some VMs but not for all of them
        elif key in state.open_events and is_due(state, record, ev.now):
            status, w = "due", 4  # Azure starts it at its NotBefore, whoever approved it or not
        elif record.rank == COMPLETED:
            status, w = "completed", 2
        elif ev.verdicts.get(key) is not None and ev.verdicts[key].code == "approved":
            status, w = "approved", 3
        else:
            status, w = RANK_NAMES.get(record.rank, "unknown"), 1
        for vm in resolve(state, ev.index, record).vms:
            if w > weight.get(vm, 0):
                weight[vm], out[vm] = w, _event_ref(record, status)
    return out


class Rows:
    """The VMs' states of one evaluation (module docstring)."""

    def __init__(self, state: FleetState, policy: Policy, now: float, evaluation: Evaluation) -> None:
        assert evaluation.index is not None
        self.state, self.now, self.ev, self.idx = state, now, evaluation, evaluation.index
        self.events = _events_by_vm(state, evaluation)
        self.not_watched = unwatched(state, policy, self.idx, now)
        self.agentless = azure_view.agentless(state, self.idx)
        self.found: dict[str, list[str]] = {}
        for f in azure_view.findings(state, self.idx):
            self.found.setdefault(f["vmId"].lower(), []).append(
                f"{f['field']}: agent {f['agent'] or '-'}, Azure {f['azure'] or '-'}")

    def state_of(self, key: str) -> str:
        reason = self.ev.unavailable.get(key)
        if reason:
            return reason
        event = self.events.get(key)
        return "pending" if event is not None and event["status"] == "scheduled" else "ok"

    def vm(self, key: str) -> dict[str, Any]:
        vm, state_name = self.state.vms[key], self.state_of(key)
        event = self.events.get(key)
        if state_name == "ok" or event is None:
            event = None  # completed longer than min_healthy ago
        else:
            event = {**event, "said": azure_view.said(self.state, key, event["eventId"].lower())}
        beat = last_heartbeat(self.state, self.idx, key)
        return {
            "name": vm.name, "vmId": vm.vm_id, "resourceGroup": vm.resource_group, "zone": vm.zone,
            "faultDomain": vm.fault_domain, "updateDomain": vm.update_domain, "state": state_name,
            "watched": key not in self.not_watched,
            "heartbeatAgeSeconds": None if beat is None else round(max(0.0, self.now - beat), 1),
            "event": event, "agentless": key in self.agentless,
            "findings": self.found.get(vm.vm_id.lower(), []),
        }


def place(vm: Vm) -> tuple[str, str, str]:
    """The order of a group's VMs: fault domain, update domain, name."""
    return vm.fault_domain, vm.update_domain, vm.name.lower()


def groups(state: FleetState, policy: Policy, now: float, evaluation: Evaluation | None = None, *,
           group: str | None = None, search: str | None = None, keys: bool = False) -> list[dict[str, Any]]:
    """Per group, its VMs and their state (module docstring); ``keys``: each VM's fold key too."""
    ev = evaluation if evaluation is not None else evaluate(state, policy, now)
    rows = Rows(state, policy, now, ev)
    needle = search.lower() if search else None
    out: dict[str, dict[str, Any]] = {}
    shown: dict[str, list[str]] = {}
    for key in rows.idx.members:
        name = rows.idx.group_of[key]
        if group is not None and name != group:
            continue
        entry = out.setdefault(name, {"group": name, "size": 0, "unavailable": 0, "vms": []})
        entry["size"] += 1
        entry["unavailable"] += key in ev.unavailable
        if not needle or needle in state.vms[key].name.lower():
            shown.setdefault(name, []).append(key)
    for name, entry in out.items():
        for key in sorted(shown.get(name, ()), key=lambda k: place(state.vms[k])):
            entry["vms"].append(rows.vm(key))
            if keys:
                entry["vms"][-1]["key"] = key
    return sorted((g for g in out.values() if g["vms"] or not needle), key=lambda g: g["group"])


@dataclass(slots=True)
class Summary:
    """One group's summary: its size, VMs unavailable, VMs per state, and its VMs worth a look."""

    group: str
    size: int = 0
    unavailable: int = 0
    zonal: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    notable: int = 0  # VMs not ok, or flagged (Rows.flagged)
    listed: list[str] = field(default_factory=list)  # the first ``listed`` of them (VM keys)
    members: list[str] = field(default_factory=list)  # every VM of the group (keys)


def summarise(rows: Rows, listed: int | None) -> list[Summary]:
    """Every group's Summary, by group name; at most ``listed`` notable VMs listed per group, or
    (None) every VM. Costs a look at each VM's group, and the state of those not ``ok`` only."""
    out: dict[str, Summary] = {}
    vms, group_of, idx = rows.state.vms, rows.idx.group_of, rows.idx
    zoned: set[str] = set()
    for key in idx.members:
        name = group_of[key]
        entry = out.get(name)
        if entry is None:
            entry = out[name] = Summary(name)
        entry.members.append(key)
        if vms[key].zone:
            zoned.add(name)
    found = rows.found
    flagged = rows.agentless | {k for k in (idx.fleet if found else ()) if vms[k].vm_id.lower() in found}
    notable = set(rows.ev.unavailable) | flagged
    notable.update(k for k, e in rows.events.items() if e["status"] == "scheduled")
    marked: dict[str, list[str]] = {}
    for key in sorted(notable & idx.fleet):
        entry = out[group_of[key]]
        state_name = rows.state_of(key)
        entry.counts[state_name] = entry.counts.get(state_name, 0) + 1
        entry.unavailable += key in rows.ev.unavailable
        if state_name != "ok" or key in flagged:
            marked.setdefault(entry.group, []).append(key)
    for entry in out.values():
        entry.size = len(entry.members)
        entry.zonal = entry.group in zoned
        ok = entry.size - sum(entry.counts.values())
        if ok:
            entry.counts["ok"] = entry.counts.get("ok", 0) + ok
        mine = marked.get(entry.group, [])
        entry.notable = len(mine)
        entry.listed = list(entry.members) if listed is None else mine[:listed]
    return [out[name] for name in sorted(out)]
