"""Every fault kind, through the control API (and the --fault flag of the CLI)."""

from __future__ import annotations

import concurrent.futures
import json
import time

import pytest
import requests

EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
COMPUTE = "/metadata/instance/compute?api-version=2021-02-01"
HEADERS = {"Metadata": "true"}


def _fault(server, http, spec):
    reply = http.post(server.url + "/control/faults", json=spec, timeout=5)
    assert reply.status_code == 201, reply.text
    return reply.json()


def _get(server, http, path=EVENTS, timeout=5.0):
    return http.get(server.url + path, headers=HEADERS, timeout=timeout)


def test_status_fault_answers_that_status_for_the_next_n_requests(sim, http):
    _fault(sim, http, {"status": 500, "count": 2})
    assert [_get(sim, http).status_code for _ in range(3)] == [500, 500, 200]


def test_status_fault_can_carry_retry_after(sim, http):
    _fault(sim, http, {"status": 429, "retry_after": "3"})
    reply = _get(sim, http)
    assert (reply.status_code, reply.headers["Retry-After"]) == (429, "3")


def test_status_fault_on_post_does_not_approve(sim, http):
    event_id = sim.sim.add_event({})["EventId"]
    _fault(sim, http, {"status": 503, "method": "POST"})
    body = {"StartRequests": [{"EventId": event_id}]}
    assert http.post(sim.url + EVENTS, json=body, headers=HEADERS, timeout=5).status_code == 503
    assert sim.sim.event(event_id)["EventStatus"] == "Scheduled"


def test_delay_fault_answers_correctly_but_late(sim, http):
    _fault(sim, http, {"delay_seconds": 0.5})
    began = time.monotonic()
    reply = _get(sim, http)
    assert reply.status_code == 200
    assert reply.json()["DocumentIncarnation"] == 1
    assert time.monotonic() - began >= 0.45


def test_hang_fault_makes_the_client_time_out_and_the_next_request_is_served(sim, http):
    _fault(sim, http, {"hang": True})
    began = time.monotonic()
    with pytest.raises(requests.Timeout):
        _get(sim, http, timeout=0.4)
    assert time.monotonic() - began < 2
    assert _get(sim, http).status_code == 200


def test_hang_is_released_when_the_server_stops(start_sim, http):
    server = start_sim()
    server.sim.add_fault({"hang": True, "hang_seconds": 60})
    began = time.monotonic()
    stopper = __import__("threading").Timer(0.3, server.stop)
    stopper.start()
    with pytest.raises(requests.ConnectionError):
        _get(server, http, timeout=10)
    assert time.monotonic() - began < 3


def test_body_fault_answers_200_with_a_body_that_is_not_json(sim, http):
    _fault(sim, http, {"body": "not json", "count": 2})
    replies = [_get(sim, http) for _ in range(2)]
    assert [(r.status_code, r.text) for r in replies] == [(200, "not json")] * 2
    with pytest.raises(json.JSONDecodeError):
        json.loads(replies[0].text)
    assert _get(sim, http).json()["DocumentIncarnation"] == 1


def test_truncate_fault_sends_half_the_document_and_closes(sim, http):
    sim.sim.add_event({})
    _fault(sim, http, {"truncate": True})
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        _get(sim, http)
    assert len(_get(sim, http).json()["Events"]) == 1


def test_truncated_body_read_raw_is_an_incomplete_json_prefix(sim, http):
    sim.sim.add_event({})
    full = _get(sim, http).content
    _fault(sim, http, {"truncate": True})
    reply = http.get(sim.url + EVENTS, headers=HEADERS, timeout=5, stream=True)
    assert int(reply.headers["Content-Length"]) == len(full)
    received = b""
    with pytest.raises(Exception):  # noqa: B017 - urllib3's IncompleteRead/ProtocolError
        for chunk in reply.raw.stream(1024, decode_content=False):
            received += chunk
    assert full.startswith(received) and 0 < len(received) < len(full)


def test_huge_body_fault_sends_10_mib_of_valid_json(sim, http):
    sim.sim.add_event({})
    _fault(sim, http, {"huge_body": True})
    reply = _get(sim, http, timeout=30)
    assert len(reply.content) == 10 * 1024 * 1024
    assert reply.json() == _get(sim, http).json()


def test_incarnation_reset_fault_sets_the_incarnation_back(sim, http):
    for _ in range(3):
        sim.sim.add_event({})
    assert _get(sim, http).json()["DocumentIncarnation"] == 4
    _fault(sim, http, {"incarnation_reset": True})
    document = _get(sim, http).json()
    assert (document["DocumentIncarnation"], len(document["Events"])) == (1, 3)
    sim.sim.add_event({})
    assert _get(sim, http).json()["DocumentIncarnation"] == 2


def test_fault_armed_later_leaves_earlier_requests_alone(sim, http):
    _fault(sim, http, {"status": 500, "after_seconds": 0.4})
    assert _get(sim, http).status_code == 200
    time.sleep(0.45)
    assert _get(sim, http).status_code == 500


def test_fault_targets_only_its_route(sim, http):
    _fault(sim, http, {"status": 502, "route": "compute"})
    assert _get(sim, http).status_code == 200
    assert _get(sim, http, COMPUTE).status_code == 502


