"""api-version fidelity: each version shows only the fields and event types it had."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.simulator import SCHEDULED_EVENTS_VERSIONS
from se_forwarder.simulator.wire import render_document

HEADERS = {"Metadata": "true"}
BASE_FIELDS = {"EventId", "EventType", "ResourceType", "Resources", "EventStatus", "NotBefore"}
# version -> fields every event has in it (from the contract's version table)
EXPECTED_FIELDS = {
    "2017-03-01": BASE_FIELDS,
    "2017-08-01": BASE_FIELDS,
    "2017-11-01": BASE_FIELDS,
    "2019-01-01": BASE_FIELDS,
    "2019-04-01": BASE_FIELDS | {"Description"},
    "2019-08-01": BASE_FIELDS | {"Description", "EventSource"},
    "2020-07-01": BASE_FIELDS | {"Description", "EventSource", "DurationInSeconds"},
}
EXPECTED_TYPES = {
    "2017-03-01": {"Freeze", "Reboot", "Redeploy"},
    "2017-08-01": {"Freeze", "Reboot", "Redeploy"},
    "2017-11-01": {"Freeze", "Reboot", "Redeploy", "Preempt"},
}
ALL_TYPES = {"Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"}


def _get(server, http, version):
    url = f"{server.url}/metadata/scheduledevents?api-version={version}"
    reply = http.get(url, headers=HEADERS, timeout=5)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_every_known_version_is_served(sim, http):
    assert tuple(EXPECTED_FIELDS) == SCHEDULED_EVENTS_VERSIONS
    for version in SCHEDULED_EVENTS_VERSIONS:
        assert _get(sim, http, version)["DocumentIncarnation"] == 1


@pytest.mark.parametrize("version", SCHEDULED_EVENTS_VERSIONS)
def test_each_field_appears_exactly_from_its_version(sim, http, version):
    sim.sim.add_event({"EventType": "Reboot", "EventSource": "User", "DurationInSeconds": 0})
    [event] = _get(sim, http, version)["Events"]
    assert set(event) == EXPECTED_FIELDS[version]


@pytest.mark.parametrize("version", SCHEDULED_EVENTS_VERSIONS)
def test_event_types_appear_exactly_from_their_version(sim, http, version):
    for event_type in sorted(ALL_TYPES):
        sim.sim.add_event({"EventType": event_type})
    shown = {e["EventType"] for e in _get(sim, http, version)["Events"]}
    assert shown == EXPECTED_TYPES.get(version, ALL_TYPES)


def test_first_preview_version_prefixes_resource_names_with_underscore(sim, http):
    sim.sim.add_event({"Resources": ["vm0"]})
    assert _get(sim, http, "2017-03-01")["Events"][0]["Resources"] == ["_vm0"]
    assert _get(sim, http, "2017-08-01")["Events"][0]["Resources"] == ["vm0"]


def test_all_versions_share_the_incarnation(sim, http):
    sim.sim.add_event({"EventType": "Terminate"})
    incarnations = {_get(sim, http, v)["DocumentIncarnation"] for v in SCHEDULED_EVENTS_VERSIONS}
    assert incarnations == {2}


def test_approving_an_event_the_version_does_not_show_is_400(sim, http):
    event_id = sim.sim.add_event({"EventType": "Preempt"})["EventId"]
    url = f"{sim.url}/metadata/scheduledevents?api-version=2017-08-01"
    body = {"StartRequests": [{"EventId": event_id}]}
    assert http.post(url, json=body, headers=HEADERS, timeout=5).status_code == 400
    assert sim.sim.event(event_id)["EventStatus"] == "Scheduled"


event_strategy = st.fixed_dictionaries(
    {
        "EventId": st.uuids().map(str),
        "EventType": st.sampled_from(sorted(ALL_TYPES)),
        "ResourceType": st.just("VirtualMachine"),
        "Resources": st.lists(st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True), min_size=1, max_size=3),
        "EventStatus": st.sampled_from(["Scheduled", "Started"]),
        "NotBefore": st.just("Mon, 11 Apr 2022 22:26:58 GMT"),
        "Description": st.text(max_size=20),
        "EventSource": st.sampled_from(["Platform", "User"]),
        "DurationInSeconds": st.integers(min_value=-1, max_value=3600),
    }
)


@settings(max_examples=100, deadline=None)
@given(
    events=st.lists(event_strategy, max_size=4),
    version=st.sampled_from(SCHEDULED_EVENTS_VERSIONS),
    incarnation=st.integers(min_value=0, max_value=10**6),
)
def test_rendered_documents_hold_exactly_the_versions_fields_and_types(events, version, incarnation):
    document = render_document(incarnation, events, version)
    allowed_types = EXPECTED_TYPES.get(version, ALL_TYPES)
    expected = [e for e in events if e["EventType"] in allowed_types]
    assert document["DocumentIncarnation"] == incarnation
    assert [e["EventId"] for e in document["Events"]] == [e["EventId"] for e in expected]
    for shown, original in zip(document["Events"], expected, strict=True):
        assert set(shown) == EXPECTED_FIELDS[version]
        assert all(shown[k] == original[k] for k in shown if k != "Resources")
