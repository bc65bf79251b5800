"""The scope index counts what a plain recomputation from the fold counts.

decide/scope_counts.py counts the scopes named after a group per group (a learned group named anew
moves its VMs' counts, not their scope keys) and looks a key up by the groups its text can name.
These properties fold any mix of reports, new VMs, renames, moves, host: records, scale sets,
Azure's topology, Terminates, prunes and confirmed placements (and VMs whose group names and
domains spell one another's keys), look at the index at random points in between, and compare it
with the rules of decide/scopes.py applied to the whole fold with nothing kept: each VM's group,
scopes and budgeted scopes; each scope's size, inventory, kind, budget and limit; and the VMs that
go by one name in one group.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import FleetState, Policy
from se_forwarder.fleet.coordinator.decide import index, placement, unavailable
from se_forwarder.fleet.coordinator.decide.scope_counts import Counts, Members
from se_forwarder.fleet.coordinator.decide.scopes import ScopeIndex

from .fleet import SET, T0, AgentVm, Fleet, heartbeat, report
from .moves import POLICY, POLICY_ID, fold_step, step


def plain(state: FleetState, policy: Policy) -> dict:
    """scopes.py's rules applied to the whole fold: groups, scopes and counts, nothing kept."""
    vms = state.vms
    alias: dict[str, str] = {}
    for lowered in {vm.name.lower() for vm in vms.values()}:
        alias.update(placement.aliases(state, lowered))
    retired = placement.retired(state)
    fleet = sorted(k for k in vms if k not in alias and k not in retired)
    parent = {k: state.groups.find(k) for k in vms}

    def top(k: str) -> str:
        while parent.get(k, k) != k:
            k = parent[k]
        return k

    for host, target in alias.items():  # a host: record's set joined to its VM's
        a, b = top(host), top(target)
        if a != b:
            parent[max(a, b)] = min(a, b)
    explicit = {k: placement.explicit_group(state, policy, vms[k]) for k in fleet}
    first: dict[str, tuple] = {}
    for k in fleet:
        if explicit[k] is None:
            root = top(k)
            first[root] = min(first.get(root, placement.label(vms[k])), placement.label(vms[k]))
    group = {k: explicit[k] or placement.learned(first[top(k)]) for k in fleet}
    scopes, budgeted, size, inventory, kinds = {}, {}, Counter(), Counter(), {}
    for k in fleet:
        keys, their_kinds = placement.scope_keys(vms[k], group[k])
        placed = placement.placed_scopes(state, policy, k, group[k])
        scopes[k] = keys
        budgeted[k] = tuple(s for s, kind in zip(keys, their_kinds, strict=True) if kind in policy.by_kind)
        for scope, kind in zip(keys, their_kinds, strict=True):
            size[scope] += 1
            inventory[scope] += placed is None or scope in placed
            kinds.setdefault(scope, set()).add(kind)
    assert all(len(k) == 1 for k in kinds.values())  # these fleets spell no key two ways
    kind = {s: next(iter(k)) for s, k in kinds.items()}
    named: dict[tuple[str, str], list[str]] = {}
    for k in fleet:
        named.setdefault((group[k], vms[k].name.lower()), []).append(k)
    return {
        "group_of": group, "scopes_of": scopes, "budget_scopes_of": budgeted, "size": dict(size),
        "inventory": {s: n for s, n in inventory.items() if n}, "kind_of": kind,
        "budget_of": {s: policy.by_kind[k] for s, k in kind.items() if k in policy.by_kind},
        "limit": {s: policy.by_kind[k].limit(inventory[s]) for s, k in kind.items() if k in policy.by_kind},
        "named": {pair: sorted(keys) for pair, keys in named.items()},
    }


def kept(idx: ScopeIndex, state: FleetState) -> dict:
    """The same, as the index kept up to date says it."""
    scopes = {s for k in idx.fleet for s in idx.scopes_of[k]}
    return {
        "group_of": dict(idx.group_of), "scopes_of": dict(idx.scopes_of),
        "budget_scopes_of": dict(idx.budget_scopes_of), "size": {s: idx.size[s] for s in scopes},
        "inventory": {s: idx.inventory[s] for s in scopes if idx.inventory[s]},
        "kind_of": {s: idx.kind_of[s] for s in scopes}, "budget_of": {s: idx.budget_of[s] for s in scopes
                                                                       if s in idx.budget_of},
        "limit": {s: idx.limit(s) for s in scopes if s in idx.budget_of},
        "named": {(g, state.vms[k].name.lower()): sorted(idx.named(state, g, state.vms[k].name.lower()))
                  for k, g in idx.group_of.items()},
    }


