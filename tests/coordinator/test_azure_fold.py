"""The fold merges Azure's view with the agents' (azure_fold.py, azure_topology.py): Azure's word on
an event's status and on each VM's topology wins, agentless VMs are in the fleet, and the order in
which the two sources arrive does not matter."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.decide import index, resolve, unavailable
from se_forwarder.fleet.coordinator.fold import fold_catch_up, fold_event, restore
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot
from se_forwarder.fleet.coordinator.fold.state import COMPLETED, SCHEDULED, STARTED

from .azure import catch_up, facts, feed, policy, row, vm_row
from .fleet import SET, T0, AgentVm, Fleet, heartbeat, report

AGENTS, AGENTLESS = SET[:4], SET[4:]  # web-4 and web-5 run no agent


def fleet_with_azure(t: float = T0) -> Fleet:
    """The six-VM set: four agents heartbeating, and Azure's catch-up listing all six."""
    fleet = Fleet(policy())
    fleet.beat(*AGENTS, t=t)
    fold_catch_up(fleet.state, catch_up(t, [vm_row(vm) for vm in SET]))
    return fleet


def test_vms_azure_lists_and_no_agent_reports_are_in_the_fleet_as_agentless():
    fleet = fleet_with_azure()
    idx = index(fleet.state, fleet.policy)
    assert sorted(fleet.state.vms[k].name for k in idx.members) == [vm.name for vm in SET]
    for vm in AGENTLESS:
        record = fleet.state.vms[vm.vm_id]
        assert (record.last_heartbeat, record.complete, record.fault_domain) == (None, True, vm.fd)


def test_groups_carry_the_availability_sets_azure_name():
    fleet = fleet_with_azure()
    idx = index(fleet.state, fleet.policy)
    assert set(idx.group_of.values()) == {f"avset/{SET[0].sub}/rg-web/web"}


def test_an_agentless_vm_is_watched_while_azures_view_is_fresh_and_unavailable_once_it_is_stale():
    fleet = fleet_with_azure()
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 60) == {}
    stale = T0 + fleet.policy.azure_fresh_for + 1
    fleet.beat(*AGENTS, t=stale)
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, stale) == {vm.vm_id: "not-watched" for vm in AGENTLESS}


def test_an_event_azure_reports_and_no_agent_did_is_in_the_fold_and_its_vm_counts_as_started():
    fleet = fleet_with_azure()
    fold_event(fleet.state, facts(feed("E1", "Scheduled", [SET[4]], T0 + 1, not_before=T0 + 900)))
    record = fleet.state.events["e1"]
    assert (record.rank, record.resources, record.not_before) == (SCHEDULED, ("web-4",), T0 + 900)
    assert resolve(fleet.state, index(fleet.state, fleet.policy), record).vms == (SET[4].vm_id,)
    fold_event(fleet.state, facts(feed("E1", "Started", [SET[4]], T0 + 5)))
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 6) == {SET[4].vm_id: "started"}


def test_azure_started_beats_an_agent_that_says_completed():
    fleet = fleet_with_azure()
    fleet.fold(report("scheduled", SET[0], "E1", T0 + 1, not_before=T0 + 900))
    fold_event(fleet.state, facts(feed("E1", "Started", [SET[0]], T0 + 2)))
    fleet.fold(report("completed", SET[0], "E1", T0 + 3))
    assert fleet.state.events["e1"].rank == STARTED
    assert "e1" in fleet.state.open_events
    fold_event(fleet.state, facts(feed("E1", "Completed", [SET[0]], T0 + 4)))
    assert fleet.state.events["e1"].rank == COMPLETED


def test_an_agent_that_saw_the_event_started_before_azures_feed_said_so_is_believed():
    fleet = fleet_with_azure()
    fold_event(fleet.state, facts(feed("E1", "Scheduled", [SET[0]], T0 + 1, not_before=T0 + 900)))
    fleet.fold(report("started", SET[0], "E1", T0 + 2))
    assert fleet.state.events["e1"].rank == STARTED


