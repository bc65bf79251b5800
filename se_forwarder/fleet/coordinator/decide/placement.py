"""Where one VM is: its group, its scopes, whether it stands for another or was deleted. Pure.

The rules of scopes.py's docstring, for one VM (or one learned set) at a time, so that the scope
index can be kept up to date from the VMs that changed rather than built again for the fleet:

- ``explicit_group``: a VM's group by its ``group_tag``, its scale set or the availability set
  Azure names; ``learned``: otherwise, the name of its co-reception set, after the member whose
  ``label`` sorts first;
- ``scope_keys``: every scope a VM is in, each key one string shared by all its VMs;
- ``placed_scopes``: where a VM whose claim is beyond its accepted placements counts in scope
  sizes (scopes.py's inventory);
- ``components``: the learned sets, a ``host:`` record's joined to its VM's;
- ``aliases``: which ``host:`` records of a name are the one complete VM of that name;
- ``retired``: the VMs a completed ``Terminate`` deleted.
"""

from __future__ import annotations

import sys

from ..config.policy import Policy
from ..fold import inventory
from ..fold import topology as azure_topology
from ..fold.state import CANCELED, STARTED, FleetState, Vm

FLEET = "fleet"
Label = tuple[str, str, str, str]  # (subscription, resource group, name, key) of a learned set's member


def explicit_group(state: FleetState, policy: Policy, vm: Vm) -> str | None:
    """A VM's group by its tag, scale set or Azure's availability set (None: learned by co-reception)."""
    if policy.group_tag and policy.group_tag in vm.tags:
        return "tag/" + vm.tags[policy.group_tag].lower()
    if vm.scale_set:
        return f"vmss/{vm.subscription or '-'}/{vm.resource_group or '-'}/{vm.scale_set}"
    return azure_topology.group(state, vm.key)


def label(vm: Vm) -> Label:
    """What a learned set is named after: the member whose label sorts first."""
    return (vm.subscription or "-", vm.resource_group or "-", vm.name.lower() or "-", vm.key)


def learned(first: Label) -> str:
    sub, rg, name, _ = first
    return f"set/{sub}/{rg}/{name}"


_KINDS: dict[tuple[str, ...], tuple[str, ...]] = {}


def scope_keys(vm: Vm, group: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every scope ``vm`` is in (scopes.py's table), and the kind of each. Each key is interned (a
    scope's key is one string however many VMs are in it), and so is each tuple of kinds."""
    sub, rg = vm.subscription or "-", vm.resource_group or "-"
    intern = sys.intern
    scopes = [FLEET, intern(f"group:{group}")]
    kinds = [FLEET, "group"]
    if vm.scale_set:
        scopes.append(intern(f"scale_set:{sub}/{rg}/{vm.scale_set}"))
        kinds.append("scale_set")
    if vm.zone:
        scopes.append(intern(f"zone:{vm.location or '-'}/{vm.zone.lower()}"))
        kinds.append("zone")
    if vm.fault_domain:
        scopes.append(intern(f"fault_domain:{group}/{vm.fault_domain.lower()}"))
        kinds.append("fault_domain")
    if vm.update_domain:
        scopes.append(intern(f"update_domain:{group}/{vm.update_domain.lower()}"))
        kinds.append("update_domain")
    if vm.resource_group:
        scopes.append(intern(f"resource_group:{sub}/{rg}"))
        kinds.append("resource_group")
    if vm.tags:
        for name, value in sorted(vm.tags.items()):
            scopes.append(intern(f"tag:{name}={value.lower()}"))
            kinds.append(intern(f"tag:{name}"))
    shape = tuple(kinds)
    return tuple(scopes), _KINDS.setdefault(shape, shape)


def placed_scopes(state: FleetState, policy: Policy, key: str, group: str) -> set[str] | None:
    """The scopes a VM counts in for sizes when its claim is beyond its accepted placements (the
    scopes of those placements); None when it counts wherever it claims."""
    if not inventory.unplaced(state, key):
        return None
    vm, out = state.vms[key], set[str]()
    for where in inventory.accepted(state, key):
        there = inventory.as_vm(vm, where)
        out.update(scope_keys(there, explicit_group(state, policy, there) or group)[0])
    return out


def components(root: dict[str, str], alias: dict[str, str]) -> dict[str, str]:
    """VM key -> a representative of its co-reception set (``root``: VM -> its set's root), a
    ``host:`` record's (``alias``: host: record -> the VM it is) joined to its VM's."""
    joined: dict[str, str] = {}

    def top(r: str) -> str:
        while r in joined:
            r = joined[r]
        return r

    for host in root:
        target = alias.get(host)
        if target is not None:
            a, b = top(root[host]), top(root[target])
            if a != b:
                joined[max(a, b)] = min(a, b)
    return {key: top(r) for key, r in root.items()} if joined else root


def aliases(state: FleetState, lowered: str) -> dict[str, str]:
    """``host:`` record (any VM without instance metadata) of this name -> the complete VM it is,
    when exactly one complete VM goes by that name."""
    bearers = state.named(lowered)
    complete = [k for k in bearers if state.vms[k].complete]
    if len(complete) != 1:
        return {}
    return {k: complete[0] for k in bearers if not state.vms[k].complete}


def retired(state: FleetState) -> set[str]:
    """VMs named in a completed Terminate's Resources that reported it Started (or completed)
    themselves and were not heard from after it completed."""
    out: set[str] = set()
    for key, (completed_at, resources) in state.terminated.items():
        record = state.events.get(key)
        if record is None or completed_at is None:
            continue
        names = {name.lower() for name in resources}
        for reporter, rank in record.reports.items():
            vm = state.vms.get(reporter)
            if vm is None or rank < STARTED or rank == CANCELED or vm.name.lower() not in names:
                continue
            own = record.finished.get(reporter)
            if vm.last_heard < completed_at or (own is not None and vm.last_heard <= own):
                out.add(reporter)
    return out