def listed(idx: ScopeIndex) -> dict:
    """Every scope the index lists, with what it says of each."""
    return {"size": dict(idx.size), "inventory": dict(idx.inventory), "kind_of": dict(idx.kind_of),
            "budget_of": dict(idx.budget_of)}


# VMs whose group names and domains spell another's keys: tag "a" in fault domain "b/c" and tag
# "a/b" in fault domain "c" are both in fault_domain:tag/a/b/c.
SLASHED = st.builds(AgentVm, st.sampled_from(["s-0", "s-1", "s-2"]), rg=st.just("rg-s"),
                    fd=st.sampled_from(["b/c", "c", "b"]), ud=st.sampled_from(["b/c", "c", ""]),
                    tags=st.sampled_from([(("tier", "a"),), (("tier", "a/b"),), ()]))


@st.composite
def any_step(draw: st.DrawFn) -> tuple:
    """moves.step's, VMs of SLASHED, and prunes that forget the VMs not heard from since a time."""
    if draw(st.integers(0, 5)) > 1:
        return draw(step())
    vm, t = draw(SLASHED), T0 + draw(st.integers(0, 900))
    if draw(st.integers(0, 2)) == 0:
        return ("prune", t + Policy().forget_after - 3000)  # fold_step prunes at its time + 3000
    if draw(st.booleans()):
        return ("fold", heartbeat(vm, t))
    return ("fold", report("scheduled", vm, draw(st.sampled_from(["E1", "E2"])), t, resources=[vm.name]))


def run(steps: list[tuple], policy: Policy) -> FleetState:
    """The fold of ``steps``; at each look, the index brought up to date and every count asked."""
    state = FleetState()
    for what, arg in steps:
        if not fold_step(state, what, arg, policy):
            idx = index(state, policy)
            unavailable(state, policy, idx, arg)
            kept(idx, state)
    return state


@settings(max_examples=300, deadline=None)
@given(st.lists(any_step(), max_size=40), st.sampled_from([POLICY, POLICY_ID]))
def test_the_index_kept_up_to_date_counts_what_the_fold_says(steps, policy):
    state = run(steps, policy)
    idx = index(state, policy)
    found = plain(state, policy)
    assert kept(idx, state) == found
    every = listed(idx)
    assert every["size"] == found["size"] and every["inventory"] == found["inventory"]
    assert every["kind_of"] == found["kind_of"] and every["budget_of"] == found["budget_of"]


def test_two_groups_whose_names_and_domains_spell_one_key_count_in_one_scope():
    a = AgentVm("s-0", rg="rg-s", fd="b/c", tags=(("tier", "a"),))
    b = AgentVm("s-1", rg="rg-s", fd="c", tags=(("tier", "a/b"),))
    fleet = Fleet(POLICY)
    fleet.beat(a, b, t=T0)
    idx = index(fleet.state, fleet.policy)
    scope = "fault_domain:tag/a/b/c"
    assert idx.scopes_of[a.key][2] == idx.scopes_of[b.key][2] == scope
    assert (idx.size[scope], idx.inventory[scope], idx.kind_of[scope]) == (2, 2, "fault_domain")
    assert idx.limit(scope) == 1
    assert list(idx.size).count(scope) == 1


def test_a_learned_group_named_anew_takes_its_vms_counts_and_leaves_no_scope_behind():
    fleet = Fleet(Policy())
    fleet.beat(*SET, t=T0)
    idx = index(fleet.state, fleet.policy)
    alone = {k: idx.scopes_of[vm.key] for vm in SET for k in [vm.key]}
    fleet.announce("TOGETHER", [SET[0]], SET, t=T0 + 60)
    idx = index(fleet.state, fleet.policy)
    group = idx.group_of[SET[0].key]
    assert idx.size["group:" + group] == len(SET)
    assert idx.size[f"fault_domain:{group}/0"] == sum(vm.fd == "0" for vm in SET)
    gone = {s for scopes in alone.values() for s in scopes if s.startswith("group:")} - {"group:" + group}
    assert gone and not any(s in idx.size or s in idx.kind_of for s in gone)
    assert kept(idx, fleet.state) == plain(fleet.state, fleet.policy)


