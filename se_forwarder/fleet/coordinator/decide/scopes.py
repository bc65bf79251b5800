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

The index is kept up to date: the fold names the VMs whose scopes may have changed
(``FleetState.moved``: a new VM, its topology, its co-reception set, a Terminate), and only they,
their sets and the ``host:`` records of their names are placed again (placement.py), so a pass
after a burst of new VMs costs what they cost, not the fleet. It is built whole when it has no
past (a restore, another policy). Resolutions are cached per event revision until a group of
theirs changes. Everything else per decision pass is O(open events) (availability.py).
"""

from __future__ import annotations

from ..config.policy import Policy
from ..fold import topology as azure_topology
from ..fold.state import EventRecord, FleetState
from .scope_counts import Counts
from .scope_index import FLEET, Resolution, Resolved, ScopeIndex

__all__ = ["FLEET", "Resolution", "ScopeIndex", "index", "last_heartbeat", "resolve"]


def index(state: FleetState, policy: Policy) -> ScopeIndex:
    """The scope index for this state and policy: kept on the state, brought up to date with the
    VMs the fold moved since (module docstring), made whole for another policy or a new state."""
    key = (policy.group_tag, policy.budgets, policy.queue_template)
    idx: ScopeIndex | None = state.cache.get("index")
    if idx is None or idx.policy_key != key or state.moved is None:
        idx = state.cache["index"] = ScopeIndex(policy_key=key, counts=Counts(policy.by_kind))
        state.moved, state.merged = set(), set()
        state.retired = set()
        idx.update(state, policy, set(state.vms))
    elif state.moved or state.merged:
        moved, merged, state.moved, state.merged = state.moved, state.merged, set(), set()
        idx.update(state, policy, moved, merged)
    return idx


def resolve(state: FleetState, idx: ScopeIndex, record: EventRecord) -> Resolution:
    """The VMs ``record`` affects (module docstring), cached until the event or a group of it changes."""
    told = state.azure.events.get(record.key)
    azure = (state.azure.generation, told.subscription, told.resource_group) if told is not None else ()
    cached = idx.resolved.get(record.key)
    if (cached is not None and cached.revision == record.revision and cached.azure == azure
            and (not cached.partial or idx.last_join <= cached.generation)
            and all(idx.changed(g) <= cached.generation for g in cached.groups)):
        return cached.result
    wanted = {name.lower(): name for name in record.resources}
    found: dict[str, set[str]] = {lowered: set() for lowered in wanted}
    groups: set[str] = set()
    partial = False
    alias, fold_vms, group_of = idx.alias, state.vms, idx.group_of
    for reporter in record.reports:
        key = alias.get(reporter, reporter)  # idx.key
        vm = fold_vms.get(key)
        group = group_of.get(key)
        if vm is None or group is None:
            partial = True
            continue
        groups.add(group)
        lowered = vm.name.lower()
        if lowered in found:
            found[lowered].add(key)
    for lowered in wanted:
        found[lowered].update(k for k in state.named(lowered) if group_of.get(k) in groups)
    for lowered, key in azure_topology.names(state, record).items():
        if lowered in found:
            if key in idx.group_of:
                found[lowered].add(key)
                groups.add(idx.group_of[key])
            else:
                partial = True
    vms: list[str] = []
    for lowered in wanted:
        vms.extend(k for k in sorted(found[lowered]) if k not in vms)
    result = Resolution(tuple(vms), tuple(wanted[n] for n in wanted if not found[n]))
    idx.resolved[record.key] = Resolved(record.revision, idx.generation, tuple(groups), partial, azure,
                                        result)
    return result


def last_heartbeat(state: FleetState, idx: ScopeIndex, key: str) -> float | None:
    """The newest heartbeat of a VM, its host: records' included."""
    beat = state.vms[key].last_heartbeat
    for host in idx.extra_heartbeats.get(key, ()):
        other = state.vms[host].last_heartbeat
        if other is not None and (beat is None or other > beat):
            beat = other
    return beat
