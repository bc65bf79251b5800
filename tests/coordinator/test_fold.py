"""The fold, by example: what each agent and decision CloudEvent does to the fleet state."""

from __future__ import annotations

import json

from se_forwarder.fleet.coordinator import FleetState, FoldStats, Policy, fold_json, prune
from se_forwarder.fleet.coordinator import (
    claimed as fold_event,
)
from se_forwarder.fleet.coordinator.decide import index, resolve, unavailable
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot
from se_forwarder.fleet.coordinator.fold.state import CANCELED, COMPLETED, SCHEDULED, STARTED

from .fleet import T0, AgentVm, Fleet, approved, heartbeat, iso, report

A, B, C = AgentVm("web-0", fd="0"), AgentVm("web-1", fd="1"), AgentVm("web-2", fd="2")


def test_a_scheduled_report_records_what_the_event_is():
    fleet = Fleet()
    fleet.fold(report("scheduled", A, "E1", T0, event_type="Redeploy", resources=["web-0", "web-1"],
                      not_before=T0 + 600, source="User"))
    record = fleet.state.events["e1"]
    assert (record.event_id, record.event_type, record.event_source) == ("E1", "Redeploy", "User")
    assert record.resources == ("web-0", "web-1") and record.not_before == T0 + 600
    assert record.reports == {A.key: SCHEDULED} and fleet.state.open_events == {"e1"}


def test_not_before_is_read_from_the_rfc_1123_field_when_not_before_utc_is_missing():
    event = report("scheduled", A, "E1", T0, not_before=T0 + 600)
    del event["data"]["NotBeforeUtc"]
    fleet = Fleet()
    fleet.fold(event)
    assert fleet.state.events["e1"].not_before == T0 + 600


def test_the_not_before_of_the_scheduled_report_survives_a_started_report_without_one():
    fleet = Fleet()
    fleet.fold(report("started", A, "E1", T0 + 60), report("scheduled", A, "E1", T0, not_before=T0 + 600))
    record = fleet.state.events["e1"]
    assert record.not_before == T0 + 600 and record.rank == STARTED and record.started_at == T0 + 60


def test_an_event_keeps_when_it_was_first_reported_scheduled_whatever_the_order():
    fleet = Fleet()
    fleet.fold(report("started", A, "E1", T0 + 60), report("scheduled", B, "E1", T0 + 20),
               heartbeat(C, T0 + 10, (("E1", "Scheduled", "Reboot"),)), report("scheduled", A, "E1", T0 + 30))
    assert fleet.state.events["e1"].scheduled_at == T0 + 10


def test_an_event_first_seen_started_has_no_scheduled_time():
    fleet = Fleet()
    fleet.fold(report("started", A, "E1", T0 + 60), report("completed", A, "E1", T0 + 90))
    assert fleet.state.events["e1"].scheduled_at is None


def test_a_vm_status_only_moves_forward_whatever_the_order_of_reports():
    fleet = Fleet()
    fleet.fold(report("completed", A, "E1", T0 + 120), report("scheduled", A, "E1", T0),
               report("started", A, "E1", T0 + 60))
    record = fleet.state.events["e1"]
    assert record.reports[A.key] == COMPLETED and record.terminal
    assert record.completed_at == T0 + 120 and fleet.state.open_events == set()


def test_a_canceled_event_is_over_without_a_completion():
    fleet = Fleet()
    fleet.fold(report("scheduled", A, "E1", T0), report("canceled", A, "E1", T0 + 30))
    record = fleet.state.events["e1"]
    assert record.rank == CANCELED and record.ended_at == T0 + 30 and record.completed_at is None


def test_the_same_event_from_several_vms_is_one_event_with_several_reporters():
    fleet = Fleet()
    fleet.announce("E1", [A], [A, B, C])
    assert len(fleet.state.events) == 1
    assert fleet.state.events["e1"].reports == {A.key: SCHEDULED, B.key: SCHEDULED, C.key: SCHEDULED}


def test_a_repeated_cloudevent_changes_nothing():
    fleet = Fleet()
    event = report("scheduled", A, "E1", T0, not_before=T0 + 600)
    fleet.fold(event, heartbeat(A, T0))
    before = snapshot(fleet.state)
    fleet.fold(event, heartbeat(A, T0))
    assert snapshot(fleet.state) == before


def test_event_ids_are_one_event_whatever_their_case():
    fleet = Fleet()
    fleet.fold(report("scheduled", A, "ab-CD", T0), report("started", B, "AB-cd", T0 + 5))
    assert list(fleet.state.events) == ["ab-cd"]
    assert fleet.state.events["ab-cd"].event_id == "AB-cd"  # one spelling, whatever came first


