"""Azure's word read at the edge (azure_facts.py): the feed's CloudEvents and Resource Graph's rows as
facts, or refused with a reason; never an exception, whatever arrives."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.edge import azure_facts, domains, vm_row
from se_forwarder.fleet.coordinator.edge.azure_facts import Refusal
from se_forwarder.fleet.coordinator.fold import EventFacts, VmFacts

from .azure import feed, row, with_member
from .azure import vm_row as graph_vm_row
from .fleet import SET, SUB, T0

EVENT = feed("E1", "Scheduled", [SET[0]], T0, not_before=T0 + 900)


def refusal(event: dict) -> str:
    found = azure_facts.feed_event(event, [SUB])
    assert isinstance(found, Refusal), found
    return found.code


def test_every_reason_is_in_the_table():
    for code in azure_facts.REASONS:
        assert f"``{code}``" in (azure_facts.__doc__ or "")


def test_a_scheduled_event_emitted_cloudevent_gives_the_events_facts():
    facts = azure_facts.feed_event(EVENT, [SUB.upper()])
    assert isinstance(facts, EventFacts)
    assert (facts.event_id, facts.status, facts.rank, facts.resources, facts.not_before, facts.as_of) == (
        "E1", "Scheduled", 1, ("web-0",), T0 + 900, T0)
    assert facts.resource_id.endswith("/web-0/providers/Microsoft.Maintenance/scheduledevents/E1")
    assert (facts.subscription, facts.resource_group, facts.via) == (SUB, "rg-web", "feed")


def test_a_maintenanceresources_row_gives_the_same_facts_as_of_the_query():
    facts = azure_facts.event_row(row("E1", "Started", [SET[0]]), [SUB], T0 + 5)
    assert isinstance(facts, EventFacts)
    assert (facts.status, facts.not_before, facts.as_of, facts.via) == ("Started", None, T0 + 5, "graph")


WRITE_TYPE = "microsoft.maintenance/scheduledevents/write"


@pytest.mark.parametrize("spelling", [EVENT["type"], WRITE_TYPE, WRITE_TYPE.upper()])
def test_a_scheduled_event_is_read_in_either_spelling_of_its_type(spelling: str):
    """Microsoft's page gives the feed's type two ways (its sample's, its field table's); what the
    event is comes from data.resourceInfo.type."""
    assert azure_facts.feed_event({**EVENT, "type": spelling}, [SUB]) == azure_facts.feed_event(EVENT, [SUB])


def test_without_a_resource_type_either_spelling_still_names_a_scheduled_event():
    event = copy.deepcopy(EVENT)
    del event["data"]["resourceInfo"]["type"]
    for spelling in (EVENT["type"], WRITE_TYPE):
        assert isinstance(azure_facts.feed_event({**event, "type": spelling}, [SUB]), EventFacts)


def test_a_resource_annotation_on_the_feed_is_unread_not_a_wrong_scheduled_event():
    """Resource Health's other events share the feed; no box reads annotations (azure_facts.KINDS)."""
    annotation = {"specversion": "1.0", "id": "h1", "source": f"/subscriptions/{SUB}", "time": EVENT["time"],
                  "type": "Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated",
                  "data": {"resourceInfo": {"id": "/subscriptions/x/providers/Microsoft.ResourceHealth/"
                                            "resourceAnnotations/current",
                                            "type": "Microsoft.ResourceHealth/resourceAnnotations"}}}
    assert refusal(annotation) == "unread"


def _with(path: list[str], value: object) -> dict:
    return with_member(EVENT, path, value)