def test_an_agent_that_saw_an_event_canceled_does_not_start_it_while_azure_shows_it_scheduled():
    fleet = fleet_with_azure()
    fold_event(fleet.state, facts(feed("E1", "Scheduled", [SET[0]], T0 + 1, not_before=T0 + 900)))
    fleet.fold(report("canceled", SET[0], "E1", T0 + 2))
    assert fleet.state.events["e1"].rank == SCHEDULED


def test_azures_resources_and_not_before_win_over_an_agents():
    fleet = fleet_with_azure()
    fleet.fold(report("scheduled", SET[0], "E1", T0 + 1, resources=["web-0", "web-1"], not_before=T0 + 300))
    fold_event(fleet.state, facts(feed("E1", "Scheduled", [SET[0]], T0 + 2, not_before=T0 + 900)))
    fleet.fold(report("scheduled", SET[0], "E1", T0 + 3, resources=["web-0", "web-1"], not_before=T0 + 300))
    record = fleet.state.events["e1"]
    assert (record.resources, record.not_before) == (("web-0",), T0 + 900)


def test_azures_topology_replaces_what_an_agent_says_of_itself_and_keeps_its_claim():
    liar = AgentVm("web-1", fd="2", ud="1", scale_set="other")
    fleet = fleet_with_azure()
    fleet.fold(heartbeat(liar, T0 + 5))
    record = fleet.state.vms[SET[1].vm_id]
    assert (record.fault_domain, record.scale_set) == (SET[1].fd, "")
    assert fleet.state.azure.claims[SET[1].vm_id][3:5] == ("other", "2")


def test_a_vm_azure_no_longer_lists_leaves_the_fleet_if_agentless_and_gets_its_claim_back_if_not():
    fleet = fleet_with_azure()
    fleet.fold(heartbeat(AgentVm("web-1", fd="2", ud="1"), T0 + 5))
    kept = [vm_row(vm) for vm in SET if vm.name not in ("web-1", "web-5")]
    fold_catch_up(fleet.state, catch_up(T0 + 60, kept))
    assert SET[5].vm_id not in fleet.state.vms
    assert fleet.state.vms[SET[1].vm_id].fault_domain == "2"


def test_an_older_catch_up_does_not_replace_a_newer_topology():
    fleet = fleet_with_azure(T0)
    fold_catch_up(fleet.state, catch_up(T0 - 60, [vm_row(vm) for vm in SET[:2]]))
    assert len(index(fleet.state, fleet.policy).members) == 6


def test_the_azure_view_survives_a_snapshot():
    fleet = fleet_with_azure()
    fold_event(fleet.state, facts(feed("E1", "Started", [SET[4]], T0 + 1)))
    fleet.fold(heartbeat(AgentVm("web-1", fd="2", ud="1"), T0 + 5))
    assert snapshot(restore(snapshot(fleet.state))) == snapshot(fleet.state)


def _inputs() -> list[tuple[str, object]]:
    """Agent reports and Azure's observations of two events, as a list to shuffle."""
    return [
        ("agent", report("scheduled", SET[0], "E1", T0 + 1, not_before=T0 + 900)),
        ("agent", report("started", SET[0], "E1", T0 + 3)),
        ("agent", report("completed", SET[0], "E1", T0 + 9)),
        ("agent", heartbeat(AgentVm("web-1", fd="2", ud="1"), T0 + 4)),
        ("agent", report("scheduled", SET[1], "E2", T0 + 2, resources=["web-4"], not_before=T0 + 800)),
        ("feed", feed("E1", "Scheduled", [SET[0]], T0 + 1, not_before=T0 + 900)),
        ("feed", feed("E1", "Started", [SET[0]], T0 + 2)),
        ("feed", feed("E2", "Scheduled", [SET[4]], T0 + 2, not_before=T0 + 800)),
        ("graph", catch_up(T0 + 5, [vm_row(vm) for vm in SET], [row("E1", "Started", [SET[0]]),
                                                                  row("E2", "Scheduled", [SET[4]],
                                                                      not_before=T0 + 800)])),
    ]