@st.composite
def burst(draw: st.DrawFn) -> tuple[list[list[AgentVm]], list[AgentVm], list[tuple[int, int]]]:
    """Sets of VMs that shared no event yet (a scale set's VM among them at times); host: records
    of some of their names (an agent without instance metadata); and later events, each reported by
    one set and the host: records of another's VMs (which joins the two through the records)."""
    sets = []
    for s in range(draw(st.integers(1, 6))):
        sets.append([AgentVm(f"b{s}-{draw(st.integers(0, 3))}{i}", rg=draw(st.sampled_from(["rg-a", "rg-b"])),
                             fd=str(i % 2), ud=str(i % 3), scale_set=draw(st.sampled_from(["", "", "ss"])))
                     for i in range(draw(st.integers(1, 5)))])
    hosts = [AgentVm(vm.name, complete=False) for vms in sets for vm in vms if draw(st.integers(0, 2)) == 0]
    which = st.integers(0, len(sets) - 1)
    pairs = draw(st.lists(st.tuples(which, which), max_size=4))
    return sets, hosts, pairs


@settings(max_examples=200, deadline=None)
@given(burst(), st.sampled_from([POLICY, POLICY_ID]))
def test_bursts_that_join_many_sets_at_once_count_what_the_fold_says(drawn, policy):
    sets, hosts, pairs = drawn
    fleet = Fleet(policy)
    fleet.beat(*(vm for vms in sets for vm in vms), *hosts, t=T0)
    index(fleet.state, policy)  # every VM a group of its own, as before a burst
    for s, vms in enumerate(sets):  # then every set's event, reported by each of its VMs, in one look
        fleet.announce(f"BURST-{s}", vms[:1], vms, t=T0 + 60)
    fleet.beat(*hosts, t=T0 + 61)
    assert kept(index(fleet.state, policy), fleet.state) == plain(fleet.state, policy)
    for k, (one, other) in enumerate(pairs):  # sets joined through host: records, a look after each
        names = {vm.name for vm in sets[other]}
        fleet.announce(f"LATER-{k}", sets[one][:1], sets[one] + [h for h in hosts if h.name in names],
                       t=T0 + 120 + k)
        assert kept(index(fleet.state, policy), fleet.state) == plain(fleet.state, policy)


def counted(counts: Counts) -> dict[str, tuple]:
    """Each group's size and VMs per fault and update domain, however it is kept (one VM or Members)."""
    out = {}
    for group, have in counts.groups.items():
        if isinstance(have, Members):
            out[group] = (have.size, dict(have.faults), dict(have.updates))
        else:
            shape = counts.shape_of[have]
            faults = {shape.fault: 1} if shape.fault else {}
            out[group] = (1, faults, {shape.update: 1} if shape.update else {})
    return out


GROUP = st.sampled_from(["g0", "g1", "g2", "g3", "g4"])
DOMAIN = st.sampled_from(["0", "1", ""])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(GROUP, DOMAIN, DOMAIN), min_size=1, max_size=12), st.data())
def test_moving_vms_all_at_once_counts_what_moving_them_one_by_one_counts(placed, data):
    """A burst moves thousands of VMs to the groups their sets are named after in one batch
    (Counts.regroup): groups of one emptied, groups of several thinned, groups swapped, joined by
    one VM or by many; the counts are those of the VMs moved one at a time (Counts.move)."""
    one_by_one, at_once = Counts(POLICY.by_kind), Counts(POLICY.by_kind)
    group_of = {}
    for i, (group, fd, ud) in enumerate(placed):
        vm = AgentVm(f"vm-{i}", fd=fd, ud=ud)
        fleet = Fleet(POLICY)
        fleet.beat(vm, t=T0)
        record = fleet.state.vms[vm.key]
        for counts in (one_by_one, at_once):
            counts.put(vm.key, group, counts.shape(record))
        group_of[vm.key] = group
    moving = data.draw(st.lists(st.sampled_from(sorted(group_of)), unique=True))
    moves = [(key, group_of[key], data.draw(GROUP)) for key in moving]
    moves = [(key, old, new) for key, old, new in moves if new != old]
    for key, old, new in moves:
        one_by_one.move(key, old, new)
    emptied = at_once.regroup(moves)
    assert counted(at_once) == counted(one_by_one)
    assert set(emptied) >= {old for _, old, _ in moves} - set(at_once.groups)
    assert all(at_once.look(s) == one_by_one.look(s) for s in one_by_one.scopes())
