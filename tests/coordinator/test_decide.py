"""The decision pass, by example: one reason code or rule per test."""

from __future__ import annotations

import random

import pytest

from se_forwarder.fleet.coordinator import Budget, Policy, evaluate, to_dict
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.config import Blackout
from se_forwarder.fleet.coordinator.decide import index, unavailable

from .fleet import SET, SOURCE, T0, AgentVm, Fleet, approvals, avset, heartbeat, kinds, pause_event, report


def test_an_event_that_fits_every_budget_is_approved_to_an_affected_vm():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    result = fleet.decide(T0 + 1)
    (decision,) = result.decisions
    assert (decision.kind, decision.code, decision.attempt) == ("approve", "fits", 1)
    assert decision.target is not None and decision.target.name == "web-1"
    assert decision.id == "E1/coordinator/approve/1"
    assert [(u.kind, u.used, u.with_event, u.max) for u in decision.budgets] == [("group", 0, 1, 1)]


def test_the_approval_goes_to_an_affected_vm_that_reported_the_event_before_one_that_did_not_then_by_name():
    fleet = avset(Policy(budgets=(Budget("group", count=3),)))
    fleet.announce("E1", [SET[3], SET[1], SET[2]], [SET[0], SET[3], SET[2]])  # web-1 has not reported it
    (decision,) = fleet.decide(T0 + 1).decisions
    assert (decision.kind, decision.target.name) == ("approve", "web-2")


def test_an_event_whose_type_is_not_managed_is_left_alone():
    fleet = avset()
    fleet.announce("F1", [SET[1]], SET, event_type="Freeze")
    result = fleet.decide(T0 + 1)
    assert result.decisions == [] and fleet.verdict(result, "F1").code == "unmanaged"


def test_an_event_past_its_not_before_gets_no_decision():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET, not_before=T0 - 1)
    result = fleet.decide(T0)
    assert result.decisions == [] and fleet.verdict(result, "E1").code == "due"


@pytest.mark.parametrize("event_type", ["Freeze", "Preempt", "Terminate"])
def test_an_unmanaged_event_names_the_vms_it_affects(event_type):
    fleet = avset()
    fleet.announce("U1", [SET[1], SET[4]], SET, event_type=event_type)
    verdict = fleet.verdict(fleet.decide(T0 + 1), "U1")
    assert verdict.code == "unmanaged" and verdict.affected == (SET[1].key, SET[4].key)


def test_an_event_past_its_not_before_names_the_vms_it_affects():
    fleet = avset()
    fleet.announce("E1", [SET[2]], SET, not_before=T0 - 1)
    verdict = fleet.verdict(fleet.decide(T0), "E1")
    assert verdict.code == "due" and verdict.affected == (SET[2].key,)


def test_an_event_further_ahead_than_approve_within_is_deferred_too_early():
    fleet = avset(Policy(approve_within=3600))
    fleet.announce("E1", [SET[1]], SET, not_before=T0 + 3601)
    assert kinds(fleet.decide(T0)) == [("defer", "E1", "too-early")]
    fleet.announce("E2", [SET[2]], SET, not_before=T0 + 3600)
    assert ("approve", "E2", "fits") in kinds(fleet.decide(T0))


def test_a_held_event_is_deferred_held():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    fleet.fold({"type": "com.azure.scheduledevents.coordinator.hold", "id": "E1/coordinator/hold/1",
                "source": SOURCE, "subject": "E1", "time": "2026-03-02T11:00:00Z",
                "data": {"EventId": "E1", "Sequence": 1, "Actor": "person:ops", "Reason": "db migration"}})
    result = fleet.decide(T0)
    assert kinds(result) == [("defer", "E1", "held")]
    assert result.decisions[0].reason == "held by person:ops: db migration"


@pytest.mark.parametrize("scope", ["fleet", f"fault_domain:set/{SET[0].sub}/rg-web/web-0/1"])
def test_an_event_touching_a_paused_scope_is_deferred_paused(scope):
    fleet = avset(Policy(budgets=(Budget("group", count=1), Budget("fault_domain", count=1))))
    fleet.fold(pause_event(scope))
    fleet.announce("E1", [SET[1]], SET)  # web-1 is in FD 1
    result = fleet.decide(T0)
    assert kinds(result) == [("defer", "E1", "paused")] and result.decisions[0].scope == scope


