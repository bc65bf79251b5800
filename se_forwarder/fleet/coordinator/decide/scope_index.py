"""The scope index: the fleet's groups and scopes, kept up to date VM by VM (scopes.py says what
they are and when the index changes). Pure.

``ScopeIndex.update`` places again the VMs the fold moved, with whatever their move may change:
the ``host:`` records of their names (placement.aliases), the VMs a Terminate retired or gave back
(placement.retired), and the VMs of their co-reception sets whose learned group is named anew.
Each VM's place is taken out of the counts it was in and put into the new ones (scope_counts.py),
so a scope's size and inventory, the VMs of one name in one group, the VMs sharing an approval queue
or a resourceId (claims.py) stay exact. A VM whose group alone changed (a learned group named anew)
is counted out of its old group and into its new one, its other scopes as they were.
"""

from __future__ import annotations

import sys
from collections.abc import KeysView, Mapping
from dataclasses import dataclass, field
from typing import Any

from ....approvals.queue.names import names_the_vm
from ..config.policy import Budget, Policy
from ..fold.state import FleetState, Vm
from . import placement
from .claims import Claims
from .placement import FLEET, Label
from .queues import queue_of
from .scope_counts import Counts, ScopesOf, Views

__all__ = ["FLEET", "Resolution", "Resolved", "ScopeIndex"]


@dataclass(frozen=True)
class Resolution:
    vms: tuple[str, ...]  # VM keys the event affects (in the order of Resources)
    unresolved: tuple[str, ...]  # names of Resources that match no known VM


@dataclass(frozen=True)
class Resolved:
    """A cached resolution and what it was made of (``resolve``)."""

    revision: int  # the event's
    generation: int  # the index's, when made
    groups: tuple[str, ...]  # the groups it looked in
    partial: bool  # a reporter was not in the fleet then: any VM that joins may change it
    azure: tuple[Any, ...]  # Azure's topology generation and where it files the event (): not Azure's
    result: Resolution


