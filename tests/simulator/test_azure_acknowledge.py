"""The Maintenance ``acknowledge`` on the simulator's ARM, posted with ``azure-mgmt-core``'s
``ARMPipelineClient``: it starts the event exactly as an agent's StartRequests does. And what ARM
refuses one with, as Azure does: a policy's 403 ``RequestDisallowedByPolicy`` naming the policy, a
missing role's 403 ``AuthorizationFailed``, a role that comes back later (403, then 200), and the
list variant's api-versions and body; each judged from the simulator's own record.

The ARM endpoint is the simulator's (Azure cannot run here); the client and credential are real.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology
from tests.support.azure_side import FixedToken, acknowledge, arm_pipeline, managed_identity, owner_path, send

HEADERS = {"Metadata": "true"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimulatorServer, Path]]:
    ca = tmp_path_factory.mktemp("arm") / "ca.pem"
    topology = Topology.build(
        availability_sets=[{"name": "db", "vms": 6, "fault_domains": 3, "agentless": ["db-4", "db-5"]}],
        scale_sets=[{"name": "api", "vms": 3}],
    )
    with SimulatorServer(topology=topology, azure=AzureOptions(arm_port=0, ca_path=ca)) as server:
        yield server, ca


@pytest.fixture
def server(fleet: tuple[SimulatorServer, Path]) -> SimulatorServer:
    server = fleet[0]
    server.sim.reset()
    assert server.azure is not None
    server.azure.api.faults.clear()
    server.azure.update_settings({"roles": {"acknowledge": True}})
    return server


@pytest.fixture
def pipeline(server: SimulatorServer, fleet: tuple[SimulatorServer, Path]) -> Iterator[Any]:
    with managed_identity(server) as credential:
        yield arm_pipeline(server, credential, fleet[1])


def _document(server: SimulatorServer, vm: str) -> dict[str, Any]:
    url = f"{server.vm_url(vm)}/metadata/scheduledevents?api-version=2020-07-01"
    return requests.get(url, headers=HEADERS, timeout=5).json()


def test_acknowledge_starts_the_event_for_every_vm_and_is_recorded_as_an_approval_via_arm(server, pipeline):
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["db-4", "db-5"]})
    answer = acknowledge(pipeline, owner_path(server, event["EventId"]))
    assert (answer.status_code, answer.json()) == (200, {"value": "Successfully Approved"})
    [record] = server.sim.approvals()
    assert record["EventId"] == event["EventId"]
    assert (record["via"], record["vm"], record["accepted"], record["started"]) == ("arm", "db-4", True, True)
    for vm in ("db-4", "db-5", "db-0"):
        [shown] = _document(server, vm)["Events"]
        assert (shown["EventStatus"], shown["NotBefore"]) == ("Started", "")


def test_acknowledge_changes_the_document_exactly_as_a_start_requests_does(server, pipeline):
    by_arm = server.sim.add_event({"EventId": "A", "Resources": ["db-1"], "StartedSeconds": 3600})
    by_vm = server.sim.add_event({"EventId": "B", "Resources": ["db-2"], "StartedSeconds": 3600})
    acknowledge(pipeline, owner_path(server, by_arm["EventId"]))
    requests.post(
        f"{server.vm_url('db-2')}/metadata/scheduledevents?api-version=2020-07-01",
        headers=HEADERS,
        json={"StartRequests": [{"EventId": by_vm["EventId"]}]},
        timeout=5,
    ).raise_for_status()
    shown = {e["EventId"]: e for e in _document(server, "db-0")["Events"]}
    strip = lambda e: {k: v for k, v in e.items() if k not in ("EventId", "Resources")}  # noqa: E731
    assert strip(shown["A"]) == strip(shown["B"])
    assert [(a["via"], a["started"]) for a in server.sim.approvals()] == [("arm", True), ("imds", True)]


def test_the_list_variant_acknowledges_several_events_of_a_scale_set(server, pipeline):
    first = server.sim.add_event({"Resources": ["api_0"]})
    second = server.sim.add_event({"Resources": ["api_2"]})
    scale_set = owner_path(server, first["EventId"]).split("/providers/Microsoft.Maintenance")[0]
    path = f"{scale_set}/providers/Microsoft.Maintenance/scheduledevents"
    answer = acknowledge(pipeline, path, ids=[first["EventId"], second["EventId"]])
    assert answer.status_code == 200
    assert {a["EventId"] for a in server.sim.approvals() if a["started"]} == {
        first["EventId"],
        second["EventId"],
    }


def test_an_event_can_be_acknowledged_under_its_vm_or_its_availability_set(server, pipeline):
    event = server.sim.add_event({"Resources": ["db-3"]})
    vm_path = owner_path(server, event["EventId"])
    set_path = vm_path.replace("/virtualMachines/db-3/", "/availabilitySets/db/")
    assert acknowledge(pipeline, set_path).status_code == 200
    assert server.sim.event(event["EventId"])["EventStatus"] == "Started"


def test_an_event_of_another_resource_is_a_404_and_starts_nothing(server, pipeline):
    event = server.sim.add_event({"Resources": ["db-3"]})
    other = owner_path(server, event["EventId"]).replace("/virtualMachines/db-3/", "/virtualMachines/db-1/")
    answer = acknowledge(pipeline, other)
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "ResourceNotFound")
    assert server.sim.approvals() == []
    assert server.sim.event(event["EventId"])["EventStatus"] == "Scheduled"


def test_a_completed_event_can_no_longer_be_acknowledged(server, pipeline):
    event = server.sim.add_event({"Resources": ["db-3"], "EventStatus": "Started"})
    path = owner_path(server, event["EventId"])
    server.sim.delete_event(event["EventId"])
    answer = acknowledge(pipeline, path)
    assert answer.status_code == 404 and "Completed" in answer.json()["error"]["message"]


def test_without_a_token_arm_answers_401_with_a_bearer_challenge(server, fleet):
    event = server.sim.add_event({"Resources": ["db-3"]})
    answer = acknowledge(arm_pipeline(server, None, fleet[1]), owner_path(server, event["EventId"]))
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert answer.json()["error"]["code"] == "AuthenticationFailed"
    assert server.sim.approvals() == []


def test_a_wrong_token_is_a_401_and_starts_nothing(server, fleet):
    event = server.sim.add_event({"Resources": ["db-3"]})
    pipeline = arm_pipeline(server, FixedToken("not-the-token"), fleet[1])
    answer = acknowledge(pipeline, owner_path(server, event["EventId"]))
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "InvalidAuthenticationToken")
    assert server.sim.event(event["EventId"])["EventStatus"] == "Scheduled"


def test_a_principal_without_the_acknowledge_role_gets_403_naming_the_action(server, pipeline):
    server.azure.update_settings({"roles": {"acknowledge": False}})
    event = server.sim.add_event({"Resources": ["db-3"]})
    answer = acknowledge(pipeline, owner_path(server, event["EventId"]))
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "AuthorizationFailed"
    assert "Microsoft.Maintenance/scheduledevents/acknowledge/action" in answer.json()["error"]["message"]
    assert server.sim.approvals() == []


@pytest.mark.parametrize("status", [401, 403, 429])
def test_a_fault_on_request_answers_that_status_once_then_acknowledge_works(server, pipeline, status):
    retry_after = {"retry_after": "0"} if status == 429 else {}  # a Retry-After makes any status retried
    server.azure.api.faults.add({"status": status, "route": "acknowledge", **retry_after})
    event = server.sim.add_event({"Resources": ["db-3"]})
    path = owner_path(server, event["EventId"])
    first = acknowledge(pipeline, path) if status != 429 else None
    if first is not None:
        assert first.status_code == status
        assert server.sim.event(event["EventId"])["EventStatus"] == "Scheduled"
        assert acknowledge(pipeline, path).status_code == 200
    else:  # the client's retry policy waits Retry-After and posts again
        assert acknowledge(pipeline, path).status_code == 200
        assert [r["status"] for r in server.azure.api.requests()][-2:] == [429, 200]
    assert server.sim.event(event["EventId"])["EventStatus"] == "Started"


def test_an_unknown_api_version_is_a_400(server, pipeline):
    event = server.sim.add_event({"Resources": ["db-3"]})
    answer = send(
        pipeline, "POST", owner_path(server, event["EventId"]) + "/acknowledge?api-version=2019-01-01"
    )
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "InvalidApiVersionParameter")


def last_acknowledges(server: SimulatorServer, count: int) -> list[dict[str, Any]]:
    assert server.azure is not None
    return [r for r in server.azure.api.requests() if r["route"] == "acknowledge"][-count:]


def scale_set_path(server: SimulatorServer, event_id: str) -> str:
    return owner_path(server, event_id).split("/providers/Microsoft.Maintenance")[0] + \
        "/providers/Microsoft.Maintenance/scheduledevents"


def test_a_policy_403_names_the_policy_in_arms_error_shape_and_starts_nothing(server, pipeline) -> None:
    server.azure.api.faults.add({"status": 403, "code": "RequestDisallowedByPolicy",
                                 "policy": "No early maintenance in production", "route": "acknowledge"})
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["db-1"]})

    answer = acknowledge(pipeline, owner_path(server, event["EventId"]))

    assert answer.status_code == 403
    error = answer.json()["error"]
    assert error["code"] == "RequestDisallowedByPolicy"
    assert error["target"] == "db-1"
    assert "Microsoft.Maintenance/scheduledevents/acknowledge/action" in error["message"]
    assert "No early maintenance in production" in error["message"]
    [violation] = error["additionalInfo"]
    assert violation["type"] == "PolicyViolation"
    info = violation["info"]
    assert info["policyDefinitionDisplayName"] == info["policyAssignmentDisplayName"] == \
        "No early maintenance in production"
    assert info["policyDefinitionEffect"] == "deny"
    scope = f"/subscriptions/{server.azure.fleet.subscription}/providers/Microsoft.Authorization"
    assert info["policyAssignmentId"].startswith(f"{scope}/policyAssignments/")
    assert server.sim.approvals() == []
    [logged] = last_acknowledges(server, 1)
    assert (logged["status"], logged["code"], logged["event_ids"]) == (403, "RequestDisallowedByPolicy",
                                                                        [event["EventId"]])


def test_a_missing_role_is_a_plain_authorization_failed_403(server, pipeline) -> None:
    server.azure.api.faults.add({"status": 403, "route": "acknowledge"})
    event = server.sim.add_event({"Resources": ["db-1"]})

    error = acknowledge(pipeline, owner_path(server, event["EventId"])).json()["error"]

    assert error["code"] == "AuthorizationFailed" and "additionalInfo" not in error
    assert "does not have authorization to perform action" in error["message"]


def test_a_role_given_back_later_turns_the_403_into_a_200(server, pipeline) -> None:
    settings = server.azure.update_settings({"roles": {"acknowledge": False}, "give_back_after": 1.5})
    assert settings["roles"]["acknowledge"] is False and 0 < settings["roles_back_in"]["acknowledge"] <= 1.5
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["db-2"]})
    path = owner_path(server, event["EventId"])

    refused = acknowledge(pipeline, path)
    time.sleep(1.6)
    accepted = acknowledge(pipeline, path)

    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "AuthorizationFailed")
    assert accepted.status_code == 200
    assert [(r["status"], r["code"]) for r in last_acknowledges(server, 2)] == [(403, "AuthorizationFailed"),
                                                                                 (200, None)]
    assert server.sim.event(event["EventId"])["EventStatus"] == "Started"
    assert server.azure.settings()["roles"]["acknowledge"] is True
    assert server.azure.settings()["roles_back_in"] == {}


def test_giving_a_role_back_by_hand_cancels_the_timer(server) -> None:
    server.azure.update_settings({"roles": {"acknowledge": False}, "give_back_after": 600})
    settings = server.azure.update_settings({"roles": {"acknowledge": True}})

    assert settings["roles"]["acknowledge"] is True and settings["roles_back_in"] == {}


def test_acknowledge_list_takes_two_events_of_a_scale_set_in_one_call_at_2025_11_01(server, pipeline) -> None:
    first = server.sim.add_event({"EventType": "Reboot", "Resources": ["api_0"]})
    second = server.sim.add_event({"EventType": "Reboot", "Resources": ["api_1"]})
    ids = [first["EventId"], second["EventId"]]

    answer = acknowledge(pipeline, scale_set_path(server, ids[0]), ids=ids)

    assert (answer.status_code, answer.json()) == (200, {"value": "Successfully Approved"})
    [call] = last_acknowledges(server, 1)
    assert (call["api_version"], call["event_ids"], call["status"]) == ("2025-11-01", ids, 200)
    approvals = [a for a in server.sim.approvals() if a["via"] == "arm"]
    assert sorted(a["EventId"] for a in approvals) == sorted(ids) and all(a["started"] for a in approvals)


def test_acknowledge_list_is_not_in_the_2023_preview_api_version(server, pipeline) -> None:
    event = server.sim.add_event({"Resources": ["api_0"]})
    path = scale_set_path(server, event["EventId"])

    preview = "?api-version=2023-10-01-preview"
    answer = send(pipeline, "POST", path + preview, json={"value": [event["EventId"]]})
    single = send(pipeline, "POST", owner_path(server, event["EventId"]) + "/acknowledge" + preview)

    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "InvalidApiVersionParameter")
    assert single.status_code == 200


@pytest.mark.parametrize("body", [{"value": []}, {"value": "x"}, {"ids": ["x"]}, [1], {"value": [""]}])
def test_acknowledge_list_wants_a_value_list_of_event_ids(server, pipeline, body) -> None:
    event = server.sim.add_event({"Resources": ["api_0"]})

    path = scale_set_path(server, event["EventId"])
    answer = send(pipeline, "POST", path + "?api-version=2025-11-01", json=body)

    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "InvalidRequestContent")
    assert server.sim.approvals() == []


def test_acknowledge_list_with_one_event_not_the_resources_starts_none(server, pipeline) -> None:
    mine = server.sim.add_event({"Resources": ["api_0"]})
    other = server.sim.add_event({"Resources": ["db-0"]})

    path = scale_set_path(server, mine["EventId"])
    answer = acknowledge(pipeline, path, ids=[mine["EventId"], other["EventId"]])

    assert answer.status_code == 404 and other["EventId"] in answer.json()["error"]["message"]
    assert server.sim.approvals() == []


@pytest.mark.parametrize(("spec", "named"), [
    ({"status": 429, "code": "RequestDisallowedByPolicy"}, "code and policy apply to status 403 only"),
    ({"status": 403, "code": "Forbidden"},
     "code must be one of AuthorizationFailed, RequestDisallowedByPolicy"),
    ({"status": 403, "policy": "x"}, "policy (a non-empty name) goes with code"),
    ({"status": 403, "code": "RequestDisallowedByPolicy", "policy": " "}, "policy (a non-empty name)"),
])
def test_a_bad_refusal_spec_is_a_400_naming_it(server, spec, named) -> None:
    answer = requests.post(f"{server.url}/control/arm/faults", json=spec, timeout=5)

    assert answer.status_code == 400 and named in answer.json()["error"]


@pytest.mark.parametrize("body", [{"roles": {"acknowledge": False}, "give_back_after": 0},
                                  {"roles": {"acknowledge": False}, "give_back_after": "soon"},
                                  {"roles": {"acknowledge": True}, "give_back_after": 10},
                                  {"give_back_after": 10}])
def test_a_bad_give_back_is_a_400_naming_it(server, body) -> None:
    answer = requests.post(f"{server.url}/control/arm", json=body, timeout=5)

    assert answer.status_code == 400 and "give_back_after" in answer.json()["error"]
    assert server.azure.settings()["roles"]["acknowledge"] is True
