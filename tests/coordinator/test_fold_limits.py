"""The fold is bounded whatever a VM sends: each limit of ``[limits]``, its counter, and a property
that holds for any input (what one VM can make the fold keep)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.errors import ConfigError
from se_forwarder.fleet.coordinator import FleetState, FoldStats, prune
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.config import Limits, load_limits
from se_forwarder.fleet.coordinator.config.limits import DEFAULT_LIMITS, MAX_REJECTIONS
from se_forwarder.fleet.coordinator.decide import index, resolve
from se_forwarder.fleet.coordinator.fold.caps import OTHER_TYPES, SKIPPED_TYPES
from se_forwarder.fleet.coordinator.fold.state import SCHEDULED
from se_forwarder.printable import has_controls

from .fleet import PREFIX, SOURCE, T0, AgentVm, Fleet, heartbeat, iso, rejected, report

A, B = AgentVm("web-0"), AgentVm("web-1")
ESCAPES = "\x1b[2J\x1b]8;;https://evil.example\x07Re-approve\x1b]8;;\x07"


def fleet_with(**limits: int) -> Fleet:
    return Fleet(limits=Limits(**limits))


def fake(n: int) -> AgentVm:
    return AgentVm(f"fake-{n}", rg="rg-fake")


def test_without_a_limits_section_the_defaults_apply():
    assert load_limits(None) == DEFAULT_LIMITS == Limits()
    assert load_limits({"tags_per_vm": 10}) == Limits(tags_per_vm=10)


@pytest.mark.parametrize(("raw", "message"), [
    ({"tag_per_vm": 1}, "limits.tag_per_vm: unknown key"),
    ({"text_chars": 10}, "limits.text_chars: 10 is out of range"),
    ({"new_vms_per_minute": "many"}, "limits.new_vms_per_minute: must be a whole number"),
    ([1], "limits: must be a table"),
])
def test_a_bad_limit_is_a_config_error_naming_the_key(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_limits(raw)


def test_a_heartbeat_is_read_up_to_events_per_heartbeat_eventids():
    fleet = fleet_with(events_per_heartbeat=2)
    fleet.fold(*(report("scheduled", A, f"E{i}", T0) for i in range(3)))
    listed = tuple((f"E{i}", "Started", "Reboot") for i in range(3))
    fleet.fold(heartbeat(A, T0 + 60, events=listed))
    assert [fleet.state.events[f"e{i}"].reports[A.key] for i in range(3)] == [2, 2, SCHEDULED]
    assert fleet.stats.capped["heartbeat-events"] == 1


def test_more_tags_than_tags_per_vm_keeps_none_of_them():
    fleet = fleet_with(tags_per_vm=3)
    many = AgentVm("web-0", tags=tuple((f"t{i}", "x") for i in range(4)))
    fleet.fold(heartbeat(many, T0))
    assert fleet.state.vms[A.key].tags == {} and fleet.stats.capped["tags"] == 4


def test_a_tag_with_control_characters_is_dropped_and_the_others_kept():
    fleet = Fleet()
    fleet.fold(heartbeat(AgentVm("web-0", tags=(("Tier", "Gold"), ("Owner", "a\x1b[2Jb"))), T0))
    assert fleet.state.vms[A.key].tags == {"tier": "Gold"} and fleet.stats.capped["tags"] == 1


def test_an_identifier_longer_than_text_chars_is_kept_as_empty():
    fleet = fleet_with(text_chars=128)
    event = heartbeat(A, T0)
    event["data"]["Vm"]["resourceGroupName"] = "r" * 129
    fleet.fold(event)
    assert fleet.state.vms[A.key].resource_group == "" and fleet.stats.capped["text"] == 1


def test_a_vm_name_with_escape_sequences_is_not_kept():
    fleet = Fleet()
    event = heartbeat(A, T0)
    event["data"]["Vm"]["name"] = "web-0" + ESCAPES
    fleet.fold(event)
    assert fleet.state.vms[A.key].name == "" and fleet.stats.capped["control"] == 1


def test_a_vm_known_only_by_a_name_with_control_characters_is_malformed():
    fleet = Fleet()
    bare = AgentVm("web-0\r\nweb-9", complete=False)
    fleet.fold(heartbeat(bare, T0))
    assert fleet.state.vms == {} and fleet.stats.malformed == 1


def test_control_characters_in_a_description_become_spaces():
    fleet = Fleet()
    event = report("scheduled", A, "E1", T0)
    event["data"]["Description"] = "host\x1b[2Jupdate\u202e"
    fleet.fold(event)
    assert fleet.state.events["e1"].description == "host [2Jupdate "


def test_an_eventid_with_control_characters_is_malformed():
    fleet = Fleet()
    fleet.fold(report("scheduled", A, "E1\x1b[2J", T0))
    assert fleet.state.events == {} and fleet.stats.malformed == 1


def test_resources_longer_than_resources_per_event_are_not_kept_and_the_event_stays_unresolved():
    fleet = fleet_with(resources_per_event=2)
    fleet.fold(heartbeat(A, T0), report("scheduled", A, "E1", T0, resources=["web-0", "web-1", "web-2"]))
    record = fleet.state.events["e1"]
    assert not record.has_resources and record.resources == ()
    assert fleet.stats.capped["resources"] == 1
    assert resolve(fleet.state, index(fleet.state, fleet.policy), record).vms == ()


def test_a_vm_reports_at_most_events_per_vm_events():
    fleet = fleet_with(events_per_vm=2)
    outcomes = [fold_event(fleet.state, report("scheduled", A, f"E{i}", T0), fleet.stats, fleet.limits)
                for i in range(3)]
    assert outcomes == ["folded", "folded", "capped"] and sorted(fleet.state.events) == ["e0", "e1"]
    assert fleet.stats.capped["vm-events"] == 1 and fleet.stats.dropped == 1
    fleet.fold(report("completed", A, "E0", T0 + 60))  # an event it reported already: always read
    assert fleet.state.events["e0"].rank == 4


def test_a_pruned_event_no_longer_counts_against_events_per_vm():
    fleet = fleet_with(events_per_vm=1)
    fleet.fold(report("scheduled", A, "E0", T0), report("completed", A, "E0", T0 + 60))
    prune(fleet.state, fleet.policy, T0 + 3 * 86400)
    fleet.fold(report("scheduled", A, "E1", T0 + 3 * 86400))
    assert sorted(fleet.state.events) == ["e1"]


def test_new_vm_keys_are_admitted_up_to_new_vms_per_minute_of_hub_time():
    fleet = fleet_with(new_vms_per_minute=2)
    outcomes = [fold_event(fleet.state, heartbeat(fake(i), T0), fleet.stats, fleet.limits, received=T0)
                for i in range(3)]
    assert outcomes == ["folded", "folded", "capped"] and fleet.stats.capped["new-vm"] == 1
    later = fold_event(fleet.state, heartbeat(fake(2), T0 + 60), fleet.stats, fleet.limits, received=T0 + 60)
    assert later == "folded" and len(fleet.state.vms) == 3


def test_an_event_folded_without_counts_has_the_outcome_and_the_effect_it_has_with_them():
    events = [heartbeat(fake(0), T0), heartbeat(fake(1), T0), heartbeat(fake(2), T0),  # the third: capped
              report("scheduled", fake(0), "E1", T0), {"type": PREFIX + "scheduled", "id": "x"},
              {"type": "com.example.other", "id": "y", "time": iso(T0), "data": {}},
              {"type": PREFIX + "coordinator.approve", "id": "E1/coordinator/approve/1", "source": SOURCE,
               "time": iso(T0 + 1), "data": {"EventId": "E1", "Attempt": 1}}]
    counted, uncounted = fleet_with(new_vms_per_minute=2), fleet_with(new_vms_per_minute=2)
    with_counts = [fold_event(counted.state, e, counted.stats, counted.limits, received=T0) for e in events]
    without = [fold_event(uncounted.state, e, None, uncounted.limits, received=T0) for e in events]
    assert with_counts == ["folded", "folded", "capped", "folded", "malformed", "skipped", "folded"]
    assert without == with_counts
    assert sorted(uncounted.state.vms) == sorted(counted.state.vms)
    assert uncounted.state.decisions.keys() == counted.state.decisions.keys() == {"E1/coordinator/approve/1"}


def test_report_times_spread_over_the_past_share_the_minute_the_hub_received_them_in():
    fleet = fleet_with(new_vms_per_minute=2)
    for i in range(10):
        fold_event(fleet.state, heartbeat(fake(i), T0 - i * 3600), fleet.stats, fleet.limits, received=T0)
    assert len(fleet.state.vms) == 2 and fleet.stats.capped["new-vm"] == 8


def test_a_known_vm_is_never_dropped_by_the_new_vm_rate():
    fleet = fleet_with(new_vms_per_minute=1)
    fleet.fold(heartbeat(A, T0))
    outcomes = {fold_event(fleet.state, heartbeat(A, T0 + i), fleet.stats, fleet.limits, received=T0)
                for i in range(1, 5)}
    assert outcomes == {"folded"}


def test_a_rejection_of_an_event_nobody_reported_is_dropped():
    fleet = Fleet()
    fleet.fold(rejected(A, "E7", T0, "E7/coordinator/approve/1", "expired"))
    assert fleet.state.events == {} and fleet.stats.capped["unreported-event"] == 1


def test_rejections_of_one_event_are_kept_up_to_the_cap():
    fleet = Fleet()
    fleet.fold(report("scheduled", A, "E1", T0))
    fleet.fold(*(rejected(A, "E1", T0 + 1, f"forged-{i}", "expired") for i in range(MAX_REJECTIONS + 5)))
    assert len(fleet.state.events["e1"].rejections) == MAX_REJECTIONS
    assert fleet.stats.capped["rejections"] == 5


def test_skipped_types_are_counted_by_name_up_to_a_bound_and_together_after_it():
    stats = FoldStats()
    for i in range(SKIPPED_TYPES + 50):
        fold_event(FleetState(), {"type": f"com.example.t{i}", "id": "1", "time": iso(T0), "data": {}}, stats)
    assert len(stats.skipped) == SKIPPED_TYPES + 1 and stats.skipped[OTHER_TYPES] == 50


# -- the property: what one VM can make the fold keep ------------------------------------------

SMALL = Limits(events_per_heartbeat=3, tags_per_vm=2, text_chars=64, resources_per_event=3,
               events_per_vm=2, new_vms_per_minute=2)
texts = st.text(st.sampled_from("ab-_.\x1b\x07\r\n\u202e["), max_size=80)
names = st.one_of(*[st.sampled_from([f"vm-{i}" for i in range(6)])] * 3, texts)
event_ids = st.one_of(*[st.sampled_from([f"E{i}" for i in range(8)])] * 3, texts)
vm_ids = st.one_of(*[st.sampled_from([AgentVm(f"vm-{i}").vm_id for i in range(6)])] * 3, texts)


@st.composite
def anything_a_vm_sends(draw: st.DrawFn) -> tuple[dict[str, Any], float]:
    what = draw(st.sampled_from(["heartbeat", "scheduled", "started", "completed", "approved",
                                 "preparefailed", "approvalrejected", "other"]))
    t = T0 + draw(st.integers(-7200, 600))
    received = T0 + 60 * draw(st.integers(0, 2))
    vm = {"vmId": draw(vm_ids), "name": draw(names), "resourceGroupName": draw(texts),
          "zone": draw(texts), "tags": draw(st.dictionaries(texts, texts, max_size=4)),
          "complete": draw(st.sampled_from([True, True, True, False]))}
    data: dict[str, Any] = {"Vm": vm, "AgentVersion": draw(texts)}
    if what == "heartbeat":
        data["Events"] = draw(st.lists(st.fixed_dictionaries(
            {"EventId": event_ids, "EventStatus": st.sampled_from(["Scheduled", "Started"]),
             "EventType": texts}), max_size=5))
    else:
        data.update(EventId=draw(event_ids), EventType=draw(texts), Description=draw(texts),
                    Resources=draw(st.lists(names, max_size=5)), ApprovedBy=draw(texts),
                    Reason=draw(texts), ReasonCode=draw(texts), Message={"Id": draw(texts)})
    kind = PREFIX + what if what != "other" else "com.example." + draw(texts)
    event = {"specversion": "1.0", "type": kind, "id": draw(texts) or "x", "source": SOURCE,
             "time": iso(t), "data": data}
    return event, received


def kept_texts(state: FleetState) -> list[str]:
    out = []
    for vm in state.vms.values():
        out += [vm.name, vm.vm_id, vm.resource_group, vm.zone, vm.agent_version, *vm.tags, *vm.tags.values()]
    for record in state.events.values():
        out += [record.event_id, record.event_type, record.description, *record.resources]
        out += [by for _, by in record.echoes.values()] + [why for _, why in record.prepare_failed.values()]
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(anything_a_vm_sends(), min_size=5, max_size=80),
       st.lists(st.sampled_from([f"E{i}" for i in range(8)]), max_size=8), st.randoms(use_true_random=False))
def test_what_the_fold_keeps_per_vm_stays_within_the_limits_whatever_is_sent(items, flood, rng):
    reports = [(report(kind, AgentVm("vm-0"), event_id, T0), T0)
               for event_id in flood for kind in ("scheduled", "started")]
    items = items + reports  # one VM reporting many events among the rest
    rng.shuffle(items)
    state, stats = FleetState(), FoldStats()
    for event, received in items:
        fold_event(state, copy.deepcopy(event), stats, SMALL, received)
    minutes = {int(received // 60) for _, received in items}
    assert len(state.vms) <= SMALL.new_vms_per_minute * len(minutes)
    assert all(len(vm.tags) <= SMALL.tags_per_vm for vm in state.vms.values())
    for vm in state.vms:
        assert sum(vm in record.reports for record in state.events.values()) <= SMALL.events_per_vm
    assert all(len(record.resources) <= SMALL.resources_per_event for record in state.events.values())
    assert all(record.reports for record in state.events.values())  # none known from heartbeats alone
    assert all(len(text) <= SMALL.text_chars and not has_controls(text) for text in kept_texts(state))
    assert len(stats.skipped) <= SKIPPED_TYPES + 1
