"""A due event is down (issue 31): Azure starts an event at its NotBefore whoever approved it or not,
so from then (or its first Started sighting) until each VM is done with it plus min_healthy, its VMs
count as unavailable in every budget, though no agent said Started."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import Budget, Policy, hold
from se_forwarder.fleet.coordinator.decide import index, unavailable
from se_forwarder.fleet.coordinator.fold import fold_event as fold_azure
from se_forwarder.fleet.coordinator.view import groups, page_view, spans
from se_forwarder.fleet.coordinator.view.status import status

from .azure import facts, feed
from .fleet import T0, AgentVm, Fleet, approvals, approved, heartbeat, report

MIN_HEALTHY = 60.0
# The review's case: two one-VM zonal scale sets in zone 1, a zone budget of 1.
A0 = AgentVm("a_0", rg="rg", zone="1", scale_set="a")
B0 = AgentVm("b_0", rg="rg", zone="1", scale_set="b")
NOT_BEFORE = T0 + 600


def zonal(**policy) -> Fleet:
    settings = {"heartbeat_timeout": 3600.0, **policy}
    fleet = Fleet(Policy(budgets=(Budget("zone", count=1), Budget("group", count=1)), min_healthy=MIN_HEALTHY,
                         **settings))
    fleet.beat(A0, B0, t=T0)
    fleet.announce("EA", [A0], t=T0, not_before=NOT_BEFORE)
    fleet.apply(hold(fleet.state, fleet.policy, T0 + 1, "EA", "person:ops", "database primary"))
    return fleet


def test_a_held_event_past_its_notbefore_counts_its_vm_down_though_nobody_reported_it_started():
    fleet = zonal()
    fleet.beat(A0, B0, t=NOT_BEFORE - 10)
    assert unavailable(fleet.state, fleet.policy, index(fleet.state, fleet.policy), NOT_BEFORE - 1) == {}
    down = unavailable(fleet.state, fleet.policy, index(fleet.state, fleet.policy), NOT_BEFORE + 1)
    assert down == {A0.key: "due"}


def test_no_peer_of_the_zone_is_approved_while_a_due_event_has_not_been_reported_over():
    fleet = zonal()
    fleet.beat(A0, B0, t=NOT_BEFORE)
    fleet.announce("EB", [B0], t=NOT_BEFORE, not_before=NOT_BEFORE + 900)
    result = fleet.decide(NOT_BEFORE + 1)
    assert approvals(result) == []
    assert fleet.verdict(result, "EB").code == "budget"
    assert fleet.verdict(result, "EA").code == "due"


def test_the_peer_goes_once_the_vm_reported_it_over_plus_min_healthy():
    fleet = zonal()
    fleet.announce("EB", [B0], t=NOT_BEFORE, not_before=NOT_BEFORE + 900)
    fleet.transition("completed", "EA", [A0], t=NOT_BEFORE + 30)  # back after 30 s, Started never sent
    fleet.beat(A0, B0, t=NOT_BEFORE + 30 + MIN_HEALTHY - 2)
    assert approvals(fleet.decide(NOT_BEFORE + 30 + MIN_HEALTHY - 1)) == []
    assert approvals(fleet.decide(NOT_BEFORE + 30 + MIN_HEALTHY + 1)) == ["EB"]


def test_a_first_started_sighting_before_notbefore_counts_from_then():
    fleet = zonal()
    fleet.transition("started", "EA", [A0], t=NOT_BEFORE - 100)
    down = unavailable(fleet.state, fleet.policy, index(fleet.state, fleet.policy), NOT_BEFORE - 50)
    assert down == {A0.key: "started"}


def test_a_later_notbefore_from_another_report_does_not_make_the_event_due_later():
    fleet = zonal()
    fleet.fold(report("scheduled", A0, "EA", T0 + 5, resources=["a_0"], not_before=NOT_BEFORE + 3600))
    assert fleet.state.events["ea"].not_before == NOT_BEFORE + 3600  # the newest report's, as shown
    down = unavailable(fleet.state, fleet.policy, index(fleet.state, fleet.policy), NOT_BEFORE + 1)
    assert down == {A0.key: "due"}


def test_azure_saying_the_event_ended_ends_it_plus_min_healthy():
    fleet = zonal()
    fold_azure(fleet.state, facts(feed("EA", "Scheduled", [A0], T0 + 2, not_before=NOT_BEFORE)))
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, NOT_BEFORE + 30) == {A0.key: "due"}
    fold_azure(fleet.state, facts(feed("EA", "Completed", [A0], NOT_BEFORE + 40)))
    idx = index(fleet.state, fleet.policy)
    back = NOT_BEFORE + 40 + MIN_HEALTHY
    assert unavailable(fleet.state, fleet.policy, idx, back - 1) == {A0.key: "completed"}
    assert unavailable(fleet.state, fleet.policy, idx, NOT_BEFORE + 40 + MIN_HEALTHY + 1) == {}


def test_azure_s_notbefore_is_the_one_an_event_azure_reported_is_due_at():
    fleet = zonal()
    fold_azure(fleet.state, facts(feed("EA", "Scheduled", [A0], T0 + 2, not_before=NOT_BEFORE - 300)))
    down = unavailable(fleet.state, fleet.policy, index(fleet.state, fleet.policy), NOT_BEFORE - 299)
    assert down == {A0.key: "due"}


def test_its_agent_listing_the_event_no_more_after_it_was_due_ends_it():
    fleet = zonal(heartbeat_timeout=30.0)
    fleet.beat(B0, t=NOT_BEFORE + 80)
    fleet.fold(heartbeat(A0, NOT_BEFORE + 80))  # its IMDS no longer lists EA
    idx = index(fleet.state, fleet.policy)
    # done at NotBefore + heartbeat_timeout, back min_healthy later
    assert unavailable(fleet.state, fleet.policy, idx, NOT_BEFORE + 81) == {A0.key: "completed"}
    assert unavailable(fleet.state, fleet.policy, idx, NOT_BEFORE + 30 + MIN_HEALTHY + 1) == {}


def test_status_and_the_page_show_the_vm_as_started_by_azure_due():
    fleet = zonal()
    fleet.beat(A0, B0, t=NOT_BEFORE)
    now = NOT_BEFORE + 5
    st_doc = status(fleet.state, fleet.policy, now)
    [started] = st_doc["started"]
    assert started["due"] is True and started["affected"] == ["a_0"]
    assert started["startedUtc"].startswith("20")
    vms = {v["name"]: v for g in groups(fleet.state, fleet.policy, now) for v in g["vms"]}
    assert vms["a_0"]["state"] == "due" and vms["a_0"]["event"]["status"] == "due"
    doc = page_view(fleet.state, fleet.policy, now)
    assert [v[4] for g in doc["groups"] for v in g["vms"] if v[0] == "a_0"] == ["due"]
    found = spans(fleet.state, fleet.policy, index(fleet.state, fleet.policy), now)
    assert [(s.kind, s.start, s.end) for s in found if s.vm == A0.key and s.kind == "started"] == [
        ("started", NOT_BEFORE, None)]


@settings(max_examples=60, deadline=None)
@given(not_before=st.integers(-300, 300), completed=st.one_of(st.none(), st.integers(-200, 400)),
       was_approved=st.booleans(), now=st.integers(-400, 800))
def test_a_due_event_counts_its_vm_down_from_notbefore_until_over_plus_min_healthy(
        not_before, completed, was_approved, now):
    """Whoever approved it or not: down from NotBefore (or its Started sighting) until its own
    completed report plus min_healthy."""
    policy = Policy(budgets=(Budget("zone", count=1),), min_healthy=MIN_HEALTHY, heartbeat_timeout=5000.0)
    fleet = Fleet(policy)
    fleet.beat(A0, B0, t=T0 - 1000)
    fleet.announce("EA", [A0], t=T0 - 1000, not_before=T0 + not_before)
    if was_approved:
        fleet.fold(approved(A0, "EA", T0 - 900, by="person", resources=["a_0"]))
    over = completed is not None and not_before <= completed <= now  # reported by now
    if over:
        fleet.transition("completed", "EA", [A0], t=T0 + completed)
    down = unavailable(fleet.state, fleet.policy, index(fleet.state, fleet.policy), T0 + now)
    if over and now >= completed + MIN_HEALTHY:
        assert A0.key not in down
    elif over:
        assert down[A0.key] == "completed"
    elif now >= not_before:
        assert down[A0.key] in ("due", "started")
    elif was_approved:
        assert down[A0.key] == "approved"
    else:
        assert A0.key not in down
