"""The control API (design.md "Simulator control API") over real HTTP."""

from __future__ import annotations

import email.utils
import time
import uuid

import pytest

EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
HEADERS = {"Metadata": "true"}


def _document(server, http, base=None):
    return http.get((base or server.url) + EVENTS, headers=HEADERS, timeout=5).json()


def test_post_event_with_no_fields_uses_the_documented_defaults(start_sim, http):
    server = start_sim(vm_names=("vm0", "vm1"))
    reply = http.post(server.url + "/control/events", json={}, timeout=5)
    assert reply.status_code == 201
    event = reply.json()
    assert uuid.UUID(event["EventId"])
    assert event["EventStatus"] == "Scheduled"
    assert event["EventSource"] == "Platform"
    assert event["DurationInSeconds"] == -1
    assert event["Resources"] == ["vm0", "vm1"]
    assert _document(server, http)["Events"] == [event]


@pytest.mark.parametrize(
    ("event_type", "notice"),
    [("Freeze", 900), ("Reboot", 900), ("Redeploy", 600), ("Preempt", 30), ("Terminate", 300)],
)
def test_default_not_before_is_the_minimum_notice_of_the_type(sim, http, event_type, notice):
    event = http.post(sim.url + "/control/events", json={"EventType": event_type}, timeout=5).json()
    not_before = email.utils.parsedate_to_datetime(event["NotBefore"]).timestamp()
    assert abs(not_before - (time.time() + notice)) <= 1.5


def test_post_event_under_a_vm_prefix_defaults_resources_to_that_vm(start_sim, http):
    server = start_sim(vm_names=("vm0", "vm1"))
    event = http.post(server.vm_url("vm1") + "/control/events", json={}, timeout=5).json()
    assert event["Resources"] == ["vm1"]


def test_post_event_keeps_given_fields(sim, http):
    fields = {
        "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
        "EventType": "Freeze",
        "Resources": ["WestNO_0", "WestNO_1"],
        "EventSource": "User",
        "DurationInSeconds": 5,
        "Description": "Host server is undergoing maintenance.",
    }
    event = http.post(sim.url + "/control/events", json=fields, timeout=5).json()
    assert {k: event[k] for k in fields} == fields


def test_post_event_can_create_an_event_already_started(sim, http):
    event = http.post(sim.url + "/control/events", json={"EventStatus": "Started"}, timeout=5).json()
    assert (event["EventStatus"], event["NotBefore"]) == ("Started", "")


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"EventType": "Explode"}, "EventType"),
        ({"Colour": "red"}, "Colour"),
        ({"DurationInSeconds": "5"}, "DurationInSeconds"),
        ({"Resources": []}, "Resources"),
        ({"NotBeforeInSeconds": -5}, "NotBeforeInSeconds"),
        ({"NotBefore": "tomorrow"}, "NotBefore"),
    ],
)
def test_post_event_with_a_bad_field_is_400_naming_it(sim, http, fields, named):
    reply = http.post(sim.url + "/control/events", json=fields, timeout=5)
    assert reply.status_code == 400
    assert named in reply.json()["error"]
    assert sim.sim.events() == []


def test_post_event_with_a_duplicate_event_id_is_400(sim, http):
    first = http.post(sim.url + "/control/events", json={}, timeout=5).json()
    reply = http.post(sim.url + "/control/events", json={"EventId": first["EventId"]}, timeout=5)
    assert reply.status_code == 400


def test_patch_event_changes_fields_and_raises_incarnation_once(sim, http):
    event_id = sim.sim.add_event({})["EventId"]
    before = sim.sim.incarnation
    reply = http.patch(
        f"{sim.url}/control/events/{event_id}",
        json={"EventStatus": "Started", "Description": "now"},
        timeout=5,
    )
    assert reply.status_code == 200
    [event] = _document(sim, http)["Events"]
    assert (event["EventStatus"], event["Description"], event["NotBefore"]) == ("Started", "now", "")
    assert sim.sim.incarnation == before + 1