def test_fault_targets_only_its_vm(start_sim, http):
    server = start_sim(vm_names=("vm0", "vm1"))
    server.sim.add_fault({"status": 500, "vm": "vm1"})
    assert http.get(server.vm_url("vm0") + EVENTS, headers=HEADERS, timeout=5).status_code == 200
    assert http.get(server.vm_url("vm1") + EVENTS, headers=HEADERS, timeout=5).status_code == 500


def test_faulted_requests_are_marked_in_the_request_log(sim, http):
    _fault(sim, http, {"status": 500})
    _get(sim, http)
    assert http.get(sim.url + "/control/requests", timeout=5).json()[-1]["fault"] == "status"


def test_armed_faults_can_be_listed_and_cleared(sim, http):
    _fault(sim, http, [{"status": 500, "count": 5}, {"body": "x"}])
    assert [f["kind"] for f in http.get(sim.url + "/control/faults", timeout=5).json()] == [
        "status",
        "body",
    ]
    assert http.delete(sim.url + "/control/faults", timeout=5).status_code == 204
    assert _get(sim, http).status_code == 200


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"status": 99}, "status"),
        ({"count": 0, "status": 500}, "count"),
        ({"colour": "red"}, "colour"),
        ({"status": 500, "hang": True}, "one kind"),
        ({}, "needs one of"),
        ({"status": 500, "route": "nowhere"}, "route"),
    ],
)
def test_bad_fault_spec_is_400_naming_the_problem(sim, http, spec, named):
    reply = http.post(sim.url + "/control/faults", json=spec, timeout=5)
    assert reply.status_code == 400
    assert named in reply.json()["error"]


def test_fault_flag_of_the_cli_applies_from_the_start(cli_simulator, http):
    cli = cli_simulator("--fault", "status=503,count=2", "--fault", '{"body": "oops"}')
    statuses = [http.get(cli.url + EVENTS, headers=HEADERS, timeout=5) for _ in range(4)]
    assert [(r.status_code, r.text if r.status_code == 200 else "") for r in statuses] == [
        (503, ""),
        (503, ""),
        (200, "oops"),
        (200, statuses[3].text),
    ]
    assert statuses[3].json()["DocumentIncarnation"] == 1


def test_a_fault_for_n_seconds_hits_every_request_until_then_without_retry_after(sim, http):
    _fault(sim, http, {"status": 429, "seconds": 0.6})
    first = _get(sim, http)
    assert first.status_code == 429 and "Retry-After" not in first.headers
    assert [_get(sim, http).status_code for _ in range(5)] == [429] * 5
    time.sleep(0.7)
    assert _get(sim, http).status_code == 200
    assert http.get(sim.url + "/control/faults", timeout=5).json() == []


def test_a_fault_for_n_seconds_can_start_later(sim, http):
    _fault(sim, http, {"body": "not json", "seconds": 0.5, "after_seconds": 0.3})
    assert _get(sim, http).status_code == 200 and _get(sim, http).json()
    time.sleep(0.35)
    assert _get(sim, http).text == "not json"


def test_seconds_is_checked_like_every_key(sim, http):
    for spec in ({"status": 500, "seconds": -1}, {"incarnation_reset": True, "seconds": 2}):
        reply = http.post(sim.url + "/control/faults", json=spec, timeout=5)
        assert reply.status_code == 400 and "seconds" in reply.json()["error"]


@pytest.mark.parametrize("path", [COMPUTE, "/metadata/instance?api-version=2021-02-01"])
def test_instance_endpoint_missing_answers_404_and_scheduled_events_go_on(sim, http, path):
    reply = http.post(sim.url + "/control/settings", json={"instance_endpoint": "missing"}, timeout=5)
    assert reply.json()["instance_endpoint"] == "missing"
    assert _get(sim, http, path).status_code == 404
    assert _get(sim, http).status_code == 200
    http.post(sim.url + "/control/settings", json={"instance_endpoint": "ok"}, timeout=5)
    assert _get(sim, http, path).status_code == 200


def test_instance_endpoint_hang_never_answers(sim, http):
    http.post(sim.url + "/control/settings", json={"instance_endpoint": "hang"}, timeout=5)
    with pytest.raises(requests.exceptions.ReadTimeout):
        _get(sim, http, COMPUTE, timeout=0.5)
    assert _get(sim, http).status_code == 200
    bad = http.post(sim.url + "/control/settings", json={"instance_endpoint": "sometimes"}, timeout=5)
    assert bad.status_code == 400 and "instance_endpoint" in bad.json()["error"]


def test_a_request_held_by_the_instance_hang_is_answered_when_the_endpoint_is_back(sim, http):
    sim.instance_endpoint = "hang"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_get, sim, http, COMPUTE, 10)
        sim.sim.wait_until(lambda: sim.holding() == 1, timeout=5)
        assert not pending.done()
        sim.instance_endpoint = "ok"
        reply = pending.result(timeout=5)
    assert reply.status_code == 200 and reply.json()["name"] == "vm0"
    assert sim.holding() == 0

    def logged() -> list[dict]:  # the server logs a request after its reply has gone out
        return [r for r in sim.sim.requests() if r["route"] == "compute"]

    sim.sim.wait_until(lambda: bool(logged()), timeout=5)
    (entry,) = logged()
    assert (entry["status"], entry["fault"]) == (200, "instance-hang")
