"""The IMDS Scheduled Events contract, as the simulator serves it over real HTTP."""

from __future__ import annotations

import email.utils
import time
import uuid

import pytest

from se_forwarder.simulator import vm_id_for

EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
COMPUTE = "/metadata/instance/compute?api-version=2021-02-01"
HEADERS = {"Metadata": "true"}


def test_get_with_metadata_header_answers_the_document_as_json(sim, http):
    reply = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5)
    assert reply.status_code == 200
    assert reply.headers["Content-Type"].startswith("application/json")
    assert reply.json() == {"DocumentIncarnation": 1, "Events": []}


@pytest.mark.parametrize("headers", [{}, {"Metadata": "false"}, {"Metadata": ""}])
def test_missing_or_wrong_metadata_header_is_400(sim, http, headers):
    reply = http.get(sim.url + EVENTS, headers=headers, timeout=5)
    assert reply.status_code == 400
    assert "metadata header" in reply.json()["error"]


def test_metadata_header_value_is_case_insensitive(sim, http):
    assert http.get(sim.url + EVENTS, headers={"Metadata": "True"}, timeout=5).status_code == 200


@pytest.mark.parametrize("query", ["", "?api-version=", "?api-version={latest}", "?api-version=2018-01-01"])
def test_missing_unknown_or_retired_api_version_is_400(sim, http, query):
    reply = http.get(sim.url + "/metadata/scheduledevents" + query, headers=HEADERS, timeout=5)
    assert reply.status_code == 400
    assert "api-version" in reply.json()["error"]
    assert reply.json()["newest-versions"][0] == "2020-07-01"


def test_x_forwarded_for_is_rejected_with_400(sim, http):
    headers = {**HEADERS, "X-Forwarded-For": "10.0.0.9"}
    reply = http.get(sim.url + EVENTS, headers=headers, timeout=5)
    assert reply.status_code == 400
    assert "X-Forwarded-For" in reply.json()["error"]


def test_unknown_path_is_404(sim, http):
    assert http.get(sim.url + "/metadata/nothing", headers=HEADERS, timeout=5).status_code == 404


def test_scheduled_event_shows_not_before_as_wall_clock_start_time(start_sim, http):
    server = start_sim(time_scale=60)
    server.sim.add_event({"EventType": "Reboot", "NotBeforeInSeconds": 900})
    event = http.get(server.url + EVENTS, headers=HEADERS, timeout=5).json()["Events"][0]
    not_before = email.utils.parsedate_to_datetime(event["NotBefore"]).timestamp()
    assert event["NotBefore"].endswith(" GMT")
    assert abs(not_before - (time.time() + 900 / 60)) <= 1.5


def test_post_start_requests_moves_scheduled_to_started_and_is_recorded(sim, http):
    event_id = sim.sim.add_event({"EventType": "Freeze"})["EventId"]
    body = {"StartRequests": [{"EventId": event_id}]}
    reply = http.post(sim.url + EVENTS, json=body, headers=HEADERS, timeout=5)
    assert reply.status_code == 200
    event = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5).json()["Events"][0]
    assert (event["EventStatus"], event["NotBefore"]) == ("Started", "")
    [approval] = sim.sim.approvals()
    assert (approval["EventId"], approval["accepted"], approval["vm"]) == (event_id, True, "vm0")


def test_post_can_approve_several_events_at_once(sim, http):
    ids = [sim.sim.add_event({})["EventId"] for _ in range(2)]
    body = {"StartRequests": [{"EventId": i} for i in ids]}
    assert http.post(sim.url + EVENTS, json=body, headers=HEADERS, timeout=5).status_code == 200
    assert {e["EventStatus"] for e in sim.sim.events()} == {"Started"}


def test_approving_an_already_started_event_is_still_200(sim, http):
    event_id = sim.sim.add_event({"EventStatus": "Started"})["EventId"]
    body = {"StartRequests": [{"EventId": event_id}]}
    assert http.post(sim.url + EVENTS, json=body, headers=HEADERS, timeout=5).status_code == 200


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"StartRequests": {}}', b'{"StartRequests": [{"Id": "x"}]}', b""],
)
def test_malformed_post_body_is_400(sim, http, body):
    sim.sim.add_event({})
    reply = http.post(sim.url + EVENTS, data=body, headers=HEADERS, timeout=5)
    assert reply.status_code == 400


