"""The Maintenance ``acknowledge`` on the simulator's ARM, posted with ``azure-mgmt-core``'s
``ARMPipelineClient``: it starts the event exactly as an agent's StartRequests does.

The ARM endpoint is the simulator's (Azure cannot run here); the client and credential are real.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology
from tests.support.azure_side import FixedToken, acknowledge, arm_pipeline, managed_identity, owner_path

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
    from tests.support.azure_side import send

    event = server.sim.add_event({"Resources": ["db-3"]})
    answer = send(
        pipeline, "POST", owner_path(server, event["EventId"]) + "/acknowledge?api-version=2019-01-01"
    )
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "InvalidApiVersionParameter")