def test_a_pause_of_another_scope_does_not_stop_an_event():
    fleet = avset()
    fleet.fold(pause_event("zone:westeurope/3"))
    fleet.announce("E1", [SET[1]], SET)
    assert kinds(fleet.decide(T0)) == [("approve", "E1", "fits")]


def test_nothing_is_approved_early_inside_a_blackout():
    fleet = avset(Policy(blackouts=(Blackout("change freeze", start=T0 - 10, end=T0 + 10),)))
    fleet.announce("E1", [SET[1]], SET)
    result = fleet.decide(T0)
    assert kinds(result) == [("defer", "E1", "blackout")]
    assert ("approve", "E1", "fits") in kinds(fleet.decide(T0 + 10))


def test_a_resource_that_matches_no_vm_is_unresolved():
    fleet = avset()
    fleet.announce("E1", [SET[1], AgentVm("ghost")], [SET[1]])
    result = fleet.decide(T0)
    assert kinds(result) == [("defer", "E1", "unresolved")] and "ghost" in result.decisions[0].reason


def test_a_resource_resolves_among_the_group_even_before_that_vm_reported_the_event():
    fleet = avset()
    fleet.announce("E1", [SET[1]], [SET[2]])  # web-2 saw it first; web-1 not yet
    result = fleet.decide(T0)
    assert kinds(result) == [("approve", "E1", "fits")] and result.decisions[0].target.name == "web-1"


def test_equal_names_in_other_resource_groups_do_not_collide():
    twin = AgentVm("web-1", rg="rg-other")  # same name, another resource group, not watched
    fleet = avset(Policy(queue_template="se-approvals-{vm_id}"))  # their queues differ (test_queue_conflicts)
    fleet.fold(report("scheduled", twin, "X", T0 - 9000), report("completed", twin, "X", T0 - 8000))
    fleet.announce("E1", [SET[1]], SET)
    result = fleet.decide(T0)
    assert kinds(result) == [("approve", "E1", "fits")] and result.decisions[0].target.vm_id == SET[1].vm_id


def test_an_affected_vm_without_a_fresh_heartbeat_is_not_watched_and_counts_unavailable():
    policy = Policy(heartbeat_timeout=180)
    fleet = avset(policy)
    fleet.beat(*SET[:1], *SET[2:], t=T0 + 200)  # web-1's last heartbeat is T0
    fleet.announce("E1", [SET[1]], SET, t=T0 + 200)
    result = fleet.decide(T0 + 200)
    assert kinds(result) == [("defer", "E1", "not-watched")]
    assert "web-1 is not watched (last heartbeat 3 min ago)" in result.decisions[0].reason
    assert result.unavailable == {SET[1].key: "not-watched"}


def test_a_heartbeat_exactly_heartbeat_timeout_old_still_watches():
    fleet = avset(Policy(heartbeat_timeout=180))
    fleet.announce("E1", [SET[1]], SET)
    assert kinds(fleet.decide(T0 + 180)) == [("approve", "E1", "fits")]


def test_a_vm_that_stopped_heartbeating_blocks_its_group_but_not_other_groups():
    other = [AgentVm(f"db-{i}", rg="rg-db") for i in range(2)]
    fleet = avset()
    fleet.beat(*other)
    fleet.announce("D0", [other[0]], other, t=T0 - 9000, not_before=T0 - 8000)
    fleet.transition("completed", "D0", [other[0]], t=T0 - 7000)
    fleet.beat(*SET[1:], *other, t=T0 + 600)  # web-0 went silent
    fleet.announce("E1", [SET[1]], SET, t=T0 + 600)
    fleet.announce("D1", [other[1]], other, t=T0 + 600)
    result = fleet.decide(T0 + 600)
    assert sorted(kinds(result)) == [("approve", "D1", "fits"), ("defer", "E1", "budget")]


def test_a_vm_whose_prepare_failed_is_deferred_and_counts_unavailable():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    fleet.fold(report("preparefailed", SET[1], "E1", T0 + 5, extra={"Reason": "drain timed out"}))
    result = fleet.decide(T0 + 10)
    assert kinds(result) == [("defer", "E1", "prepare-failed")]
    assert result.decisions[0].reason == "prepare failed on web-1: drain timed out"
    assert result.unavailable == {SET[1].key: "prepare-failed"}