def test_a_heartbeat_makes_a_vm_known_with_its_topology():
    vm = AgentVm("db-0", rg="rg-db", zone="2", fd="1", ud="4", tags=(("Tier", "gold"),))
    fleet = Fleet()
    fleet.fold(heartbeat(vm, T0))
    record = fleet.state.vms[vm.key]
    assert (record.name, record.resource_group, record.zone, record.fault_domain, record.update_domain) == (
        "db-0", "rg-db", "2", "1", "4")
    assert record.tags == {"tier": "gold"} and record.last_heartbeat == T0 and record.agent_version == "0.2.0"


def test_the_newest_report_gives_the_topology_whatever_the_order():
    moved = AgentVm("web-0", fd="2")  # redeployed: another fault domain
    fleet = Fleet()
    fleet.fold(heartbeat(moved, T0 + 60), heartbeat(A, T0))
    assert fleet.state.vms[A.key].fault_domain == "2"
    assert fleet.state.vms[A.key].last_heartbeat == T0 + 60


def test_vms_reporting_the_same_event_id_are_in_one_group():
    fleet = Fleet()
    other = AgentVm("solo")
    fleet.beat(A, B, C, other)
    fleet.announce("E1", [A], [A, B])
    fleet.announce("E2", [C], [B, C])
    idx = index(fleet.state, fleet.policy)
    assert idx.group_of[A.key] == idx.group_of[B.key] == idx.group_of[C.key] == f"set/{A.sub}/rg-web/web-0"
    assert idx.group_of[other.key] == f"set/{A.sub}/rg-web/solo"


def test_a_scale_set_and_a_configured_tag_name_groups_explicitly():
    fleet = Fleet(Policy(group_tag="tier"))
    vmss = AgentVm("ss_0", scale_set="Front")
    tagged = AgentVm("db-0", tags=(("Tier", "Gold"),))
    fleet.beat(vmss, tagged)
    idx = index(fleet.state, fleet.policy)
    assert idx.group_of[vmss.key] == f"vmss/{A.sub}/rg-web/front"
    assert idx.group_of[tagged.key] == "tag/gold"


def test_a_heartbeat_listing_a_started_event_counts_it_as_started():
    fleet = Fleet()
    fleet.fold(report("scheduled", A, "E1", T0), heartbeat(A, T0 + 30, events=(("E1", "Started", "Reboot"),)))
    assert fleet.state.events["e1"].rank == STARTED


def test_a_heartbeat_alone_never_makes_an_event_known():
    fleet = Fleet()
    fleet.fold(heartbeat(A, T0, events=(("E9", "Scheduled", "Freeze"),)))
    assert fleet.state.events == {} and fleet.stats.capped == {"unreported-event": 1}
    fleet.fold(report("scheduled", B, "E9", T0 + 10, event_type="Freeze"),
               heartbeat(A, T0 + 60, events=(("E9", "Started", "Freeze"),)))
    assert fleet.state.events["e9"].reports == {B.key: SCHEDULED, A.key: STARTED}


def test_an_echo_records_who_approved():
    fleet = Fleet()
    fleet.fold(approved(A, "E1", T0, by="policy:user-events"))
    assert fleet.state.events["e1"].echoes == {A.key: (T0, "policy:user-events")}


def test_prepared_and_preparefailed_are_recorded_per_vm():
    fleet = Fleet()
    fleet.fold(report("prepared", A, "E1", T0, extra={"Hook": "prepare", "DurationSeconds": 3}),
               report("preparefailed", B, "E1", T0, extra={"Reason": "drain timed out"}))
    record = fleet.state.events["e1"]
    assert record.prepared == {A.key: T0} and record.prepare_failed == {B.key: (T0, "drain timed out")}


def test_reports_of_an_agent_without_instance_metadata_count_as_the_vm_of_that_name():
    bare = AgentVm("web-0", complete=False)
    fleet = Fleet()
    fleet.fold(heartbeat(bare, T0), report("scheduled", bare, "E1", T0, resources=["web-0"]))
    fleet.fold(heartbeat(A, T0 + 30))
    idx = index(fleet.state, fleet.policy)
    assert idx.members == [A.key]
    assert resolve(fleet.state, idx, fleet.state.events["e1"]).vms == (A.key,)