@dataclass(eq=False)
class ScopeIndex:
    """The fleet's groups and scopes (module docstring), kept up to date by ``update``."""

    policy_key: tuple[Any, ...] = ()
    counts: Counts = field(default_factory=lambda: Counts({}))  # every scope's size (scope_counts.py)
    alias: dict[str, str] = field(default_factory=dict)  # host: key -> the complete VM it is
    extra_heartbeats: dict[str, list[str]] = field(default_factory=dict)  # VM -> its host: records
    group_of: dict[str, str] = field(default_factory=dict)  # every VM of the fleet -> its group
    outside: dict[str, tuple[str, ...]] = field(default_factory=dict)  # VM -> scopes claimed, not counted
    dup_names: dict[str, set[str]] = field(default_factory=dict)  # lower-case name -> groups with two of it
    shared_queue: dict[str, str] = field(default_factory=dict)  # VM -> its queue another VM shares
    resolved: dict[str, Resolved] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)  # availability.py's, per generation and time
    # What ``update`` keeps to place VMs again:
    name_of: dict[str, str] = field(default_factory=dict)  # every VM of the fold -> its lower-case name
    queues: Claims = field(default_factory=Claims)  # approval queues (queues.py)
    rids: Claims = field(default_factory=Claims)  # resourceIds, lower case
    generation: int = 0  # one more at every update
    changed_at: dict[str, int] = field(default_factory=dict)  # group -> generation it last changed
    forgot_at: int = 0  # generation a group last left the fleet (``changed``)
    last_join: int = 0  # generation a VM last joined the fleet
    joined: list[str] = field(default_factory=list)  # VMs placed (again) since availability.py looked
    _members: list[str] | None = None

    def __post_init__(self) -> None:
        views = Views(self.counts)
        self.size: Mapping[str, int] = views.size
        self.inventory: Mapping[str, int] = views.inventory  # scope -> VMs its percentage is taken of
        self.kind_of: Mapping[str, str] = views.kind_of
        self.budget_of: Mapping[str, Budget] = views.budget_of  # scope -> its budget
        self.scopes_of = ScopesOf(self.group_of, self.counts.shape_of, False)  # VM -> every scope of it
        self.budget_scopes_of = ScopesOf(self.group_of, self.counts.shape_of, True)  # those with a budget

    @property
    def fleet(self) -> KeysView[str]:
        """VM keys of the fleet (superseded host: records left out): those with a group."""
        return self.group_of.keys()

    @property
    def members(self) -> list[str]:
        """The fleet's VM keys, sorted."""
        if self._members is None:
            self._members = sorted(self.fleet)
        return self._members

    def limit(self, scope: str) -> int:
        _, inventory, _, budget = self.counts.memo.get(scope) or self.counts.look(scope)
        if budget is None:
            raise KeyError(scope)
        return budget.limit(inventory)

    def named(self, state: FleetState, group: str, lowered: str) -> list[str]:
        """The VMs of ``group`` that go by ``lowered`` (the fold's names, as of the last update)."""
        group_of = self.group_of
        return [k for k in state.named(lowered) if group_of.get(k) == group]

    def key(self, vm_key: str) -> str:
        return self.alias.get(vm_key, vm_key)

    def shared_claims(self, state: FleetState) -> list[list[str]]:
        """The VMs that claim one name in one group, and those that claim one resourceId (sorted)."""
        cached = self.cache.get("shared-claims")
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        pairs = sorted((g, n) for n, groups in self.dup_names.items() for g in groups)
        found = [sorted(self.named(state, g, n)) for g, n in pairs]
        found += [keys for _, keys in self.rids.shared(lambda k: _rid(state.vms[k]))]
        self.cache["shared-claims"] = (self.generation, found)
        return found

    # -- keeping it up to date ------------------------------------------------------------------

    def update(self, state: FleetState, policy: Policy, moved: set[str], merged: set[str] | None = None,
               ) -> None:
        """Place again the VMs of ``moved``, and every VM whose place they may change: the ``host:``
        records of their names and the VMs those stand for, the VMs a Terminate retired or gave
        back; and of their co-reception sets, and those of ``merged`` (sets that grew), every VM
        whose learned group is named anew (a learned group's name is its first member's)."""
        self.generation += 1
        ends = set(moved)
        renamed = self._realias(state, moved, ends)
        retired = placement.retired(state)
        ends |= retired ^ state.retired
        state.retired = retired
        everyone = self._closure(state, ends | (merged or set()))
        groups = self._groups(state, policy, everyone)
        group_of, outside = self.group_of, self.outside
        again: set[str] = set()
        regrouped: list[str] = []
        for key in everyone:
            if key in ends:
                again.add(key)
                continue
            new, old = groups.get(key), group_of.get(key)
            if new != old:
                if new is not None and old is not None and key not in outside:
                    regrouped.append(key)
                else:
                    again.add(key)
        was = self.fleet & again
        names: set[str] = set()  # the names whose VMs joined or left a group
        self._regroup(regrouped, groups, names)
        codes = self._remove(again, renamed, ends, names)
        placed = self._place(state, policy, groups, again, ends, codes, names)
        self._share_queues(state, policy, again, codes)
        self._dup_names(state, names)
        self.joined += placed  # their heartbeats may count differently now (a host: record's)
        if placed != was:
            self._members = None
            if placed - was:
                self.last_join = self.generation

    def _realias(self, state: FleetState, moved: set[str], ends: set[str]) -> dict[str, str]:
        """The ``host:`` records of the names of ``moved`` matched again (placement.aliases); every
        record whose match changed, and both VMs it stood or stands for, join ``ends``. The names
        the VMs of ``moved`` had before."""
        before: dict[str, str] = {}
        names: set[str] = set()
        for key in moved:
            old = self.name_of.get(key)
            if old is not None:
                before[key] = old
                names.add(old)
            vm = state.vms.get(key)
            if vm is None:
                self.name_of.pop(key, None)
                continue
            lowered = vm.name.lower()
            if lowered != old:
                self.name_of[key] = sys.intern(lowered)
            names.add(lowered)
        wanted: dict[str, str | None] = {}
        for lowered in names:
            hosts = [k for k in state.named(lowered) if not state.vms[k].complete]
            if hosts:
                found = placement.aliases(state, lowered)
                for key in hosts:
                    wanted[key] = found.get(key)
        for key in moved:
            wanted.setdefault(key, None)  # gone, or complete: it stands for no other VM
        for key, want in wanted.items():
            have = self.alias.get(key)
            if want == have:
                continue
            if have is not None:
                del self.alias[key]
                hosts = self.extra_heartbeats[have]
                hosts.remove(key)
                if not hosts:
                    del self.extra_heartbeats[have]
                ends.add(have)
            if want is not None:
                self.alias[key] = want
                self.extra_heartbeats.setdefault(want, []).append(key)
                ends.add(want)
            ends.add(key)
        return before

    def _closure(self, state: FleetState, ends: set[str]) -> dict[str, str]:
        """``ends`` with every VM of their co-reception sets, joined through ``host:`` records: each
        VM -> the root of its co-reception set."""
        seen: dict[str, str] = {}
        stack = list(ends)
        find, sets, alias, extra = state.groups.find, state.groups.sets, self.alias, self.extra_heartbeats
        while stack:
            key = stack.pop()
            if key in seen:
                continue
            root = find(key)
            members = sets.get(root) or (key,)  # a whole set at once: every member's root is its root
            seen.update(dict.fromkeys(members, root))
            if alias or extra:
                for member in members:
                    target = alias.get(member)
                    if target is not None and target not in seen:
                        stack.append(target)
                    stack.extend(extra.get(member, ()))
        return seen

    def _remove(self, again: set[str], renamed: dict[str, str], ends: set[str], names: set[str]) -> set[int]:
        """Take the VMs of ``again`` out of the fleet's counts (and those of ``ends`` out of its
        claims: the others keep their names, ids and queues); the queue hashes they held."""
        codes: set[int] = set()
        counts = self.counts
        for key in again & self.fleet:
            group = self.group_of.pop(key)
            out = self.outside.pop(key, ())
            if out:
                counts.claim_out(out, -1)
            self._changed(group, counts.take(key, group))
            names.add(renamed.get(key, self.name_of.get(key, "")))
            if key in ends:
                code = self.queues.remove(key)
                if code is not None:
                    codes.add(code)
                self.shared_queue.pop(key, None)
                self.rids.remove(key)
        return codes

    def _regroup(self, keys: list[str], groups: dict[str, str], names: set[str]) -> None:
        """VMs whose group alone changed (their record did not, and they count wherever they claim:
        a learned group named anew): counted out of the old group and into the new one, all at
        once; their other scopes, names, queues and claims stay as counted."""
        if not keys:
            return
        group_of, changed_at, generation = self.group_of, self.changed_at, self.generation
        olds = [group_of[key] for key in keys]
        news = [groups[key] for key in keys]
        group_of.update(zip(keys, news, strict=True))
        emptied = set(self.counts.regroup(zip(keys, olds, news, strict=True)))
        changed_at.update(dict.fromkeys(news, generation))  # in the fleet now, each
        changed_at.update(dict.fromkeys([group for group in olds if group not in emptied], generation))
        gone = emptied.difference(self.counts.groups)  # emptied, and none of the VMs joined it
        for group in gone:
            changed_at.pop(group, None)
        if gone:
            self.forgot_at = generation
        name_of = self.name_of
        names.update([name_of.get(key, "") for key in keys])

    def _changed(self, group: str, emptied: bool) -> None:
        """``group`` changed; ``emptied``: it is gone, forgotten (``changed``) rather than kept for ever."""
        if emptied:
            self.changed_at.pop(group, None)
            self.forgot_at = self.generation
        else:
            self.changed_at[group] = self.generation

    def _dup_names(self, state: FleetState, names: set[str]) -> None:
        """``dup_names`` again for ``names``: the groups in which two or more VMs go by one of them."""
        group_of, dup, named = self.group_of, self.dup_names, state.named
        for lowered in names:
            bearers = named(lowered)
            if len(bearers) < 2:  # most names are one VM's
                if lowered in dup:
                    del dup[lowered]
                continue
            twice: set[str] = set()
            seen: set[str] = set()
            for key in bearers:
                group = group_of.get(key)
                if group is not None:
                    if group in seen:
                        twice.add(group)
                    seen.add(group)
            if twice:
                dup[lowered] = twice
            else:
                dup.pop(lowered, None)

    def changed(self, group: str) -> int:
        """The generation ``group`` last changed at: for a group no longer in the fleet, the last
        generation a group left it (never earlier than its own)."""
        return self.changed_at.get(group, self.forgot_at)

    def _groups(self, state: FleetState, policy: Policy, everyone: dict[str, str]) -> dict[str, str]:
        """The group of each VM of ``everyone`` (VM -> the root of its co-reception set) that is in
        the fleet (``everyone`` holds whole co-reception sets: a learned group is named after its
        first member)."""
        vms, retired, alias, label = state.vms, state.retired, self.alias, placement.label
        azure, tag = state.azure.vms, policy.group_tag
        out: dict[str, str] = {}
        learned: dict[str, str] = {}  # VM -> its set's root, for those whose group is learned
        first: dict[str, Label] = {}
        for key, root in placement.components(everyone, alias).items():
            vm = vms.get(key)
            if vm is None or key in alias or key in retired:
                continue
            if vm.scale_set or key in azure or (tag and tag in vm.tags):  # else explicit_group is None
                named = placement.explicit_group(state, policy, vm)
                if named is not None:
                    out[key] = named
                    continue
            learned[key] = root
            mine = label(vm)
            have = first.get(root)
            if have is None or mine < have:
                first[root] = mine
        names = {root: sys.intern(placement.learned(lowest)) for root, lowest in first.items()}
        out.update((key, names[root]) for key, root in learned.items())
        return out

    def _place(self, state: FleetState, policy: Policy, groups: dict[str, str], again: set[str],
               ends: set[str], codes: set[int], names: set[str]) -> set[str]:
        """Put the VMs of ``again`` that are in the fleet in their group and scopes (those of ``ends``
        in the claims too); those VMs."""
        vms, counts, template = state.vms, self.counts, policy.queue_template
        members = {k for k in again if k in groups}
        for key in members:
            vm, group = vms[key], sys.intern(groups[key])
            self.group_of[key] = group
            shape = counts.shape(vm)
            placed = placement.placed_scopes(state, policy, key, group)
            if placed is not None:
                out = self.outside[key] = tuple(scope for scope in shape.scopes(group) if scope not in placed)
                counts.claim_out(out, 1)
            counts.put(key, group, shape)
            self.changed_at[group] = self.generation
            names.add(self.name_of[key])
            if key in ends:
                code = self.queues.add(key, queue_of(template, vm.name, vm.vm_id) if vm.name else None)
                if code is not None:
                    codes.add(code)
                self.rids.add(key, _rid(vm))
        return members

    def _share_queues(self, state: FleetState, policy: Policy, everyone: set[str], codes: set[int]) -> None:
        """``shared_queue`` again for the queues the VMs of ``everyone`` left or took."""
        template = policy.queue_template
        if not names_the_vm(template):  # one queue for all: every VM with a name shares it
            named = [k for k in self.fleet if state.vms[k].name]
            queue = queue_of(template, "x", "") or ""
            self.shared_queue = dict.fromkeys(named, queue) if len(named) > 1 else {}
            return
        for code in codes:
            for key in self.queues.holders(code):
                self.shared_queue.pop(key, None)
        vms = state.vms
        for queue, keys in self.queues.shared(lambda k: queue_of(template, vms[k].name, vms[k].vm_id), codes):
            for key in keys:
                self.shared_queue[key] = queue


def _rid(vm: Vm) -> str | None:
    return vm.resource_id.lower() if vm.resource_id else None