def test_a_later_prepared_report_clears_a_prepare_failure():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    fleet.fold(report("preparefailed", SET[1], "E1", T0 + 5), report("prepared", SET[1], "E1", T0 + 8))
    assert kinds(fleet.decide(T0 + 10)) == [("approve", "E1", "fits")]


def test_require_prepared_waits_for_every_affected_vm_to_report_prepared():
    fleet = avset(Policy(require_prepared=True, budgets=(Budget("group", count=2),)))
    fleet.announce("E1", [SET[1], SET[2]], SET)
    both = ["web-1", "web-2"]
    fleet.fold(report("prepared", SET[1], "E1", T0 + 5, resources=both))
    result = fleet.decide(T0 + 10)
    assert kinds(result) == [("defer", "E1", "not-prepared")] and "web-2" in result.decisions[0].reason
    fleet.fold(report("prepared", SET[2], "E1", T0 + 20, resources=both))
    assert kinds(fleet.decide(T0 + 21)) == [("approve", "E1", "fits")]


def test_an_event_that_would_exceed_a_budget_is_deferred_budget():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    fleet.transition("started", "S1", [SET[2]], t=T0)  # a hardware failure: straight to Started
    result = fleet.decide(T0 + 1)
    assert kinds(result) == [("defer", "E1", "budget")]
    (use,) = result.decisions[0].budgets
    assert (use.used, use.with_event, use.max) == (1, 2, 1)


def test_approvals_made_earlier_in_the_same_pass_count():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET, not_before=T0 + 600)
    fleet.announce("E2", [SET[2]], SET, not_before=T0 + 700)
    assert kinds(fleet.decide(T0)) == [("approve", "E1", "fits"), ("defer", "E2", "budget")]


def test_the_earliest_not_before_goes_first_whatever_the_order_of_arrival():
    fleet = avset()
    fleet.announce("LATE", [SET[2]], SET, not_before=T0 + 900)
    fleet.announce("EARLY", [SET[1]], SET, not_before=T0 + 600)
    assert approvals(fleet.decide(T0)) == ["EARLY"]


def test_a_later_smaller_event_does_not_overtake_an_earlier_one_waiting_for_the_same_scope():
    policy = Policy(budgets=(Budget("group", count=2),))
    fleet = avset(policy)
    fleet.transition("started", "S1", [SET[5]], t=T0)
    fleet.announce("BIG", [SET[1], SET[2]], SET, not_before=T0 + 600)  # needs 2 of the 1 left
    fleet.announce("SMALL", [SET[3]], SET, not_before=T0 + 900)  # would fit the 1 left
    result = fleet.decide(T0 + 1)
    assert kinds(result) == [("defer", "BIG", "budget"), ("defer", "SMALL", "queued")]
    assert "kept for the earlier event BIG" in result.decisions[1].reason


def test_a_deferral_is_recorded_once_per_change_of_reason():
    fleet = avset(Policy(approve_within=600))
    fleet.announce("E1", [SET[1]], SET, not_before=T0 + 1200)
    fleet.announce("E0", [SET[2]], SET, not_before=T0 + 599)
    assert kinds(fleet.decide(T0)) == [("approve", "E0", "fits"), ("defer", "E1", "too-early")]
    assert kinds(fleet.decide(T0 + 10)) == []
    fleet.beat(*SET, t=T0 + 600)
    assert kinds(fleet.decide(T0 + 601)) == [("defer", "E1", "budget")]
    assert kinds(fleet.decide(T0 + 602)) == []
    ids = sorted(d for d in fleet.state.decisions if d.startswith("E1"))
    assert ids == ["E1/coordinator/defer/1-too-early", "E1/coordinator/defer/2-budget"]


def test_an_approved_event_is_not_decided_again():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    fleet.decide(T0)
    result = fleet.decide(T0 + 5)
    assert result.decisions == [] and fleet.verdict(result, "E1").code == "approved"


def test_an_approved_event_counts_unavailable_until_it_completes_then_for_min_healthy():
    fleet = avset(Policy(min_healthy=300))
    fleet.announce("E1", [SET[1]], SET, not_before=T0 + 600)
    fleet.announce("E2", [SET[2]], SET, not_before=T0 + 900)
    assert approvals(fleet.decide(T0)) == ["E1"]
    fleet.transition("started", "E1", [SET[1]], t=T0 + 30)
    assert approvals(fleet.decide(T0 + 31)) == []
    fleet.transition("completed", "E1", [SET[1]], t=T0 + 100)
    fleet.beat(*SET, t=T0 + 300)
    result = fleet.decide(T0 + 399)
    assert approvals(result) == [] and result.unavailable == {SET[1].key: "completed"}
    assert approvals(fleet.decide(T0 + 400)) == ["E2"]


