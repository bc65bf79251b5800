"""The scope index kept up to date equals the index made from scratch, whatever the fold did between.

decide/scopes.py places again only the VMs the fold moved (and their sets, names and Terminates);
decide/availability.py keeps the VMs by heartbeat rather than looking at each every pass. These
properties fold any mix of reports, new VMs, renames, moves, host: records, scale sets, Azure's
topology, Terminates and prunes, look at the index at random points in between (so it is kept up
to date by many small steps), and compare it with one made from the whole fold at once: every
member, group, scope, size, inventory, name, alias, shared queue and shared claim, each event's resolution,
and who is unavailable and why."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import Budget, FleetState, Policy
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.decide import index, resolve, unavailable
from se_forwarder.fleet.coordinator.decide.scopes import ScopeIndex
from se_forwarder.fleet.coordinator.fold import fold_catch_up
from se_forwarder.fleet.coordinator.fold.retention import prune

from .azure import catch_up, vm_row
from .fleet import T0, AgentVm, heartbeat, report

NAMES = ["web-0", "web-1", "web-2", "WEB-0", "db-0"]
POLICY = Policy(budgets=(Budget("group", count=1), Budget("zone", percent=34),
                         Budget("fault_domain", count=1)), group_tag="tier", azure_fresh_for=600)
POLICY_ID = Policy(budgets=(Budget("fleet", percent=50),), queue_template="se-approvals-{vm_id}")


@st.composite
def a_vm(draw: st.DrawFn) -> AgentVm:
    """A VM as its agent says it is now: its name, group, zone and domains may change."""
    name = draw(st.sampled_from(NAMES))
    return AgentVm(
        name, rg=draw(st.sampled_from(["rg-a", "rg-b"])), fd=draw(st.sampled_from(["0", "1"])),
        ud=draw(st.sampled_from(["0", "1", ""])), zone=draw(st.sampled_from(["", "1", "2"])),
        scale_set=draw(st.sampled_from(["", "", "ss"])),
        tags=draw(st.sampled_from([(), (("tier", "front"),), (("tier", "back"), ("team", "x"))])),
        complete=draw(st.integers(0, 5)) > 0)


@st.composite
def step(draw: st.DrawFn) -> tuple:
    kind = draw(st.sampled_from(["beat", "beat", "report", "report", "look", "look", "azure", "prune"]))
    t = T0 + draw(st.integers(0, 900))
    if kind == "beat":
        return ("fold", heartbeat(draw(a_vm()), t))
    if kind == "report":
        event_id, event_type = draw(st.sampled_from([("E1", "Reboot"), ("E2", "Redeploy"),
                                                     ("T3", "Terminate")]))
        names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
        what = draw(st.sampled_from(["scheduled", "scheduled", "started", "completed", "canceled"]))
        return ("fold", report(what, draw(a_vm()), event_id, t, event_type=event_type, resources=names,
                               not_before=T0 + 1200))
    if kind == "azure":
        listed = draw(st.lists(a_vm().filter(lambda v: v.complete), max_size=3))
        return ("azure", catch_up(t, [vm_row(v, avset=draw(st.sampled_from(["", "av1"]))) for v in listed]))
    if kind == "prune":
        return ("prune", t)
    return ("look", t)


def canonical(idx: ScopeIndex, state: FleetState) -> dict:
    return {
        "members": idx.members, "alias": idx.alias,
        "extra": {k: sorted(v) for k, v in idx.extra_heartbeats.items()},
        "group_of": idx.group_of, "scopes_of": idx.scopes_of, "budget_scopes_of": idx.budget_scopes_of,
        "kind_of": idx.kind_of, "size": {k: n for k, n in idx.size.items() if n},
        "inventory": {k: n for k, n in idx.inventory.items() if n}, "outside": idx.outside,
        "budget_of": idx.budget_of,
        "names": {g: {n: sorted(keys) for n, keys in names.items()} for g, names in idx.names.items()},
        "shared_queue": idx.shared_queue, "shared_claims": sorted(idx.shared_claims(state)),
        "retired": sorted(state.retired),
    }


def scratch(state: FleetState, policy: Policy) -> tuple[FleetState, ScopeIndex]:
    """The same fold with no index made yet: its index is made from the whole fold at once."""
    fresh = copy.deepcopy(state)
    fresh.cache.clear()
    fresh.moved = None
    return fresh, index(fresh, policy)


def fold_step(state: FleetState, what: str, arg: Any, policy: Policy) -> bool:
    """Fold one step of the fold's kinds (an agent's report, Azure's catch-up, a prune); False for
    a step of another kind."""
    if what == "fold":
        fold_event(state, copy.deepcopy(arg))
    elif what == "azure":
        fold_catch_up(state, arg)
    elif what == "prune":
        prune(state, policy, arg + 3000)
    else:
        return False
    return True


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
