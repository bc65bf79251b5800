"""The simulator's Resource Graph, read with the real ``azure-mgmt-resourcegraph`` client.

Azure Resource Graph cannot run here, so the simulator plays it (the one mocked part); the client,
its pipeline (TLS to the test CA, bearer token from a managed identity, retries on 429) are real.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions

from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology
from tests.support.azure_side import arm_pipeline, graph_client, managed_identity, query_pages, rows, send

EVENTS = "maintenanceresources | where type =~ 'microsoft.maintenance/scheduledevents'"
VMS = "resources | where type =~ 'microsoft.compute/virtualmachines' | project id, name | order by name asc"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimulatorServer, Path]]:
    ca = tmp_path_factory.mktemp("arm") / "ca.pem"
    topology = Topology.build(
        availability_sets=[
            {
                "name": "web",
                "vms": 6,
                "fault_domains": 3,
                "tags": {"tier": "web"},
                "agentless": ["web-4", "web-5"],
            }
        ],
        scale_sets=[
            {"name": "api", "vms": 3, "zones": ["1", "2"]},
            {"name": "flex", "vms": 2, "orchestration": "flexible", "fault_domains": 2},
        ],
    )
    with SimulatorServer(topology=topology, azure=AzureOptions(arm_port=0, ca_path=ca)) as server:
        yield server, ca


@pytest.fixture
def client(fleet: tuple[SimulatorServer, Path]) -> Iterator[Any]:
    server, ca = fleet
    server.sim.reset()
    assert server.azure is not None
    server.azure.api.faults.clear()
    with managed_identity(server) as credential:
        yield graph_client(server, credential, ca)


def test_a_scheduled_event_is_a_maintenanceresources_row_with_its_documented_fields(fleet, client):
    server, _ = fleet
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["web-1"], "DurationInSeconds": 60})
    [row] = rows(client, EVENTS)
    assert row["type"] == "microsoft.maintenance/scheduledevents"
    assert row["name"] == event["EventId"]
    assert row["id"].endswith(
        f"/virtualMachines/web-1/providers/Microsoft.Maintenance/scheduledevents/{event['EventId']}"
    )
    assert row["properties"] == {
        "DurationInSeconds": 60,
        "Description": event["Description"],
        "EventId": event["EventId"],
        "EventSource": "Platform",
        "EventStatus": "Scheduled",
        "EventType": "Reboot",
        "NotBefore": event["NotBefore"],
        "Resources": ["web-1"],
        "ResourceType": "VirtualMachine",
    }


def test_maintenanceresources_keeps_how_each_event_ended_completed_or_canceled(fleet, client):
    server, _ = fleet
    done = server.sim.add_event({"Resources": ["web-0"], "EventStatus": "Started"})
    dropped = server.sim.add_event({"Resources": ["web-2"]})
    server.sim.delete_event(done["EventId"])
    server.sim.delete_event(dropped["EventId"])
    status = {r["name"]: r["properties"]["EventStatus"] for r in rows(client, EVENTS)}
    assert status == {done["EventId"]: "Completed", dropped["EventId"]: "Canceled"}


def test_a_scale_set_event_is_filed_under_the_scale_set_and_names_instance_names(fleet, client):
    server, _ = fleet
    event = server.sim.add_event({"Resources": ["api_1", "api_2"]})
    [row] = rows(client, EVENTS + " | where properties.EventStatus == 'Scheduled'")
    assert "/virtualMachineScaleSets/api/providers/Microsoft.Maintenance/scheduledevents/" in row["id"]
    assert row["properties"]["Resources"] == ["api_1", "api_2"] and row["name"] == event["EventId"]
    assert sorted(row["zones"]) == ["1", "2"]


def test_resources_gives_each_vm_its_availability_set_scale_set_zone_and_tags(client):
    vms = {
        r["name"]: r
        for r in rows(
            client,
            "resources | where type =~ 'microsoft.compute/virtualmachines' "
            "| project id, name, zones, tags, avset = tostring(properties.availabilitySet.id),"
            " vmss = tostring(properties.virtualMachineScaleSet.id)",
        )
    }
    assert sorted(vms) == ["flex_0", "flex_1", "web-0", "web-1", "web-2", "web-3", "web-4", "web-5"]
    assert vms["web-4"]["avset"].endswith("/availabilitySets/web") and vms["web-4"]["vmss"] == ""
    assert vms["web-4"]["tags"] == {"tier": "web"}
    assert vms["flex_1"]["vmss"].endswith("/virtualMachineScaleSets/flex") and vms["flex_1"]["avset"] == ""


def test_a_uniform_scale_sets_vms_are_in_computeresources_with_their_instance_ids(client):
    found = rows(
        client,
        "computeresources | where type =~ "
        "'microsoft.compute/virtualmachinescalesets/virtualmachines' | project id, name, zones",
    )
    assert [(r["name"], r["zones"]) for r in found] == [("0", ["1"]), ("1", ["2"]), ("2", ["1"])]
    assert found[2]["id"].endswith("/virtualMachineScaleSets/api/virtualMachines/2")


def test_the_instance_view_gives_the_fault_and_update_domain_imds_shows(fleet, client):
    server, ca = fleet
    with managed_identity(server) as credential:
        pipeline = arm_pipeline(server, credential, ca)
        [vm] = rows(client, "resources | where name == 'web-4' | project id")
        view = send(pipeline, "GET", vm["id"] + "/instanceView?api-version=2024-07-01").json()
        [uniform] = rows(client, "computeresources | where name == '2' | project id")
        scale = send(pipeline, "GET", uniform["id"] + "/instanceView?api-version=2024-07-01")
    imds = server.sim.topology.compute_overrides("web-4")
    assert (
        (view["platformFaultDomain"], view["platformUpdateDomain"])
        == (int(imds["platformFaultDomain"]), int(imds["platformUpdateDomain"]))
        == (1, 4)
    )
    assert scale.json()["computerName"] == "api_2"


def test_a_429_with_retry_after_is_retried_by_the_client_after_the_wait(fleet, client):
    server, _ = fleet
    server.azure.api.faults.add({"status": 429, "retry_after": "1", "route": "query"})
    assert len(rows(client, VMS)) == 8
    statuses = [r["status"] for r in server.azure.api.requests() if r["route"] == "query"][-2:]
    assert statuses == [429, 200]


def test_a_429_reaches_a_client_that_does_not_retry_with_its_retry_after(fleet):
    server, ca = fleet
    server.azure.api.faults.add({"status": 429, "retry_after": "7", "route": "query"})
    with managed_identity(server) as credential:
        client = graph_client(server, credential, ca, retry_total=0)
        with pytest.raises(HttpResponseError) as raised:
            client.resources(QueryRequest(query=VMS))
    assert raised.value.status_code == 429
    assert raised.value.response.headers["Retry-After"] == "7"
    assert raised.value.error.code == "RateLimiting"


def test_every_answer_carries_the_user_quota_headers(fleet, client):
    server, ca = fleet
    with managed_identity(server) as credential:
        answer = send(
            arm_pipeline(server, credential, ca),
            "POST",
            "/providers/Microsoft.ResourceGraph/resources?api-version=2021-03-01",
            json={"query": VMS},
        )
    assert answer.status_code == 200
    assert int(answer.headers["x-ms-user-quota-remaining"]) >= 0
    assert answer.headers["x-ms-user-quota-resets-after"].count(":") == 2


def test_a_query_outside_the_simulated_subset_is_a_400_naming_the_part(client):
    with pytest.raises(HttpResponseError) as raised:
        client.resources(QueryRequest(query="resources | summarize count() by type"))
    assert raised.value.status_code == 400
    assert "'summarize' is not in the simulator's subset" in str(raised.value)


def test_the_table_result_format_has_columns_and_rows(client):
    answer = client.resources(
        QueryRequest(query=VMS, options=QueryRequestOptions(result_format="table", top=2))
    )
    assert [c["name"] for c in answer.data["columns"]] == ["id", "name"]
    assert [r[1] for r in answer.data["rows"]] == ["flex_0", "flex_1"]


def test_a_query_without_the_id_column_is_truncated_without_a_skip_token(client):
    answer = client.resources(
        QueryRequest(query="resources | project name", options=QueryRequestOptions(top=2))
    )
    assert (answer.count, answer.skip_token, answer.result_truncated) == (2, None, "true")


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimulatorServer, Path]]:
    ca = tmp_path_factory.mktemp("arm-large") / "ca.pem"
    topology = Topology.build(availability_sets=[{"name": f"set{i}", "vms": 400} for i in range(3)])
    with SimulatorServer(topology=topology, azure=AzureOptions(arm_port=0, ca_path=ca)) as server:
        yield server, ca


@pytest.mark.parametrize("top", [None, 250])
def test_paging_through_1200_vms_returns_each_exactly_once(large, top):
    server, ca = large
    with managed_identity(server) as credential:
        pages = query_pages(graph_client(server, credential, ca), VMS, **({"top": top} if top else {}))
    assert len(pages) == (2 if top is None else 5)
    assert {p.total_records for p in pages} == {1200}
    ids = [r["id"] for p in pages for r in p.data]
    assert len(ids) == len(set(ids)) == 1200