def test_min_healthy_runs_from_each_vms_own_completion():
    fleet = avset(Policy(min_healthy=300, budgets=(Budget("group", count=2),)))
    fleet.transition("started", "S1", [SET[1], SET[2]], t=T0)
    fleet.fold(report("completed", SET[1], "S1", T0 + 10, resources=["web-1", "web-2"]))
    fleet.fold(report("completed", SET[2], "S1", T0 + 200, resources=["web-1", "web-2"]))
    fleet.beat(*SET, t=T0 + 300)
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 311) == {SET[2].key: "completed"}


def test_percent_budgets_scale_with_the_size_of_the_scope():
    vms = [AgentVm(f"n-{i:02d}", rg="rg-big") for i in range(25)]
    fleet = avset(Policy(budgets=(Budget("group", percent=10),)), vms)
    for i in range(1, 5):
        fleet.announce(f"E{i}", [vms[i]], vms, not_before=T0 + 600 + i)
    result = fleet.decide(T0)
    assert approvals(result) == ["E1", "E2"]  # 10% of 25 = 2.5, rounded down
    assert result.decisions[0].budgets[0].max == 2


def test_fault_domains_of_different_groups_are_different_scopes():
    other = [AgentVm(f"db-{i}", rg="rg-db", fd=str(i % 3)) for i in range(3)]
    fleet = avset(Policy(budgets=(Budget("fault_domain", count=1),)))
    fleet.beat(*other)
    fleet.announce("D0", [other[0]], other, t=T0 - 9000, not_before=T0 - 8000)
    fleet.transition("completed", "D0", [other[0]], t=T0 - 7000)
    fleet.announce("E1", [SET[3]], SET)  # FD "0" of the web set
    fleet.announce("D1", [other[0]], other)  # FD "0" of the db set
    assert sorted(approvals(fleet.decide(T0))) == ["D1", "E1"]


def test_zones_are_per_location():
    west = AgentVm("w", location="westeurope", zone="1")
    north = AgentVm("n", location="northeurope", zone="1")
    fleet = Fleet(Policy(budgets=(Budget("zone", count=1),)))
    fleet.beat(west, north)
    fleet.announce("E1", [west])
    fleet.announce("E2", [north])
    result = fleet.decide(T0)
    assert sorted(approvals(result)) == ["E1", "E2"]
    assert {d.budgets[0].scope for d in result.decisions} == {"zone:westeurope/1", "zone:northeurope/1"}


def test_resource_groups_are_per_subscription():
    one = AgentVm("a", rg="rg-app", sub="aaaaaaaa-0000-0000-0000-000000000000")
    two = AgentVm("b", rg="rg-app", sub="bbbbbbbb-0000-0000-0000-000000000000")
    fleet = Fleet(Policy(budgets=(Budget("resource_group", count=1),)))
    fleet.beat(one, two)
    fleet.announce("E1", [one])
    fleet.announce("E2", [two])
    assert sorted(approvals(fleet.decide(T0))) == ["E1", "E2"]


def test_a_tag_budget_holds_the_vms_with_the_same_tag_value():
    gold = [AgentVm(f"g{i}", rg=f"rg{i}", tags=(("tier", "gold"),)) for i in range(2)]
    fleet = Fleet(Policy(budgets=(Budget("tag:tier", count=1),)))
    fleet.beat(*gold)
    fleet.announce("E1", [gold[0]], not_before=T0 + 600)
    fleet.announce("E2", [gold[1]], not_before=T0 + 700)
    result = fleet.decide(T0)
    assert kinds(result) == [("approve", "E1", "fits"), ("defer", "E2", "budget")]
    assert result.decisions[1].scope == "tag:tier=gold"


def test_a_vm_already_unavailable_is_counted_once():
    fleet = avset()
    fleet.beat(*SET[2:], t=T0)
    fleet.transition("started", "S1", [SET[1]], t=T0)
    fleet.announce("E1", [SET[1]], SET)  # web-1 again: its group stays at 1
    fleet.fold(report("scheduled", SET[1], "E1", T0))
    assert ("approve", "E1", "fits") in kinds(fleet.decide(T0 + 1))


