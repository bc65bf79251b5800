"""The inventory: where each VM counts in the size of a percentage budget, which its claims cannot grow. Pure.

A VM's topology (zone, scale set, domains, tags, ...) is its own claim (fold/reports.py), and it
decides the scopes where the VM counts as unavailable: a claim can only make the coordinator more
careful there. But a percentage budget's limit grows with its scope's size, so a claim that put a
VM in more scopes would also let more of the real VMs there go down at once (the review: a VM that
claims zone 1 makes a 10% budget of its 19 VMs let 2 of them go). So the size a percentage is taken
of counts a VM only where its *accepted* placement puts it too (decide/scopes.py):

- its **first placement**: the topology of its first verified report by the hub's enqueued time
  (``Vm.placed``): where it was first seen. A new VM grows the scopes it first says it is in: only
  Azure can make a new vmId (a registration proves it, edge/attestation.py), and a VM is placed
  once;
- a placement an operator **confirmed** (``coordinator inventory confirm``: a ``confirm``
  decision, audited and published like a pause, naming each VM and the placement confirmed):
  growth the coordinator cannot tell from a lie without Azure, such as a VM moved to another
  update domain, or a new tag;
- with ``[azure]``, **Azure's**: a VM Azure lists has Azure's topology (fold/topology.py), which no
  agent can change, and counts wherever it is.

A VM whose claim moved elsewhere still counts as unavailable in the scopes it claims now, but it
counts in the size of neither the scopes it left nor those it joined, until confirmed.

The same reports say when each VM first claimed the name and resourceId it goes by
(``claimed_at``): of two VMs that claim one, decide/availability.py holds the later claimant down.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..config.limits import Limits
from . import caps
from .caps import FOLDED, MALFORMED
from .state import DecisionRecord, FleetState, Observed, Placement, Stamp, Vm

MAX_CONFIRMED = 2_000  # VMs one confirm decision may name (its data stays under MAX_DECISION_BYTES)
SHARED_PLACES = 1_000  # placements ``shared`` keeps whatever the fleet's size
CLAIMS_KEPT = 4  # names and resourceIds kept per VM with when it first claimed them (a real VM has one)
# (name in lower case, resourceId as sent, the hub time it first claimed them): one of Vm.claims. The
# claim is its resourceId in lower case; held as sent, it is the VM record's own string (150 bytes a VM).
Claim = tuple[str, str, float]


def placement(vm: Vm, state: FleetState | None = None) -> Placement:
    """What a VM's record says of where it is (the parts scopes are made of, less its group); with
    ``state``, the one tuple of that placement its fold keeps (``shared``)."""
    where = (vm.subscription, vm.resource_group, vm.location, vm.zone, vm.scale_set, vm.fault_domain,
             vm.update_domain, tuple(sorted(vm.tags.items())) if vm.tags else ())
    return where if state is None else shared(state, where)


def shared(state: FleetState, where: Placement) -> Placement:
    """``where`` as the one tuple the fold keeps of it: the VMs of a group are placed alike, and a
    placement is 104 bytes a VM otherwise. The table is derived (``FleetState.places``) and made
    anew when it grows past half the fleet (VMs tagged each their own way share nothing)."""
    places = state.places
    found = places.get(where)
    if found is None:
        if len(places) > len(state.vms) // 2 + SHARED_PLACES:
            places.clear()
        found = places[where] = where
    return found


def observe(state: FleetState, vm: Vm, info: dict[str, Any], stamp: Stamp, limits: Limits,
            seen: Observed | None = None) -> Observed:
    """A verified report of ``vm`` about itself (``stamp``: the hub's enqueued time and the report's
    id): the earliest such report places it, and each name and resourceId it claims is noted with the
    earliest time it claimed them (at most ``CLAIMS_KEPT``: the earliest). Both are minima, so the
    order reports are read in does not matter. ``seen``: what this same data.Vm gave before (its
    entry of ``claims``, its placement: fold/reports.py); returned: what it gives now."""
    known, where = seen if seen is not None else (None, None)
    if stamp < vm.placed_stamp:
        if where is None:
            there = Vm(key=vm.key)
            caps.topology(there, info, limits, Counter())  # counted once already, as the VM's record
            where = placement(there, state)
        vm.placed_stamp = stamp
        if where != vm.placed:
            vm.placed = where
            state.touch(vm.key)  # where it counts in scope sizes (decide/scopes.py's inventory)
        where = vm.placed  # one tuple for both
    moment = stamp[0]
    if known is not None and known[2] <= moment and known in vm.claims:
        return known, where  # claimed as early already: nothing to read again
    chars, uncounted = limits.text_chars, Counter[str]()
    name = caps.identifier(info.get("name"), chars, uncounted).lower()
    sent = caps.identifier(info.get("resourceId"), chars, uncounted)  # the string the VM's record holds
    rid = sent.lower()
    claims = vm.claims
    for i, (known_name, known_rid, known_at) in enumerate(claims):
        if known_name == name and (known_rid is sent or known_rid.lower() == rid):
            if moment < known_at:
                claim = (known_name, known_rid, moment)
                vm.claims = (*claims[:i], claim, *claims[i + 1:])
                return claim, where
            return claims[i], where
    claim = (sys.intern(name), sent, moment)
    kept = sorted((*claims, claim), key=_order)
    if len(kept) > CLAIMS_KEPT:
        kept.remove(max(kept, key=lambda c: (c[2], c[0], c[1].lower())))
    vm.claims = tuple(kept)
    return (claim if claim in vm.claims else None), where


def _order(claim: Claim) -> tuple[str, str, float]:
    """A claim as it counts: its resourceId in lower case (``Vm.claims`` holds it as sent)."""
    return claim[0], claim[1].lower(), claim[2]


def claimed_at(vm: Vm) -> float:
    """When the VM first claimed the name and resourceId it goes by now (inf: not among the claims
    kept, or never claimed by a verified report: the latest claimant of anything)."""
    name, rid = vm.name.lower(), vm.resource_id.lower()
    return next((t for n, r, t in vm.claims if n == name and r.lower() == rid), float("inf"))


def accepted(state: FleetState, key: str) -> tuple[Placement, ...]:
    """The placements a VM counts at in scope sizes: its first one and the one an operator confirmed
    (() for one never placed; a VM Azure lists counts wherever Azure says: ``unplaced``)."""
    vm = state.vms[key]
    return tuple(p for p in (vm.placed, state.confirmed.get(key)) if p is not None)


def as_vm(vm: Vm, where: Placement) -> Vm:
    """A copy of ``vm`` placed at ``where`` (to compute the scopes of that placement)."""
    sub, rg, location, zone, scale_set, fd, ud, tags = where
    return Vm(key=vm.key, name=vm.name, vm_id=vm.vm_id, complete=vm.complete, resource_id=vm.resource_id,
              subscription=sub, resource_group=rg, location=location, zone=zone, scale_set=scale_set,
              fault_domain=fd, update_domain=ud, tags=dict(tags))


def unplaced(state: FleetState, key: str) -> bool:
    """Its claim now is none of its accepted placements (and Azure does not list it)."""
    vm = state.vms[key]
    return key not in state.azure.vms and placement(vm) not in accepted(state, key)


def as_data(where: Placement) -> list[Any]:
    return [*where[:7], [list(tag) for tag in where[7]]]


def from_data(value: Any) -> Placement:
    """A placement read from a decision or a snapshot; ValueError when it is not one."""
    if not isinstance(value, list) or len(value) != 8 or not all(isinstance(v, str) for v in value[:7]):
        raise ValueError("not a placement")
    tags = value[7]
    if not isinstance(tags, list):
        raise ValueError("not a placement's tags")
    if not tags:  # almost every VM's
        return (value[0], value[1], value[2], value[3], value[4], value[5], value[6], ())
    if not all(isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t) for t in tags):
        raise ValueError("not a placement's tags")
    return (value[0], value[1], value[2], value[3], value[4], value[5], value[6],
            tuple(sorted((str(k), str(v)) for k, v in tags)))


def fold_confirm(state: FleetState, record: DecisionRecord) -> str:
    """A ``confirm`` decision: each VM it names counts at the placement confirmed (the latest confirm
    of a VM by time, then id, wins, whatever the order they are read in)."""
    items = record.data.get("Confirmed")
    if not isinstance(items, list) or len(items) > MAX_CONFIRMED:
        return MALFORMED
    parsed: list[tuple[str, Placement]] = []
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("vm"), str) or not item["vm"]:
            return MALFORMED
        try:
            parsed.append((item["vm"].lower(), from_data(item.get("placement"))))
        except ValueError:
            return MALFORMED
    state.decisions[record.id] = record
    for key, where in parsed:
        stamp = (record.time, record.id)
        if stamp >= state.confirmed_at.get(key, (float("-inf"), "")):
            state.confirmed[key], state.confirmed_at[key] = where, stamp
            state.note("confirmed", key)
            state.touch(key)  # where it counts in scope sizes (decide/scopes.py's inventory)
    return FOLDED
