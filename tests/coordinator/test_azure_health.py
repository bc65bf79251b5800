"""Azure's Resource Health as a third input: read at the edge (edge/azure_facts.py), folded in any
order (fold/health.py), and counted by the decision pass (decide/availability.py, recovery.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import Policy, status
from se_forwarder.fleet.coordinator.edge import azure_facts
from se_forwarder.fleet.coordinator.fold import fold_catch_up, fold_event
from se_forwarder.fleet.coordinator.fold.azure_state import HealthFacts
from se_forwarder.fleet.coordinator.fold.health import fold_azure_health
from se_forwarder.fleet.coordinator.fold.snapshot import restore, snapshot
from se_forwarder.fleet.coordinator.fold.state import FleetState

from .azure import catch_up, facts, feed, policy, vm_row, with_member
from .fleet import SET, SUB, T0, AgentVm, Fleet, approvals, heartbeat, iso

AGENTS, AGENTLESS = SET[:4], SET[4:]
STATUS_TYPE = "Microsoft.ResourceHealth/availabilityStatuses"


def changed(vm: AgentVm, state: str, t: float, *, previous: str = "Available") -> dict:
    """Event Grid's ``AvailabilityStatusChanged`` CloudEvent for ``vm``."""
    return {
        "specversion": "1.0", "id": f"h-{vm.name}-{state}-{t}", "source": f"/subscriptions/{vm.sub}",
        "subject": vm.resource_id, "time": iso(t),
        "type": "Microsoft.ResourceNotifications.HealthResources.AvailabilityStatusChanged",
        "data": {"resourceInfo": {
            "id": f"{vm.resource_id}/providers/{STATUS_TYPE}/{int(t)}", "name": str(int(t)),
            "type": STATUS_TYPE,
            "properties": {"targetResourceId": vm.resource_id,
                           "targetResourceType": "Microsoft.Compute/virtualMachines",
                           "occurredTime": iso(t), "previousAvailabilityState": previous,
                           "availabilityState": state}},
            "operationalInfo": {"resourceEventTime": iso(t)}, "apiVersion": "2023-12-01"},
    }


def health_row(vm: AgentVm, state: str, t: float, spelling: str = "occurredTime") -> dict:
    """The VM's ``healthresources`` row."""
    return {"id": f"{vm.resource_id}/providers/{STATUS_TYPE}/current", "name": "current",
            "type": "microsoft.resourcehealth/availabilitystatuses", "subscriptionId": vm.sub,
            "resourceGroup": vm.rg,
            "properties": {"targetResourceId": vm.resource_id, "availabilityState": state, spelling: iso(t),
                           "targetResourceType": "Microsoft.Compute/virtualMachines"}}


def read(event: dict) -> HealthFacts:
    found = azure_facts.feed_event(event, [SUB])
    assert isinstance(found, HealthFacts), found
    return found


def refusal(event: dict) -> str:
    found = azure_facts.feed_event(event, [SUB])
    assert isinstance(found, azure_facts.Refusal), found
    return found.code


# -- the edge ---------------------------------------------------------------------------------------

def test_an_availability_change_on_the_feed_is_read_as_a_vms_health():
    assert read(changed(SET[0], "Unavailable", T0)) == HealthFacts(SET[0].resource_id.lower(), "Unavailable",
                                                                   T0, "feed")


PROPS = ["data", "resourceInfo", "properties"]


@pytest.mark.parametrize(("path", "value", "code"), [
    (PROPS + ["availabilityState"], "Sleepy", "status"),
    (PROPS + ["targetResourceId"], "/subscriptions/x/resourceGroups/r/providers/Microsoft.Web/sites/a",
     "resource-id"),
    (PROPS + ["targetResourceId"], SET[0].resource_id.replace(SUB, "99999999-2222-3333-4444-555555555555"),
     "subscription"),
    (["data", "resourceInfo", "id"], f"{SET[1].resource_id}/providers/{STATUS_TYPE}/x", "resource-id"),
    (["source"], "/subscriptions/99999999-2222-3333-4444-555555555555", "subscription"),
    (PROPS + ["occurredTime"], "yesterday", "schema"),
    (PROPS + ["targetResourceId"], "web-0\x1b[2J", "text"),
    (["data", "resourceInfo", "properties"], "none", "schema"),
])
def test_an_availability_change_that_does_not_hold_together_is_refused_with_a_reason(path, value, code):
    assert refusal(with_member(changed(SET[0], "Unavailable", T0), path, value)) == code