def test_patch_that_changes_nothing_keeps_the_incarnation(sim, http):
    event_id = sim.sim.add_event({"Description": "same"})["EventId"]
    before = sim.sim.incarnation
    http.patch(f"{sim.url}/control/events/{event_id}", json={"Description": "same"}, timeout=5)
    assert sim.sim.incarnation == before


def test_delete_event_removes_it(sim, http):
    event_id = sim.sim.add_event({})["EventId"]
    assert http.delete(f"{sim.url}/control/events/{event_id}", timeout=5).status_code == 204
    assert _document(sim, http)["Events"] == []


@pytest.mark.parametrize("method", ["patch", "delete", "get"])
def test_unknown_event_id_in_control_api_is_404(sim, http, method):
    reply = getattr(http, method)(f"{sim.url}/control/events/nope", json={}, timeout=5)
    assert reply.status_code == 404


def test_get_approvals_lists_start_requests_with_time_and_acceptance(sim, http):
    event_id = sim.sim.add_event({})["EventId"]
    http.post(sim.url + EVENTS, json={"StartRequests": [{"EventId": event_id}]}, headers=HEADERS, timeout=5)
    http.post(sim.url + EVENTS, json={"StartRequests": [{"EventId": "unknown"}]}, headers=HEADERS, timeout=5)
    approvals = http.get(sim.url + "/control/approvals", timeout=5).json()
    assert [(a["EventId"], a["accepted"]) for a in approvals] == [(event_id, True), ("unknown", False)]
    assert all(a["time"].endswith("Z") for a in approvals)


def test_get_requests_logs_imds_requests_with_their_status(sim, http):
    http.get(sim.url + EVENTS, headers=HEADERS, timeout=5)
    http.get(sim.url + EVENTS, timeout=5)
    log = http.get(sim.url + "/control/requests", timeout=5).json()
    assert [(r["method"], r["route"], r["status"]) for r in log] == [
        ("GET", "scheduledevents", 200),
        ("GET", "scheduledevents", 400),
    ]
    assert http.get(sim.url + "/control/requests?limit=1", timeout=5).json() == log[-1:]


def test_post_scenario_starts_a_built_in_scenario(sim, http):
    reply = http.post(sim.url + "/control/scenario", json={"name": "hardware-failure"}, timeout=5)
    assert reply.status_code == 201
    assert reply.json()["name"] == "hardware-failure"
    [event] = _document(sim, http)["Events"]
    assert (event["EventType"], event["EventStatus"]) == ("Reboot", "Started")


def test_post_scenario_with_an_unknown_name_is_400_listing_the_built_ins(sim, http):
    reply = http.post(sim.url + "/control/scenario", json={"name": "nope"}, timeout=5)
    assert reply.status_code == 400
    assert "live-migration" in reply.json()["error"]


def test_post_scenario_accepts_an_inline_scenario(sim, http):
    inline = {"events": [{"at": 0, "EventType": "Redeploy", "EventSource": "User"}]}
    reply = http.post(sim.url + "/control/scenario", json={"scenario": inline}, timeout=5)
    assert reply.status_code == 201
    assert _document(sim, http)["Events"][0]["EventType"] == "Redeploy"


def test_get_scenarios_describes_the_built_ins(sim, http):
    names = {s["name"] for s in http.get(sim.url + "/control/scenarios", timeout=5).json()}
    assert {"demo", "live-migration", "spot-eviction", "availability-set"} <= names


def test_control_body_that_is_not_json_is_400(sim, http):
    assert http.post(sim.url + "/control/faults", data=b"{", timeout=5).status_code == 400


def test_unknown_control_route_is_404_and_wrong_method_405(sim, http):
    assert http.get(sim.url + "/control/nothing", timeout=5).status_code == 404
    assert http.delete(sim.url + "/control/approvals", timeout=5).status_code == 405


def test_settings_can_be_changed_at_run_time(sim, http):
    reply = http.post(sim.url + "/control/settings", json={"throttle_rps": 2}, timeout=5)
    assert reply.json()["throttle_rps"] == 2
    assert sim.throttle_rps == 2
    bad = http.post(sim.url + "/control/settings", json={"colour": 1}, timeout=5)
    assert bad.status_code == 400
