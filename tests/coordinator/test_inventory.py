"""A VM's claims about itself do not move others' budgets (issue 31): percentage scopes take their
size from the inventory (where each VM was first placed, or an operator confirmed, or Azure says),
and a name or resourceId two VMs claim holds both down at first, then only the later claimant."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import Budget, ControlRefused, Policy, restore
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.decide import index, unavailable
from se_forwarder.fleet.coordinator.decide.control import confirm
from se_forwarder.fleet.coordinator.fold import FleetState
from se_forwarder.fleet.coordinator.fold.inventory import claimed_at
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot
from se_forwarder.fleet.coordinator.view.alerts import derive
from se_forwarder.fleet.coordinator.view.digest import Digest
from se_forwarder.fleet.coordinator.view.status import status

from .fleet import T0, AgentVm, Fleet, approvals, heartbeat

ZONE1 = [AgentVm(f"z1-{i}", rg="rg", zone="1") for i in range(19)]
ATTACKER = AgentVm("z2-0", rg="rg", zone="2")
TEN_PERCENT = Policy(budgets=(Budget("zone", percent=10),), heartbeat_timeout=60.0)
ZONE_1 = "zone:westeurope/1"


def zone_fleet(policy: Policy = TEN_PERCENT) -> Fleet:
    fleet = Fleet(policy)
    fleet.beat(*ZONE1, ATTACKER, t=T0)
    return fleet


def claim_zone(fleet: Fleet, vm: AgentVm, zone: str, t: float) -> None:
    event = heartbeat(vm, t)
    event["data"]["Vm"] = {**event["data"]["Vm"], "zone": zone}
    fleet.fold(event)


def test_claiming_a_zone_does_not_grow_its_percentage_budget():
    fleet = zone_fleet()
    claim_zone(fleet, ATTACKER, "1", T0 + 10)
    idx = index(fleet.state, fleet.policy)
    assert ATTACKER.key in [k for k in idx.members if ZONE_1 in idx.scopes_of[k]]  # it counts down there
    assert (idx.size[ZONE_1], idx.inventory[ZONE_1], idx.limit(ZONE_1)) == (20, 19, 1)
    assert idx.outside[ATTACKER.key] == (ZONE_1,)


def test_the_review_s_case_two_of_nineteen_real_vms_never_go_at_once():
    fleet = zone_fleet()
    claim_zone(fleet, ATTACKER, "1", T0 + 10)
    fleet.beat(*ZONE1, t=T0 + 20)
    claim_zone(fleet, ATTACKER, "1", T0 + 20)
    fleet.announce("E1", [ZONE1[0]], t=T0 + 20, not_before=T0 + 900)
    fleet.announce("E2", [ZONE1[1]], t=T0 + 20, not_before=T0 + 901)
    assert approvals(fleet.decide(T0 + 21)) == ["E1"]


def test_a_vm_first_seen_in_a_zone_grows_it():
    fleet = zone_fleet()
    newcomer = AgentVm("z1-new", rg="rg", zone="1")
    fleet.beat(newcomer, t=T0 + 30)
    assert index(fleet.state, fleet.policy).inventory[ZONE_1] == 20


def test_a_confirmed_placement_counts_and_the_confirmation_is_audited():
    fleet = zone_fleet()
    claim_zone(fleet, ATTACKER, "1", T0 + 10)
    decision = confirm(fleet.state, fleet.policy, T0 + 11, ZONE_1, "person:ops", "moved by the ops team")
    data = decision.data()
    assert (decision.kind, data["Actor"], data["Reason"], data["Scope"]) == (
        "confirm", "person:ops", "moved by the ops team", ZONE_1)
    assert [c["vm"] for c in data["Confirmed"]] == [ATTACKER.key]
    assert data["Confirmed"][0]["placement"][3] == "1"
    fleet.apply(decision)
    idx = index(fleet.state, fleet.policy)
    assert (idx.inventory[ZONE_1], idx.limit(ZONE_1), idx.outside.get(ATTACKER.key, ())) == (20, 2, ())
    with pytest.raises(ControlRefused, match="counts where it claims to be already") as refused:
        confirm(fleet.state, fleet.policy, T0 + 12, ZONE_1, "person:ops", "again")
    assert refused.value.code == "no-change"
    assert index(restore(snapshot(fleet.state)), fleet.policy).inventory[ZONE_1] == 20


def test_a_confirmation_read_before_the_claim_it_confirms_counts_the_same():
    fleet = zone_fleet()
    claim_zone(fleet, ATTACKER, "1", T0 + 10)
    decision = confirm(fleet.state, fleet.policy, T0 + 11, ZONE_1, "person:ops", "checked")
    other = Fleet(TEN_PERCENT)
    other.apply(decision)  # a standby reading the decision's partition first
    other.beat(*ZONE1, ATTACKER, t=T0)
    claim_zone(other, ATTACKER, "1", T0 + 10)
    assert index(other.state, other.policy).inventory[ZONE_1] == 20


def test_status_shows_who_is_outside_its_inventory():
    fleet = zone_fleet()
    claim_zone(fleet, ATTACKER, "1", T0 + 10)
    doc = status(fleet.state, fleet.policy, T0 + 11, all_scopes=True)
    assert doc["outsideInventory"] == [{"name": "z2-0", "vmId": ATTACKER.vm_id, "scopes": [ZONE_1]}]
    zone = next(s for s in doc["scopes"] if s["scope"] == ZONE_1)
    assert (zone["size"], zone["inventory"], zone["max"]) == (20, 19, 1)


def test_a_snapshot_keeps_each_vm_s_placement():
    fleet = zone_fleet()
    claim_zone(fleet, ATTACKER, "1", T0 + 10)
    again = restore(snapshot(fleet.state))
    assert snapshot(again) == snapshot(fleet.state)
    assert index(again, fleet.policy).inventory[ZONE_1] == 19


# -- a name or resourceId claimed twice ---------------------------------------------------------------

WEB = [AgentVm(f"web-{i}", rg="rg", scale_set="web") for i in range(3)]
GROUP_ONE = Policy(budgets=(Budget("group", count=1),), heartbeat_timeout=60.0)


def copied_name(fleet: Fleet, t: float) -> None:
    """web-2 claims web-0's name (and resourceId) in its own reports."""
    event = heartbeat(WEB[2], t)
    event["data"]["Vm"] = {**event["data"]["Vm"], "name": "web-0", "resourceId": WEB[0].resource_id}
    fleet.fold(event)


