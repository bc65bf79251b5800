"""Topology from Azure: each VM's record carries what Azure says of it, not what its agent claims. Pure.

Rules:

- A VM Azure lists (``azure_facts.VmFacts``, from Resource Graph and ARM's instance view) has, in
  its fold record (``state.vms``), Azure's name, resource id, subscription, resource group,
  location, zone, scale set, fault and update domain and tags, whatever its agent reports: an
  agent's report still updates its record (fold/dispatch.py), then ``after_report`` puts Azure's values
  back and keeps the agent's as its *claim* (``AzureView.claims``). A domain Azure could not give
  (its instance view not read yet) keeps the value it had.
- A VM Azure lists and no agent ever reported is in the fold too, *agentless*: a record made from
  Azure's facts, without heartbeat. A refresh that no longer lists a VM gives an agent's VM its
  claim back and drops an agentless one.
- An availability set Azure names is the VM's group, ``avset/<subscription>/<resource
  group>/<name>`` (scopes.py), so groups carry their Azure names.
- *Watched by Azure*: a VM Azure lists and that is opted in to Azure's feed (only such a VM's
  events reach Azure's side: edge/azure_facts.py) is watched while Azure's view of its subscription is fresh,
  that is while the last complete catch-up of its scheduled events (every page of
  ``maintenanceresources``) is younger than ``policy.azure_fresh_for``. Then Azure says whether an
  event affecting it is Started or approved, so it need not be counted unavailable for want of a
  heartbeat (docs/coordinator.md, "Watched by Azure"); everything else about it still counts.
- ``names``: the VMs an event's ``Resources`` name, as Azure files them (the event's subscription
  and resource group): the first way scopes.py resolves a name.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..config.policy import Policy
from .azure_state import Claim, VmFacts
from .state import NO_STAMP, NO_TAGS, EventRecord, FleetState, Vm


def claim(vm: Vm) -> Claim:
    """What a VM's record says of its topology now (an agent's claim, when Azure has not replaced it)."""
    return (vm.subscription, vm.resource_group, vm.zone, vm.scale_set, vm.fault_domain, vm.update_domain,
            tuple(sorted(vm.tags.items())))


def _apply(state: FleetState, vm: Vm, facts: VmFacts) -> None:
    if facts.name != vm.name:
        state.rename(vm.key, vm.name, facts.name)  # the fold's index of names (state.named)
    vm.name, vm.vm_id, vm.complete, vm.resource_id = facts.name, facts.vm_id, True, facts.resource_id
    vm.subscription, vm.resource_group, vm.location = facts.subscription, facts.resource_group, facts.location
    vm.zone, vm.scale_set, vm.tags = facts.zone, facts.scale_set.lower(), dict(facts.tags) or NO_TAGS
    vm.fault_domain = facts.fault_domain or vm.fault_domain
    vm.update_domain = facts.update_domain or vm.update_domain


def _restore(vm: Vm, was: Claim) -> None:
    vm.subscription, vm.resource_group, vm.zone, vm.scale_set, vm.fault_domain, vm.update_domain = was[:6]
    vm.tags = dict(was[6]) or NO_TAGS


def agent_reported(vm: Vm) -> bool:
    """Whether an agent ever reported this VM's topology or a heartbeat."""
    return vm.topology_stamp != NO_STAMP or vm.last_heartbeat is not None


def after_report(state: FleetState, vm: Vm) -> None:
    """An agent just wrote its topology into ``vm``: keep that as its claim, put Azure's back."""
    facts = state.azure.vms.get(vm.key)
    if facts is not None:
        state.note("azure_vms", vm.key)
        state.azure.claims[vm.key] = claim(vm)
        _apply(state, vm, facts)


def fold_topology(state: FleetState, subscriptions: Iterable[str], vms: Iterable[VmFacts], as_of: float,
                  ) -> None:
    """A topology refresh that listed every VM of ``subscriptions`` (``vms``), answered at ``as_of``;
    older than the last one of a subscription, it changes nothing there."""
    view = state.azure
    covered = {s.lower() for s in subscriptions if as_of >= view.topology_at.get(s.lower(), float("-inf"))}
    listed = {v.key: v for v in vms if v.subscription in covered}
    for key in [k for k, v in view.vms.items() if v.subscription in covered and k not in listed]:
        state.note("vms", key)
        state.note("azure_vms", key)
        del view.vms[key]
        vm = state.vms.get(key)
        was = view.claims.pop(key, None)
        if vm is not None and was is not None:
            _restore(vm, was)
        elif vm is not None and not agent_reported(vm):
            del state.vms[key]  # agentless, and Azure no longer has it: deleted
            state.names = None  # the fold's index of names, rebuilt when next needed
        state.touch(key)
    for key, facts in listed.items():
        state.note("vms", key)
        state.note("azure_vms", key)
        vm = state.vms.get(key)
        if vm is None:
            vm = state.vms[key] = Vm(key=key, name=facts.name, vm_id=facts.vm_id, complete=True)
            state.rename(key, None, facts.name)
            state.touch(key)
        elif key not in view.claims and vm.topology_stamp != NO_STAMP:
            view.claims[key] = claim(vm)  # the agent's, before Azure's replaces it
        before, told = vm.topology(), view.vms.get(key)
        view.vms[key] = facts
        _apply(state, vm, facts)
        vm.last_heard = max(vm.last_heard, as_of)  # Azure lists it: retention.py keeps it
        if vm.topology() != before or told is None or told.availability_set != facts.availability_set:
            state.touch(key)  # its scopes may have changed, its group too (its availability set)
    for sub in covered:
        view.topology_at[sub] = as_of
    view.by_name = None
    view.generation += 1


def group(state: FleetState, key: str) -> str | None:
    """The VM's availability set as a group key (scopes.py), when Azure names one."""
    facts = state.azure.vms.get(key)
    if facts is None or not facts.availability_set:
        return None
    return f"avset/{facts.subscription}/{facts.resource_group}/{facts.availability_set.lower()}"


def fresh(state: FleetState, policy: Policy, subscription: str, now: float) -> bool:
    synced = state.azure.synced.get(subscription)
    return policy.azure_fresh_for > 0 and synced is not None and now - synced <= policy.azure_fresh_for


def watched(state: FleetState, policy: Policy, key: str, now: float) -> bool:
    """Watched by Azure (module docstring)."""
    facts = state.azure.vms.get(key)
    return facts is not None and facts.opted_in and fresh(state, policy, facts.subscription, now)


def names(state: FleetState, record: EventRecord) -> dict[str, str]:
    """Lower-case name in the event's Resources -> the VM Azure files under it, for an event Azure
    reported (empty otherwise)."""
    event = state.azure.events.get(record.key)
    if event is None or not event.resources:
        return {}
    index = state.azure.names()
    out = {}
    for name in event.resources:
        key = index.get((event.subscription, event.resource_group, name.lower()))
        if key is not None:
            out[name.lower()] = key
    return out