def _fold_all(order: list[tuple[str, object]]) -> dict:
    fleet = Fleet(policy())
    for kind, item in order:
        if kind == "agent":
            fleet.fold(item)  # type: ignore[arg-type]
        elif kind == "feed":
            fold_event(fleet.state, facts(item))  # type: ignore[arg-type]
        else:
            fold_catch_up(fleet.state, item)  # type: ignore[arg-type]
    return snapshot(fleet.state)


@settings(max_examples=40, deadline=None)
@given(st.permutations(range(len(_inputs()))))
def test_the_merged_fold_does_not_depend_on_the_order_of_agents_feed_and_catch_up(order):
    inputs = _inputs()
    assert _fold_all([inputs[i] for i in order]) == _fold_all(inputs)


def test_the_feed_arriving_before_after_or_without_the_agents_reports_gives_the_same_verdict():
    verdicts = []
    agent = [report("scheduled", vm, "E9", T0 + 1, resources=["web-2"], not_before=T0 + 900)
             for vm in SET[:4]]
    azure = [feed("E9", "Scheduled", [SET[2]], T0 + 1, not_before=T0 + 900)]
    for first, then in itertools.permutations((agent, azure)):
        fleet = fleet_with_azure()
        for item in first + then:
            fleet.fold(item) if item["type"].startswith("com.") else fold_event(fleet.state, facts(item))
        verdicts.append(fleet.decide(T0 + 10, apply=False).verdicts["e9"].code)
    fleet = fleet_with_azure()
    for item in azure:
        fold_event(fleet.state, facts(item))
    verdicts.append(fleet.decide(T0 + 10, apply=False).verdicts["e9"].code)
    assert verdicts == ["approved"] * 3


def test_an_event_azure_shows_ended_that_the_fold_never_knew_is_history_and_not_folded():
    fleet = fleet_with_azure()
    history = [row("OLD", "Completed", [SET[4]])]
    fold_catch_up(fleet.state, catch_up(T0 + 5, [vm_row(vm) for vm in SET], history))
    assert "old" not in fleet.state.events
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 6) == {}


def test_a_vm_not_opted_in_to_azures_feed_is_not_watched_by_azure():
    fleet = Fleet(policy())
    fleet.beat(*AGENTS, t=T0)
    fold_catch_up(fleet.state, catch_up(T0, [vm_row(vm) for vm in SET], opted_in=False))
    idx = index(fleet.state, fleet.policy)
    expected = {vm.vm_id: "not-watched" for vm in AGENTLESS}
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 1) == expected


def test_azures_completed_is_the_completion_of_an_agentless_vm_which_never_reports_one():
    fleet = fleet_with_azure()
    fold_event(fleet.state, facts(feed("E1", "Started", [SET[4]], T0 + 1)))
    fold_event(fleet.state, facts(feed("E1", "Completed", [SET[4]], T0 + 60)))
    assert "e1" not in fleet.state.open_events
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 61) == {SET[4].vm_id: "completed"}
    back = T0 + 60 + fleet.policy.min_healthy
    assert unavailable(fleet.state, fleet.policy, idx, back) == {}


def test_a_vm_whose_agent_says_completed_stays_started_while_azure_shows_the_event_started():
    fleet = fleet_with_azure()
    fleet.fold(report("scheduled", SET[0], "E1", T0 + 1, not_before=T0 + 900))
    fold_event(fleet.state, facts(feed("E1", "Started", [SET[0]], T0 + 2)))
    fleet.fold(report("completed", SET[0], "E1", T0 + 3))
    fleet.beat(*AGENTS, t=T0 + 4)
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 5) == {SET[0].vm_id: "started"}
    fold_event(fleet.state, facts(feed("E1", "Completed", [SET[0]], T0 + 30)))
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 31) == {SET[0].vm_id: "completed"}


def test_azures_completed_ends_the_event_for_an_agent_vm_that_never_reported_it_over():
    fleet = fleet_with_azure()
    fleet.fold(report("started", SET[0], "E1", T0 + 1, resources=["web-0"]))
    fold_event(fleet.state, facts(feed("E1", "Completed", [SET[0]], T0 + 30)))
    fleet.beat(*AGENTS, t=T0 + 31)
    assert "e1" not in fleet.state.open_events
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 30 + fleet.policy.min_healthy) == {}