@pytest.mark.parametrize("spelling", ["occurredTime", "occuredTime"])
def test_a_healthresources_row_is_read_in_either_spelling_of_its_time(spelling):
    found = azure_facts.health_row(health_row(SET[4], "Degraded", T0 - 60, spelling), [SUB], T0)
    assert found == HealthFacts(SET[4].resource_id.lower(), "Degraded", T0 - 60, "graph")


def test_a_row_that_is_not_an_availability_status_is_refused():
    row = {**health_row(SET[4], "Available", T0), "type": "microsoft.resourcehealth/events"}
    found = azure_facts.health_row(row, [SUB], T0)
    assert isinstance(found, azure_facts.Refusal) and found.code == "type"


# -- the fold ---------------------------------------------------------------------------------------

observations = st.lists(st.builds(
    HealthFacts, st.sampled_from([vm.resource_id.lower() for vm in SET[:3]]),
    st.sampled_from(["Available", "Unavailable", "Degraded", "Unknown"]),
    st.integers(0, 20).map(lambda n: T0 + n), st.sampled_from(["feed", "graph"])), max_size=20)


@settings(max_examples=200, deadline=None)
@given(observations, st.randoms(use_true_random=False))
def test_azure_health_folds_to_one_view_in_any_order_with_repeats_and_through_a_snapshot(items, rng):
    one, two = FleetState(), FleetState()
    for item in items:
        fold_azure_health(one, item)
    shuffled = items + items[: len(items) // 2]
    rng.shuffle(shuffled)
    for item in shuffled:
        fold_azure_health(two, item)
    assert snapshot(one) == snapshot(two)
    assert snapshot(restore(snapshot(one))) == snapshot(one)


def test_the_newest_observation_wins_and_a_down_state_wins_a_tie():
    state = FleetState()
    rid = SET[0].resource_id.lower()
    fold_azure_health(state, HealthFacts(rid, "Unavailable", T0 + 5, "feed"))
    fold_azure_health(state, HealthFacts(rid, "Available", T0 + 1, "graph"))
    assert state.azure.health[rid].state == "Unavailable"
    fold_azure_health(state, HealthFacts(rid, "Available", T0 + 5, "graph"))
    assert state.azure.health[rid].state == "Unavailable"
    fold_azure_health(state, HealthFacts(rid, "Available", T0 + 6, "graph"))
    assert state.azure.health[rid].state == "Available"


# -- the decision pass ------------------------------------------------------------------------------

def fleet(t: float = T0, **kw) -> Fleet:
    f = Fleet(policy(heartbeat_timeout=3600.0, **kw))
    f.beat(*AGENTS, t=t)
    fold_catch_up(f.state, catch_up(t, [vm_row(vm) for vm in SET]))
    return f


def scheduled(f: Fleet, event_id: str, vm: AgentVm, t: float = T0 + 1) -> None:
    fold_event(f.state, facts(feed(event_id, "Scheduled", [vm], t, not_before=t + 900)))


def test_an_agentless_vm_azure_reports_unavailable_counts_down_and_available_frees_it():
    f = fleet()
    fold_azure_health(f.state, read(changed(SET[4], "Unavailable", T0 + 2)))
    scheduled(f, "E5", SET[5])
    result = f.decide(T0 + 3)
    assert result.unavailable[SET[4].key] == "azure-unavailable"
    assert approvals(result) == []
    fold_azure_health(f.state, read(changed(SET[4], "Available", T0 + 4, previous="Unavailable")))
    assert approvals(f.decide(T0 + 5)) == ["E5"]


def test_azure_health_from_the_catch_up_counts_too():
    f = fleet()
    result = catch_up(T0 + 2, [vm_row(vm) for vm in SET])
    result.health.append(azure_facts.health_row(health_row(SET[4], "Degraded", T0 + 1), [SUB], T0 + 2))
    fold_catch_up(f.state, result)
    assert f.decide(T0 + 3).unavailable[SET[4].key] == "azure-unavailable"


def test_an_agent_vm_azure_reports_unavailable_counts_down_whatever_its_agent_says_and_is_a_finding():
    f = fleet()
    fold_azure_health(f.state, read(changed(SET[0], "Unavailable", T0 + 2)))
    beat = heartbeat(SET[0], T0 + 3)
    beat["data"]["Health"] = {"Verdict": "healthy", "Probe": None, "Reason": None, "Probes": 1}
    f.fold(beat)
    result = f.decide(T0 + 4)
    assert result.unavailable[SET[0].key] == "azure-unavailable"
    shown = status(f.state, f.policy, T0 + 4, result)
    assert {"name": "web-0", "vmId": SET[0].vm_id, "field": "health", "agent": "healthy",
            "azure": "Unavailable", "eventId": None} in shown["azure"]["findings"]


def test_an_agent_that_says_unhealthy_while_azure_says_available_is_a_finding_and_counts_down():
    f = fleet()
    fold_azure_health(f.state, read(changed(SET[1], "Available", T0 + 2, previous="Unavailable")))
    beat = heartbeat(SET[1], T0 + 3)
    beat["data"]["Health"] = {"Verdict": "unhealthy", "Probe": "web", "Reason": "HTTP 500", "Probes": 1}
    f.fold(beat)
    result = f.decide(T0 + 4)
    assert result.unavailable[SET[1].key] == "unhealthy"
    findings = status(f.state, f.policy, T0 + 4, result)["azure"]["findings"]
    assert [(x["name"], x["agent"], x["azure"]) for x in findings] == [
        ("web-1", "unhealthy (web: HTTP 500)", "Available")]


def test_with_recovered_an_agentless_vm_is_held_until_azure_says_available_after_its_event():
    f = fleet(free_slot="recovered", min_healthy=0.0, recover_timeout=600.0)
    fold_azure_health(f.state, read(changed(SET[4], "Available", T0 - 100)))  # before the event
    fold_event(f.state, facts(feed("E4", "Scheduled", [SET[4]], T0 + 1, not_before=T0 + 60)))
    fold_event(f.state, facts(feed("E4", "Started", [SET[4]], T0 + 60)))
    fold_azure_health(f.state, read(changed(SET[4], "Unavailable", T0 + 60)))
    fold_event(f.state, facts(feed("E4", "Completed", [SET[4]], T0 + 120)))
    scheduled(f, "E5", SET[5], T0 + 121)
    result = f.decide(T0 + 130)
    assert (result.unavailable[SET[4].key], approvals(result)) == ("azure-unavailable", [])
    fold_azure_health(f.state, read(changed(SET[4], "Unknown", T0 + 125, previous="Unavailable")))
    result = f.decide(T0 + 131)
    assert (result.unavailable[SET[4].key], approvals(result)) == ("recovering", [])
    fold_azure_health(f.state, read(changed(SET[4], "Available", T0 + 140, previous="Unknown")))
    assert approvals(f.decide(T0 + 141)) == ["E5"]


def test_azure_health_of_a_vm_azure_no_longer_lists_is_forgotten():
    from se_forwarder.fleet.coordinator.fold import azure as azure_fold

    f = fleet()
    gone = AgentVm("web-9")
    fold_azure_health(f.state, read(changed(gone, "Unavailable", T0 + 2)))
    azure_fold.forget(f.state)
    assert gone.resource_id.lower() not in f.state.azure.health
    assert Policy().free_slot == "min_healthy"
