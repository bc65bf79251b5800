"""The scope index kept up to date equals the index made from scratch, whatever the fold did between.

decide/scopes.py places again only the VMs the fold moved (and their sets, names and Terminates);
decide/availability.py keeps the VMs by heartbeat rather than looking at each every pass. These
properties fold any mix of reports, new VMs, renames, moves, host: records, scale sets, Azure's
topology, Terminates, prunes and confirmed placements, look at the index at random points in
between (so it is kept up to date by many small steps), and compare it with one made from the whole
fold at once: every member, group, scope, size, inventory, name, alias, shared queue and shared
claim, each event's resolution, and who is unavailable and why (the VMs that say unhealthy kept by
the fold, not looked for)."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import FleetState, Policy, evaluate
from se_forwarder.fleet.coordinator.decide import index, resolve, unavailable
from se_forwarder.fleet.coordinator.decide.scopes import ScopeIndex

from .fleet import SET, T0, Fleet
from .moves import POLICY, POLICY_ID, fold_step, step


def canonical(idx: ScopeIndex, state: FleetState) -> dict:
    return {
        "members": idx.members, "alias": idx.alias,
        "extra": {k: sorted(v) for k, v in idx.extra_heartbeats.items()},
        "group_of": idx.group_of, "scopes_of": dict(idx.scopes_of),
        "budget_scopes_of": dict(idx.budget_scopes_of),
        "kind_of": dict(idx.kind_of), "size": dict(idx.size), "inventory": dict(idx.inventory),
        "outside": idx.outside, "budget_of": dict(idx.budget_of),
        "dup_names": {n: sorted(groups) for n, groups in idx.dup_names.items()},
        "shared_queue": idx.shared_queue, "shared_claims": sorted(idx.shared_claims(state)),
        "retired": sorted(state.retired),
    }


def scratch(state: FleetState, policy: Policy) -> tuple[FleetState, ScopeIndex]:
    """The same fold with no index made yet: its index (and the VMs that say unhealthy) made from the
    whole fold at once."""
    fresh = copy.deepcopy(state)
    fresh.cache.clear()
    fresh.moved = None
    fresh.unhealthy = None
    return fresh, index(fresh, policy)


def run(steps: list[tuple], policy: Policy) -> FleetState:
    state = FleetState()
    for what, arg in steps:
        if not fold_step(state, what, arg, policy):
            index(state, policy)
            unavailable(state, policy, index(state, policy), arg)
    return state


@settings(max_examples=300, deadline=None)
@given(st.lists(step(), max_size=40), st.sampled_from([POLICY, POLICY_ID]), st.integers(0, 1200))
def test_the_index_kept_up_to_date_is_the_index_made_from_scratch(steps, policy, at):
    state = run(steps, policy)
    kept = index(state, policy)
    fresh_state, fresh = scratch(state, policy)
    assert canonical(kept, state) == canonical(fresh, fresh_state)
    for key, record in sorted(state.events.items()):
        assert resolve(state, kept, record) == resolve(fresh_state, fresh, fresh_state.events[key])


@settings(max_examples=300, deadline=None)
@given(st.lists(step(), max_size=40), st.sampled_from([POLICY, POLICY_ID]), st.integers(0, 1500))
def test_who_is_unavailable_is_the_same_from_the_kept_index_and_from_scratch(steps, policy, at):
    state = run(steps, policy)
    now = T0 + at
    kept = unavailable(state, policy, index(state, policy), now)
    fresh_state, fresh = scratch(state, policy)
    assert kept == unavailable(fresh_state, policy, fresh, now)


@settings(max_examples=300, deadline=None)
@given(st.lists(step(), max_size=40), st.sampled_from([POLICY, POLICY_ID]), st.integers(0, 1500))
def test_a_pass_on_the_kept_index_decides_what_one_on_an_index_made_from_scratch_does(steps, policy, at):
    state = run(steps, policy)
    now = T0 + at
    kept = evaluate(state, policy, now)
    fresh_state, _ = scratch(state, policy)
    fresh = evaluate(fresh_state, policy, now)
    assert kept.decisions == fresh.decisions
    assert kept.verdicts == fresh.verdicts
    assert (kept.unavailable, kept.used) == (fresh.unavailable, fresh.used)


def test_a_learned_group_named_anew_is_forgotten_and_resolutions_that_named_it_are_made_again():
    """Each VM is a group of its own until its set reports an event together; then the set is one
    group named after its first member, the old groups are forgotten rather than kept for ever, and
    an event resolved while they stood is resolved again in the group it is in now."""
    fleet = Fleet(Policy())
    fleet.beat(*SET, t=T0)
    fleet.announce("ALONE", [SET[1]], [SET[1]], t=T0)
    idx = index(fleet.state, fleet.policy)
    alone = fleet.state.events["alone"]
    assert resolve(fleet.state, idx, alone).vms == (SET[1].key,)
    before = set(idx.changed_at)
    assert len(before) == len(SET)  # each VM its own group

    fleet.announce("TOGETHER", [SET[0]], SET, t=T0 + 60)
    idx = index(fleet.state, fleet.policy)
    assert set(idx.changed_at) == set(idx.group_of.values()) == {idx.group_of[SET[0].key]}
    assert all(idx.changed(g) > idx.resolved["alone"].generation for g in before)
    assert resolve(fleet.state, idx, alone) == resolve(*scratch_resolution(fleet.state, "alone"))


def scratch_resolution(state: FleetState, key: str) -> tuple:
    fresh_state, fresh = scratch(state, Policy())
    return fresh_state, fresh, fresh_state.events[key]
