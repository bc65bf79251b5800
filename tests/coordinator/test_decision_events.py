"""The coordinator's decision CloudEvents: attributes, the documented data schema, deterministic ids."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder import cloudevents as ce
from se_forwarder.fleet.coordinator import (
    evaluate,
    fold_json,
    hold,
    pause,
    restore,
    to_cloudevent,
    to_dict,
    to_json,
)
from se_forwarder.fleet.coordinator.decide.events import BudgetUse, Decision, VmRef
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot
from se_forwarder.fleet.coordinator.schema import DECISION_KINDS
from se_forwarder.timestamps import rfc3339

from .fleet import SET, SOURCE, T0, avset, iso

DATA_KEYS = {
    "Decision", "EventId", "EventType", "EventSource", "NotBeforeUtc", "Resources", "Affected", "Target",
    "ReasonCode", "Reason", "Actor", "Budgets", "Shadow", "Attempt", "Scope", "Sequence", "Overrides", "Via",
    "Confirmed",
}


def approve_decision():
    fleet = avset()
    fleet.announce("E1", [SET[1]], SET, not_before=T0 + 600)
    return fleet, fleet.decide(T0 + 1, apply=False).decisions[0]


def test_an_approve_decision_is_a_cloudevent_with_the_documented_attributes():
    _, decision = approve_decision()
    event = ce.from_json(to_json(decision, SOURCE))
    attributes = event.get_attributes()
    assert attributes["type"] == "com.azure.scheduledevents.coordinator.approve"
    assert (attributes["id"], attributes["source"], attributes["subject"]) == (
        "E1/coordinator/approve/1", SOURCE, "E1")
    assert attributes["datacontenttype"] == "application/json" and attributes["eventtype"] == "Reboot"
    assert rfc3339(attributes["time"]) == iso(T0 + 1)


def test_the_data_has_every_documented_member():
    _, decision = approve_decision()
    data = to_cloudevent(decision, SOURCE).get_data()
    assert set(data) == DATA_KEYS
    assert data["Decision"] == "approve" and data["EventId"] == "E1" and data["NotBeforeUtc"] == iso(T0 + 600)
    assert data["Resources"] == ["web-1"] and data["ReasonCode"] == "fits" and data["Actor"] == "coordinator"
    group = f"set/{SET[1].sub}/rg-web/web-0"
    assert data["Target"] == {"name": "web-1", "vmId": SET[1].vm_id, "group": group}
    assert data["Affected"] == [data["Target"]] and data["Attempt"] == 1 and data["Shadow"] is False
    (use,) = data["Budgets"]
    assert use == {"scope": f"group:set/{SET[1].sub}/rg-web/web-0", "kind": "group", "size": 6, "used": 0,
                   "withEvent": 1, "max": 1}


def test_a_pause_is_about_a_scope_and_has_no_event():
    fleet = avset()
    data = to_cloudevent(pause(fleet.state, fleet.policy, T0, "zone:westeurope/2", "person:a", "x"), SOURCE)
    assert data.get_attributes()["subject"] == "zone:westeurope/2"
    assert "eventtype" not in data.get_attributes()
    payload = data.get_data()
    assert set(payload) == DATA_KEYS and payload["EventId"] is None
    assert payload["Scope"] == "zone:westeurope/2"
    assert payload["Sequence"] == 1 and payload["Target"] is None and payload["Attempt"] is None


def test_a_hold_is_about_its_event():
    fleet = avset()
    event = to_cloudevent(hold(fleet.state, fleet.policy, T0, "E5", "person:a", "x"), SOURCE)
    assert event.get_attributes()["subject"] == "E5" and event.get_data()["Decision"] == "hold"


def test_the_same_fold_gives_the_same_decisions_with_the_same_ids_on_another_instance():
    fleet, _ = approve_decision()
    fleet.announce("E2", [SET[2]], SET, not_before=T0 + 700)
    fleet.announce("E3", [SET[3], SET[4]], SET, not_before=T0 + 800)
    other = restore(copy.deepcopy(snapshot(fleet.state)))
    mine, theirs = evaluate(fleet.state, fleet.policy, T0 + 1), evaluate(other, fleet.policy, T0 + 1)
    assert [to_json(d, SOURCE) for d in mine.decisions] == [to_json(d, SOURCE) for d in theirs.decisions]
    assert [d.id for d in mine.decisions] == [
        "E1/coordinator/approve/1", "E2/coordinator/defer/1-budget", mine.decisions[2].id,
        "E3/coordinator/defer/1-budget"]
    assert mine.decisions[2].id.startswith("E3/coordinator/breach/")


def test_a_decision_read_back_from_the_hub_is_folded():
    fleet, decision = approve_decision()
    assert fold_json(fleet.state, to_json(decision, SOURCE)) == "folded"
    assert fleet.state.events["e1"].approvals[1].id == decision.id


texts = st.text(max_size=12)
names = st.text(min_size=1, max_size=12)  # an id and a subject are never empty
refs = st.builds(VmRef, texts, texts, texts)
uses = st.builds(BudgetUse, texts, texts, st.integers(0, 99), st.integers(0, 99), st.integers(0, 99),
                 st.integers(0, 99))
moments = st.floats(0, 4e9, allow_nan=False).map(lambda t: round(t, 6))


decisions = st.builds(Decision, kind=st.sampled_from(sorted(DECISION_KINDS)), id=names, subject=names,
                 time=moments, code=texts, reason=texts, actor=texts, shadow=st.booleans(),
                 event_id=st.none() | texts, event_type=st.none() | texts, event_source=st.none() | texts,
                 not_before=st.none() | moments,
                 resources=st.tuples(texts), affected=st.tuples(refs), target=st.none() | refs,
                 budgets=st.tuples(uses), attempt=st.none() | st.integers(1, 9), scope=st.none() | texts,
                 sequence=st.none() | st.integers(1, 9), overrides=st.tuples(texts),
                 via=st.none() | st.just("arm"))


@settings(max_examples=100, deadline=None)
@given(decisions)
def test_the_dict_the_service_folds_is_the_json_it_publishes_read_back(decision):
    assert to_dict(decision, SOURCE) == json.loads(to_json(decision, SOURCE))


@settings(max_examples=100, deadline=None)
@given(st.lists(decisions, max_size=4))
def test_each_decision_s_times_are_its_own_whatever_was_written_before(made):
    for decision in made:
        written = to_dict(decision, SOURCE)
        assert written["time"] == rfc3339(decision.time)
        assert written["data"]["NotBeforeUtc"] == (None if decision.not_before is None else
                                                   rfc3339(decision.not_before))