def test_a_copied_name_holds_both_down_then_only_the_later_claimant():
    fleet = Fleet(GROUP_ONE)
    fleet.beat(*WEB, t=T0)
    copied_name(fleet, T0 + 10)
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 11) == {WEB[0].key: "name-conflict",
                                                                    WEB[2].key: "name-conflict"}
    fleet.beat(WEB[0], WEB[1], t=T0 + 71)
    copied_name(fleet, T0 + 71)
    later = unavailable(fleet.state, fleet.policy, index(fleet.state, fleet.policy), T0 + 72)
    assert later == {WEB[2].key: "name-conflict"}  # the conflict is older than heartbeat_timeout
    [shown] = status(fleet.state, fleet.policy, T0 + 72)["nameConflicts"]
    assert shown["first"] == f"web-0 ({WEB[0].vm_id})" and shown["held"] == [f"web-0 ({WEB[2].vm_id})"]


def test_once_the_conflict_settled_only_the_copier_takes_budget():
    fleet = Fleet(Policy(budgets=(Budget("group", count=2),), heartbeat_timeout=60.0))
    fleet.beat(*WEB, t=T0)
    copied_name(fleet, T0 + 10)
    fleet.announce("E1", [WEB[1]], t=T0 + 11, not_before=T0 + 900)
    young = fleet.decide(T0 + 12)
    assert approvals(young) == [] and fleet.verdict(young, "E1").code == "budget"  # 2 held + web-1
    fleet.beat(WEB[0], WEB[1], t=T0 + 71)
    copied_name(fleet, T0 + 71)
    assert approvals(fleet.decide(T0 + 72)) == ["E1"]  # only the copier is held now: web-1 fits