def test_post_with_an_unknown_event_id_is_400_and_starts_nothing(sim, http):
    known = sim.sim.add_event({})["EventId"]
    body = {"StartRequests": [{"EventId": known}, {"EventId": str(uuid.uuid4())}]}
    reply = http.post(sim.url + EVENTS, json=body, headers=HEADERS, timeout=5)
    assert reply.status_code == 400
    assert sim.sim.events()[0]["EventStatus"] == "Scheduled"
    assert [a["accepted"] for a in sim.sim.approvals()] == [False, False]


def test_post_without_metadata_header_is_400(sim, http):
    event_id = sim.sim.add_event({})["EventId"]
    body = {"StartRequests": [{"EventId": event_id}]}
    assert http.post(sim.url + EVENTS, json=body, timeout=5).status_code == 400
    assert sim.sim.events()[0]["EventStatus"] == "Scheduled"


def test_event_starts_by_itself_when_not_before_passes(start_sim):
    server = start_sim(time_scale=100)
    event_id = server.sim.add_event({"NotBeforeInSeconds": 30})["EventId"]
    assert server.sim.wait_until(lambda: server.sim.events()[0]["EventStatus"] == "Started", 3)
    assert server.sim.event(event_id)["NotBefore"] == ""


def test_started_event_disappears_after_started_seconds(start_sim):
    server = start_sim(time_scale=100)
    server.sim.add_event({"EventStatus": "Started", "StartedSeconds": 30})
    began = time.monotonic()
    assert server.sim.wait_until(lambda: not server.sim.events(), 3)
    assert time.monotonic() - began >= 0.25


def test_every_change_raises_the_incarnation_by_exactly_one(sim, http):
    incarnations = [sim.sim.incarnation]
    event_id = sim.sim.add_event({})["EventId"]
    incarnations.append(sim.sim.incarnation)
    sim.sim.patch_event(event_id, {"EventStatus": "Started"})
    incarnations.append(sim.sim.incarnation)
    sim.sim.delete_event(event_id)
    incarnations.append(sim.sim.incarnation)
    assert incarnations == [1, 2, 3, 4]


def test_same_incarnation_always_carries_the_same_document(sim, http):
    sim.sim.add_event({})
    first = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5).json()
    time.sleep(1.1)  # NotBefore is absolute: a later read of the same incarnation is identical
    assert http.get(sim.url + EVENTS, headers=HEADERS, timeout=5).json() == first


def test_reset_empties_the_document_and_keeps_the_incarnation_increasing(sim, http):
    sim.sim.add_event({})
    before = sim.sim.incarnation
    reply = http.post(sim.url + "/control/reset", timeout=5)
    document = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5).json()
    assert reply.json()["DocumentIncarnation"] == document["DocumentIncarnation"] == before + 1
    assert document["Events"] == []


def test_instance_compute_metadata_identifies_the_vm(sim, http):
    compute = http.get(sim.url + COMPUTE, headers=HEADERS, timeout=5).json()
    assert compute["name"] == "vm0"
    assert compute["vmId"] == vm_id_for("vm0") == str(uuid.UUID(compute["vmId"]))
    assert compute["resourceId"] == (
        f"/subscriptions/{compute['subscriptionId']}/resourceGroups/"
        f"{compute['resourceGroupName']}/providers/Microsoft.Compute/virtualMachines/vm0"
    )
    for key in (
        "location",
        "zone",
        "vmScaleSetName",
        "platformFaultDomain",
        "platformUpdateDomain",
        "tagsList",
    ):
        assert key in compute


def test_vm_id_is_stable_across_simulators(start_sim, http):
    first, second = start_sim(), start_sim()
    ids = [http.get(s.url + COMPUTE, headers=HEADERS, timeout=5).json()["vmId"] for s in (first, second)]
    assert ids[0] == ids[1]


def test_instance_metadata_needs_header_and_known_version(sim, http):
    assert http.get(sim.url + COMPUTE, timeout=5).status_code == 400
    bad = "/metadata/instance/compute?api-version=2099-01-01"
    assert http.get(sim.url + bad, headers=HEADERS, timeout=5).status_code == 400


def test_full_instance_document_has_compute_and_network(sim, http):
    reply = http.get(sim.url + "/metadata/instance?api-version=2021-02-01", headers=HEADERS, timeout=5)
    assert set(reply.json()) == {"compute", "network"}


def test_restarted_server_serves_the_same_document_on_the_same_port(start_sim, http):
    server = start_sim()
    server.sim.add_event({})
    before = http.get(server.url + EVENTS, headers=HEADERS, timeout=5).json()
    port = server.port
    server.stop()
    server.start()
    assert server.port == port
    assert http.get(server.url + EVENTS, headers=HEADERS, timeout=5).json() == before