@pytest.mark.parametrize(("event", "code"), [
    (_with(["type"], "Microsoft.ResourceNotifications.HealthResources.AvailabilityStatusChanged"), "type"),
    (_with(["type"], "Microsoft.Storage.BlobCreated"), "type"),
    (_with(["data", "resourceInfo", "type"], "microsoft.storage/storageaccounts"), "type"),
    (_with(["data"], "x"), "schema"),
    (_with(["data", "resourceInfo", "properties", "Resources"], "web-0"), "schema"),
    (_with(["data", "resourceInfo", "properties", "NotBefore"], "someday"), "schema"),
    (_with(["data", "resourceInfo", "properties", "EventStatus"], "Pending"), "status"),
    (_with(["source"], "/subscriptions/00000000-0000-0000-0000-000000000000"), "subscription"),
    (_with(["data", "resourceInfo", "id"], "/subscriptions/x/resourceGroups/rg/providers/Microsoft.Storage/"
           "storageAccounts/a/providers/Microsoft.Maintenance/scheduledevents/E1"), "resource-id"),
    (_with(["data", "resourceInfo", "properties", "EventId"], "E2"), "resource-id"),
    (_with(["data", "resourceInfo", "properties", "Resources"], ["web-0\x1b[2J"]), "text"),
])
def test_what_cannot_be_azures_event_is_refused_with_its_reason(event: dict, code: str):
    assert refusal(event) == code


def test_an_event_of_a_subscription_not_managed_is_refused():
    assert azure_facts.feed_event(EVENT, ["00000000-0000-0000-0000-000000000000"]) == Refusal(
        "subscription", f"subscription {SUB} is not managed")


def test_a_vm_row_gives_its_topology_and_where_its_domains_are():
    found = graph_vm_row(SET[1], tags={"Tier": "db"})
    facts = vm_row({k: v for k, v in found.items() if k != "_domains"}, [SUB])
    assert isinstance(facts, VmFacts)
    assert (facts.key, facts.name, facts.availability_set, facts.scale_set, facts.tags) == (
        SET[1].vm_id, "web-1", "web", "", {"tier": "db"})
    assert (facts.fault_domain, facts.instance_view) == ("", SET[1].resource_id + "/instanceView")
    assert domains({"platformFaultDomain": 2, "platformUpdateDomain": 4}) == ("2", "4")


def test_a_uniform_scale_sets_vm_is_named_as_resources_names_it():
    rid = (f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/api"
           "/virtualMachines/3")
    facts = vm_row({"id": rid, "name": "3", "zones": ["2"], "properties": {"vmId": "ABC"}}, [SUB])
    assert isinstance(facts, VmFacts)
    assert (facts.key, facts.name, facts.scale_set, facts.zone, facts.instance_view) == (
        "abc", "api_3", "api", "2", rid + "/instanceView")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["type", "source", "time", "data", "id", "subject"]), JSON),
       st.sampled_from([[], ["data"], ["data", "resourceInfo"], ["data", "resourceInfo", "properties"]]),
       JSON)
def test_any_input_gives_facts_or_a_refusal_never_an_exception(event, path, value):
    mutated = copy.deepcopy(EVENT)
    mutated.update(event)
    node = mutated
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node["x"] = value
    for result in (azure_facts.feed_event(mutated, [SUB]), azure_facts.event_row(mutated, [SUB], T0),
                   azure_facts.vm_row(mutated, [SUB])):
        assert isinstance(result, EventFacts | VmFacts | Refusal)


OPT_IN = {"scheduledEventsPolicy": {"scheduledEventsAdditionalPublishingTargets": {
    "eventGridAndResourceGraph": {"enable": True}}}}


def test_a_vm_is_opted_in_to_azures_feed_by_its_own_policy_or_its_sets():
    found = graph_vm_row(SET[2])
    own = {**{k: v for k, v in found.items() if k != "_domains"}}
    assert isinstance(facts := vm_row(own, [SUB]), VmFacts) and not facts.opted_in
    own["properties"] = {**own["properties"], **OPT_IN}
    assert isinstance(facts := vm_row(own, [SUB]), VmFacts) and facts.opted_in
    set_id = found["properties"]["availabilitySet"]["id"]
    assert azure_facts.set_row({"id": set_id, "properties": OPT_IN}) == (set_id.lower(), True)
    assert azure_facts.set_row({"id": set_id, "properties": {}}) == (set_id.lower(), False)
    assert facts.set_id == set_id.lower()