def test_an_agent_without_instance_metadata_is_a_vm_of_its_own_until_one_is_known():
    bare = AgentVm("web-9", complete=False)
    fleet = Fleet()
    fleet.fold(heartbeat(bare, T0))
    idx = index(fleet.state, fleet.policy)
    assert idx.members == ["host:web-9"] and idx.scopes_of["host:web-9"][0] == "fleet"


def test_other_types_are_counted_and_skipped():
    fleet = Fleet()
    fleet.fold({"type": "com.example.other", "id": "1", "time": iso(T0), "data": {}},
               report("recoverfailed", A, "E1", T0))
    assert fleet.stats.skipped == {"com.example.other": 1, "com.azure.scheduledevents.recoverfailed": 1}
    assert fleet.state.events == {} and fleet.state.vms == {}


def test_malformed_cloudevents_are_counted_and_never_raise():
    state, stats = FleetState(), FoldStats()
    bad = [
        {"type": "com.azure.scheduledevents.scheduled"},
        {"type": "com.azure.scheduledevents.scheduled", "id": "x", "time": "yesterday", "data": {}},
        {"type": "com.azure.scheduledevents.scheduled", "id": "x", "time": iso(T0), "data": []},
        {"type": "com.azure.scheduledevents.heartbeat", "id": "x", "time": iso(T0), "data": {"Vm": 7}},
        {**report("scheduled", A, "E1", T0), "time": 5},
        {**report("scheduled", A, "", T0), "subject": ""},
        {**report("scheduled", A, "E1", T0), "data": {"Vm": {"vmId": 3, "name": ["x"]}}},
        {"type": "com.azure.scheduledevents.coordinator.approve", "id": "a", "time": iso(T0),
         "data": {"EventId": "E1", "Attempt": "one"}},
    ]
    outcomes = [fold_event(state, event, stats) for event in bad]
    assert outcomes == ["malformed"] * len(bad)
    assert fold_json(state, b"{not json", stats) == "malformed"
    assert fold_json(state, "[1]", stats) == "malformed"
    assert stats.malformed == len(bad) + 2


def test_an_event_from_before_the_hub_knew_data_vm_uses_the_source_and_vmid():
    event = report("scheduled", A, "E1", T0)
    del event["data"]["Vm"]
    fleet = Fleet()
    fleet.fold(event)
    assert list(fleet.state.vms) == [A.vm_id] and fleet.state.vms[A.vm_id].name == "web-0"


def test_the_same_decision_id_from_two_instances_is_kept_once():
    fleet = Fleet()
    base = {"type": "com.azure.scheduledevents.coordinator.approve", "id": "E1/coordinator/approve/1",
            "source": "s", "subject": "E1"}
    first = {**base, "time": iso(T0),
             "data": {"EventId": "E1", "Attempt": 1, "Target": {"name": "web-0"}}}
    second = {**base, "time": iso(T0 + 1),
              "data": {"EventId": "E1", "Attempt": 1, "Target": {"name": "web-1"}}}
    fleet.fold(second, first, second)
    assert len(fleet.state.decisions) == 1
    assert fleet.state.events["e1"].approvals[1].data["Target"]["name"] == "web-0"


def test_a_report_of_a_pruned_event_is_late_and_skipped():
    fleet = Fleet()
    fleet.beat(A, t=T0 + 86400 * 2)
    fleet.fold(report("scheduled", A, "E1", T0), report("completed", A, "E1", T0 + 60))
    prune(fleet.state, fleet.policy, T0 + 86400 * 2)
    assert "e1" not in fleet.state.events
    assert fold_event(fleet.state, report("started", A, "E1", T0 + 30), fleet.stats) == "late"
    assert "e1" not in fleet.state.events and fleet.stats.late == 1


def test_prune_forgets_vms_not_heard_from_for_forget_after():
    fleet = Fleet()
    fleet.beat(A, t=T0)
    fleet.beat(B, t=T0 + 86400)
    fleet.announce("E1", [A], [A, B])
    prune(fleet.state, fleet.policy, T0 + 86400 + 10)
    assert list(fleet.state.vms) == [B.key]
    idx = index(fleet.state, fleet.policy)
    assert unavailable(fleet.state, fleet.policy, idx, T0 + 86400 + 10) == {}


def test_a_fold_state_snapshot_is_plain_json():
    fleet = Fleet()
    fleet.beat(A, B)
    fleet.announce("E1", [A], [A, B])
    fleet.decide(T0 + 1)
    assert json.loads(json.dumps(snapshot(fleet.state), allow_nan=False)) == snapshot(fleet.state)