def test_shadow_mode_decides_the_same_and_marks_the_decisions():
    live, shadow = avset(), avset(Policy(shadow=True))
    for fleet in (live, shadow):
        fleet.announce("E1", [SET[1]], SET, not_before=T0 + 600)
        fleet.announce("E2", [SET[2]], SET, not_before=T0 + 700)
    a, b = live.decide(T0), shadow.decide(T0)
    assert kinds(a) == kinds(b) and [d.id for d in a.decisions] == [d.id for d in b.decisions]
    assert all(d.shadow for d in b.decisions) and not any(d.shadow for d in a.decisions)
    assert kinds(shadow.decide(T0 + 1)) == []  # the shadow approval counts in shadow mode


def test_a_live_coordinator_ignores_approvals_made_in_shadow_mode():
    fleet = avset(Policy(shadow=True))
    fleet.announce("E1", [SET[1]], SET)
    fleet.decide(T0)
    fleet.policy = Policy()
    result = fleet.decide(T0 + 1)
    assert kinds(result) == [("approve", "E1", "fits")] and result.decisions[0].attempt == 2


def test_two_instances_folding_in_different_orders_make_the_same_decisions():
    events = []
    for vm in SET:
        events.append(heartbeat(vm, T0))
    for i, name in ((1, "E1"), (2, "E2"), (3, "E3")):
        for vm in SET:
            events.append(report("scheduled", vm, name, T0, resources=[SET[i].name], not_before=T0 + 600 * i))
    events.append(report("started", SET[4], "S1", T0))
    shuffled = events[:]
    random.Random(7).shuffle(shuffled)
    results = []
    for order in (events, shuffled):
        fleet = Fleet(Policy(budgets=(Budget("group", count=2),)))
        fleet.fold(*order)
        results.append(evaluate(fleet.state, fleet.policy, T0 + 1))
    first, second = ([to_dict(d, SOURCE) for d in r.decisions] for r in results)
    assert first == second and first


def test_a_decision_folded_back_from_the_hub_twice_changes_nothing():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET)
    result = fleet.decide(T0)
    before = len(fleet.state.decisions)
    for decision in result.decisions:
        fold_event(fleet.state, to_dict(decision, SOURCE))
    assert len(fleet.state.decisions) == before and fleet.decide(T0 + 1).decisions == []


def test_a_vm_deleted_by_a_completed_terminate_leaves_its_scale_set_at_once():
    scale_set = [AgentVm(f"ss_{i}", scale_set="front") for i in range(3)]
    fleet = Fleet()
    fleet.beat(*scale_set, t=T0)
    fleet.announce("T1", [scale_set[0]], scale_set, t=T0, event_type="Terminate")
    fleet.fold(report("started", scale_set[0], "T1", T0 + 60, event_type="Terminate", resources=["ss_0"]))
    for vm in scale_set[1:]:  # ss_0 is gone; the others see the event leave their document
        fleet.fold(report("completed", vm, "T1", T0 + 120, event_type="Terminate", resources=["ss_0"]))
    fleet.beat(*scale_set[1:], t=T0 + 400)
    fleet.announce("E1", [scale_set[1]], scale_set[1:], t=T0 + 400)
    result = fleet.decide(T0 + 400)
    assert kinds(result) == [("approve", "E1", "fits")] and result.unavailable == {}
    assert scale_set[0].key not in index(fleet.state, fleet.policy).members


def test_a_terminated_vm_heard_from_again_is_back_in_the_fleet():
    vm, other = AgentVm("ss_0", scale_set="front"), AgentVm("ss_1", scale_set="front")
    fleet = Fleet()
    fleet.beat(vm, other, t=T0)
    fleet.announce("T1", [vm], [vm, other], t=T0, event_type="Terminate")
    fleet.fold(report("started", vm, "T1", T0 + 60, event_type="Terminate", resources=["ss_0"]))
    fleet.fold(report("completed", other, "T1", T0 + 120, event_type="Terminate", resources=["ss_0"]))
    assert vm.key not in index(fleet.state, fleet.policy).members
    fleet.beat(vm, t=T0 + 200)
    assert vm.key in index(fleet.state, fleet.policy).members
