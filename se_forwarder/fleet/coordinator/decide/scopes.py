"""Groups and scopes of the fleet, derived from the fold; who an event affects; who is unavailable.

Groups. A VM's group is, in this order: ``tag/<value>`` when it carries the configured
``group_tag``; ``vmss/<subscription>/<resource group>/<scale set>`` when it is in a scale set;
``avset/<subscription>/<resource group>/<availability set>`` when Azure names its availability set
(fold/topology.py: with ``[azure]``, a VM's topology is Azure's, whatever its agent says);
otherwise the set of VMs that reported the same EventIds (co-reception: an availability set),
named ``set/<subscription>/<resource group>/<name>`` after its member that sorts first (so a
learned group's name can change while it is being learned; give groups a tag for stable names).
A VM that never shared an event is a group of its own. Unknown parts are written ``-``.

Scopes (keys in lower case, as ``status`` shows them and ``pause`` takes them):

===================  ==================================================  =======================
kind                 key                                                 holds
===================  ==================================================  =======================
``fleet``            ``fleet``                                           every VM
``group``            ``group:<group>``                                   the group's VMs
``scale_set``        ``scale_set:<subscription>/<rg>/<name>``            the scale set's VMs
``zone``             ``zone:<location>/<zone>``                          zonal VMs (per region)
``fault_domain``     ``fault_domain:<group>/<fd>``                       FD of one group
``update_domain``    ``update_domain:<group>/<ud>``                      UD of one group
``resource_group``   ``resource_group:<subscription>/<rg>``              (per subscription)
``tag:<name>``       ``tag:<name>=<value>``                              VMs with that tag value
===================  ==================================================  =======================

A VM lacking an attribute (no zone, no scale set, no topology yet) is in no scope of that kind.

Inventory. A VM is in the scopes it claims (it counts as unavailable there), but a percentage
budget's limit is taken of the scope's *inventory*: the VMs whose accepted placement puts them there
too (their first placement, one an operator confirmed, or Azure's: fold/inventory.py), so no claim
grows a budget. ``outside`` lists the VMs whose claim is beyond their accepted placements, with the
scopes they claim but do not count in.

Deleted VMs. A VM named in the Resources of a completed ``Terminate`` (reported under that type
alone) that itself reported it Started or completed, and was not heard from after that
completion (its own, else the latest), was deleted (scale-in): it leaves the fleet at once rather
than counting as not watched until ``forget_after``. Heard from again, it is back.

Incomplete VMs. Reports made while an agent had no instance metadata come from ``host:<name>``.
When exactly one complete VM has that name, the ``host:`` record is the same machine: it is left
out of the fleet and its reports count as that VM's. Otherwise it stays a VM of its own (with
only the fleet and group scopes), counted like any other: the conservative choice.

Resolution. An event's ``Resources`` are VM names. Each resolves, case-insensitively, to the VMs
that reported the event under that name and the VMs of their groups with that name, and, when
Azure reported the event, the VM Azure files under that name in the event's resource group
(azure_topology.names); so equal names in other resource groups or groups do not collide, and a VM
that claims a peer's name does not hide the peer. A name that matches nothing is *unresolved*.

Which VMs are unavailable, and why: availability.py.

The index is rebuilt (O(VMs)) only when the fold's ``version`` changed; resolutions are cached per
event revision. Everything else per decision pass is O(open events) plus one pass over the VMs
for heartbeat ages.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..config.policy import Budget, Policy
from ..fold import inventory
from ..fold import topology as azure_topology
from ..fold.state import CANCELED, STARTED, EventRecord, FleetState, Vm
from .queues import shared_queues

FLEET = "fleet"


@dataclass(frozen=True)
class Resolution:
    vms: tuple[str, ...]  # VM keys the event affects (in the order of Resources)
    unresolved: tuple[str, ...]  # names of Resources that match no known VM


@dataclass
class ScopeIndex:
    members: list[str]  # VM keys of the fleet (superseded host: records left out)
    alias: dict[str, str]  # host: key -> the complete VM it is
    extra_heartbeats: dict[str, list[str]]  # VM key -> its host: records (their heartbeats count)
    group_of: dict[str, str]
    scopes_of: dict[str, tuple[str, ...]]  # every scope of a VM
    budget_scopes_of: dict[str, tuple[str, ...]]  # the scopes with a budget
    kind_of: dict[str, str]  # scope -> kind
    size: Counter[str]
    budget_of: dict[str, Budget]  # scope -> its budget
    names: dict[str, dict[str, list[str]]]  # group -> lower-case name -> VM keys
    inventory: Counter[str] = field(default_factory=Counter)  # scope -> VMs its percentage is taken of
    outside: dict[str, tuple[str, ...]] = field(default_factory=dict)  # VM -> scopes claimed, not counted
    shared_queue: dict[str, str] = field(default_factory=dict)  # VM -> its queue another VM shares
    resolved: dict[str, tuple[int, Resolution]] = field(default_factory=dict)
    unwatched_at: tuple[tuple[float, float], set[str]] | None = None
    cache: dict[str, Any] = field(default_factory=dict)  # availability.py's, per index and time

    def limit(self, scope: str) -> int:
        return self.budget_of[scope].limit(self.inventory[scope])

    def key(self, vm_key: str) -> str:
        return self.alias.get(vm_key, vm_key)


def index(state: FleetState, policy: Policy) -> ScopeIndex:
    """The scope index for this state and policy (cached on the state until its version changes)."""
    cache_key = (state.version, policy.group_tag, tuple(sorted(policy.by_kind)), policy.queue_template)
    cached = state.cache.get("index")
    if cached is not None and cached[0] == cache_key:
        return cached[1]
    built = _build(state, policy)
    state.cache["index"] = (cache_key, built)
    return built


def _build(state: FleetState, policy: Policy) -> ScopeIndex:
    complete_by_name: dict[str, list[str]] = {}
    for key, vm in state.vms.items():
        if vm.complete:
            complete_by_name.setdefault(vm.name.lower(), []).append(key)
    alias: dict[str, str] = {}
    extra: dict[str, list[str]] = {}
    for key, vm in state.vms.items():
        same = complete_by_name.get(vm.name.lower(), ())
        if not vm.complete and len(same) == 1:
            alias[key] = same[0]
            extra.setdefault(same[0], []).append(key)
    state.retired = _retired(state)
    members = sorted(k for k in state.vms if k not in alias and k not in state.retired
                     and alias.get(k, k) not in state.retired)
    component = _components(state, alias)
    group_of = _groups(state, policy, members, component)
    scopes_of: dict[str, tuple[str, ...]] = {}
    budget_scopes_of: dict[str, tuple[str, ...]] = {}
    kind_of: dict[str, str] = {}
    size: Counter[str] = Counter()
    budget_of: dict[str, Budget] = {}
    names: dict[str, dict[str, list[str]]] = {}
    counted: Counter[str] = Counter()
    outside: dict[str, tuple[str, ...]] = {}
    for key in members:
        vm, group = state.vms[key], group_of[key]
        pairs = scope_keys(vm, group)
        scopes_of[key] = tuple(scope for _, scope in pairs)
        placed = _placed_scopes(state, policy, key, group)
        budgeted = []
        for kind, scope in pairs:
            kind_of[scope] = kind
            size[scope] += 1
            if placed is None or scope in placed:
                counted[scope] += 1
            budget = policy.by_kind.get(kind)
            if budget is not None:
                budget_of[scope] = budget
                budgeted.append(scope)
        if placed is not None:
            outside[key] = tuple(scope for scope in scopes_of[key] if scope not in placed)
        budget_scopes_of[key] = tuple(budgeted)
        names.setdefault(group, {}).setdefault(vm.name.lower(), []).append(key)
    shared = shared_queues(state, members, policy.queue_template)
    return ScopeIndex(members, alias, extra, group_of, scopes_of, budget_scopes_of, kind_of, size,
                      budget_of, names, counted, outside, shared)


def _placed_scopes(state: FleetState, policy: Policy, key: str, group: str) -> set[str] | None:
    """The scopes a VM counts in for sizes when its claim is beyond its accepted placements (the
    module docstring's inventory); None when it counts wherever it claims."""
    if not inventory.unplaced(state, key):
        return None
    vm, out = state.vms[key], set[str]()
    for where in inventory.accepted(state, key):
        there = inventory.as_vm(vm, where)
        out.update(scope for _, scope in scope_keys(there, _explicit_group(state, policy, there) or group))
    return out


def _retired(state: FleetState) -> set[str]:
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


def _components(state: FleetState, alias: dict[str, str]) -> dict[str, str]:
    """VM key -> a representative of its co-reception set, a host: record joined to its VM."""
    root = {key: state.groups.find(key) for key in state.vms}
    joined: dict[str, str] = {}

    def top(r: str) -> str:
        while r in joined:
            r = joined[r]
        return r

    for host, key in alias.items():
        a, b = top(root[host]), top(root[key])
        if a != b:
            joined[max(a, b)] = min(a, b)
    return {key: top(r) for key, r in root.items()}


def _groups(state: FleetState, policy: Policy, members: list[str], component: dict[str, str],
            ) -> dict[str, str]:
    explicit: dict[str, str] = {}
    label: dict[str, tuple[str, str, str, str]] = {}
    for key in members:
        vm = state.vms[key]
        named = _explicit_group(state, policy, vm)
        if named is not None:
            explicit[key] = named
        else:
            mine = (vm.subscription or "-", vm.resource_group or "-", vm.name.lower() or "-", key)
            root = component[key]
            if root not in label or mine < label[root]:
                label[root] = mine
    out: dict[str, str] = {}
    for key in members:
        if key in explicit:
            out[key] = explicit[key]
        else:
            sub, rg, name, _ = label[component[key]]
            out[key] = f"set/{sub}/{rg}/{name}"
    return out


def _explicit_group(state: FleetState, policy: Policy, vm: Vm) -> str | None:
    """A VM's group by its tag, scale set or Azure's availability set (None: learned by co-reception)."""
    if policy.group_tag and policy.group_tag in vm.tags:
        return "tag/" + vm.tags[policy.group_tag].lower()
    if vm.scale_set:
        return f"vmss/{vm.subscription or '-'}/{vm.resource_group or '-'}/{vm.scale_set}"
    return azure_topology.group(state, vm.key)


def scope_keys(vm: Vm, group: str) -> list[tuple[str, str]]:
    """(kind, scope key) of every scope ``vm`` is in (module docstring)."""
    sub, rg = vm.subscription or "-", vm.resource_group or "-"
    out = [(FLEET, FLEET), ("group", f"group:{group}")]
    if vm.scale_set:
        out.append(("scale_set", f"scale_set:{sub}/{rg}/{vm.scale_set}"))
    if vm.zone:
        out.append(("zone", f"zone:{vm.location or '-'}/{vm.zone.lower()}"))
    if vm.fault_domain:
        out.append(("fault_domain", f"fault_domain:{group}/{vm.fault_domain.lower()}"))
    if vm.update_domain:
        out.append(("update_domain", f"update_domain:{group}/{vm.update_domain.lower()}"))
    if vm.resource_group:
        out.append(("resource_group", f"resource_group:{sub}/{rg}"))
    for name, value in sorted(vm.tags.items()):
        out.append((f"tag:{name}", f"tag:{name}={value.lower()}"))
    return out


def resolve(state: FleetState, idx: ScopeIndex, record: EventRecord) -> Resolution:
    """The VMs ``record`` affects (module docstring), cached until the event or the index changes."""
    cached = idx.resolved.get(record.key)
    if cached is not None and cached[0] == record.revision:
        return cached[1]
    wanted = {name.lower(): name for name in record.resources}
    found: dict[str, set[str]] = {lowered: set() for lowered in wanted}
    groups: set[str] = set()
    for reporter in record.reports:
        key = idx.key(reporter)
        vm = state.vms.get(key)
        if vm is None or key not in idx.group_of:
            continue
        groups.add(idx.group_of[key])
        lowered = vm.name.lower()
        if lowered in found:
            found[lowered].add(key)
    for lowered in wanted:
        found[lowered].update(k for g in groups for k in idx.names.get(g, {}).get(lowered, ()))
    for lowered, key in azure_topology.names(state, record).items():
        if lowered in found and key in idx.group_of:
            found[lowered].add(key)
    vms: list[str] = []
    for lowered in wanted:
        vms.extend(k for k in sorted(found[lowered]) if k not in vms)
    result = Resolution(tuple(vms), tuple(wanted[n] for n in wanted if not found[n]))
    idx.resolved[record.key] = (record.revision, result)
    return result


def last_heartbeat(state: FleetState, idx: ScopeIndex, key: str) -> float | None:
    """The newest heartbeat of a VM, its host: records' included."""
    moments = [state.vms[k].last_heartbeat for k in (key, *idx.extra_heartbeats.get(key, ()))]
    present = [m for m in moments if m is not None]
    return max(present) if present else None