def test_a_copied_name_is_one_alert_naming_who_is_held_resolved_when_the_copier_falls_silent():
    fleet = Fleet(GROUP_ONE)
    fleet.beat(*WEB, t=T0)
    copied_name(fleet, T0 + 10)
    fleet.beat(WEB[0], WEB[1], t=T0 + 71)
    copied_name(fleet, T0 + 71)
    alert = derive(fleet.state, fleet.decide(T0 + 72)).open["name-conflict"]
    assert (alert.kind, alert.severity) == ("name-conflict", "warning")
    assert alert.summary == ("2 VM(s) claim a name or resourceId another VM claims; "
                             "counted as unavailable: web-0")
    assert dict(alert.details) == {"Held": "web-0", "First": "web-0"}  # the copier goes by web-0 too
    fleet.beat(WEB[0], WEB[1], t=T0 + 140)
    assert "name-conflict" in derive(fleet.state, fleet.decide(T0 + 141)).resolved  # not heard for 70 s


def test_a_name_claimed_before_the_copier_registered_is_still_the_first_whatever_the_registration_order():
    fleet = Fleet(GROUP_ONE)
    fleet.beat(WEB[2], t=T0 - 1000)  # the copier was there long before
    fleet.beat(WEB[0], WEB[1], t=T0)
    copied_name(fleet, T0 + 10)
    fleet.beat(WEB[0], WEB[1], t=T0 + 71)
    copied_name(fleet, T0 + 71)
    assert unavailable(fleet.state, fleet.policy, index(fleet.state, fleet.policy), T0 + 72) == {
        WEB[2].key: "name-conflict"}


# -- order does not matter ------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       zones=st.lists(st.sampled_from(["1", "2", "3"]), min_size=1, max_size=5))
def test_placements_and_claims_are_the_same_whatever_order_the_reports_are_folded_in(seed, zones):
    events = [heartbeat(vm, T0) for vm in ZONE1[:3]]
    for i, zone in enumerate(zones):
        event = heartbeat(ATTACKER, T0 + i)
        event["data"]["Vm"] = {**event["data"]["Vm"], "zone": zone, "name": f"n{i % 2}"}
        events.append(event)
    first, second = both_orders(events, seed)
    assert snapshot(first) == snapshot(second)


def both_orders(events: list[dict], seed: int) -> tuple[FleetState, FleetState]:
    """``events`` folded as they are, and in an order ``seed`` shuffles them to."""
    states = []
    for order in (events, random.Random(seed).sample(events, len(events))):
        state = FleetState()
        for event in order:
            fold_event(state, event, received=event_time(event))
        states.append(state)
    return states[0], states[1]


def event_time(event: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()


@settings(max_examples=40, deadline=None)
@given(moves=st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["1", "2", "3"])), max_size=12))
def test_no_claim_of_a_vm_already_placed_grows_any_zone_s_inventory(moves):
    """However the VMs of a fleet move their zone claims, each zone's inventory holds at most the
    VMs first placed there, so no percentage limit grows."""
    vms = [AgentVm(f"m-{i}", rg="rg", zone=str(i % 3 + 1)) for i in range(5)]
    fleet = Fleet(TEN_PERCENT)
    fleet.beat(*vms, t=T0)
    first = {f"zone:westeurope/{z}": sum(1 for vm in vms if vm.zone == z) for z in ("1", "2", "3")}
    for step, (i, zone) in enumerate(moves):
        claim_zone(fleet, vms[i], zone, T0 + 1 + step)
    idx = index(fleet.state, fleet.policy)
    for scope, placed in first.items():
        assert idx.inventory[scope] <= placed


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       spellings=st.lists(st.sampled_from([str.upper, str.lower, str]), min_size=1, max_size=6))
def test_a_resource_id_in_another_case_is_the_same_claim_whatever_the_order(seed, spellings):
    """A claim is its resourceId in lower case (the record holds it as sent): one claim, from the
    earliest report, and the same fold in any order."""
    events = []
    for i, spelled in enumerate(spellings):
        event = heartbeat(ATTACKER, T0 + i)
        said = event["data"]["Vm"]
        event["data"]["Vm"] = {**said, "resourceId": spelled(said["resourceId"])}
        events.append(event)
    first, second = both_orders(events, seed)
    assert snapshot(first) == snapshot(second) and Digest().of(first) == Digest().of(second)
    vm = first.vms[ATTACKER.key]
    assert [(n, r.lower(), t) for n, r, t in vm.claims] == [(ATTACKER.name, vm.resource_id.lower(), T0)]
    assert claimed_at(vm) == T0
