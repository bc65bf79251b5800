"""Azure's word on the fleet's health as the simulator plays it: Resource Health (its
``healthresources`` rows, its ``AvailabilityStatusChanged`` events on the feed) and fired Azure
Monitor alerts (``alertsmanagementresources``), driven by the one event model and the control API.

Resource Graph, Resource Health and Azure Monitor cannot run here, so the simulator plays them (the
mocked part); the queries are the coordinator's (``se_forwarder.fleet.health_queries``), sent with
the real ``azure-mgmt-resourcegraph`` client over HTTPS; the control API is called over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.fleet.health_queries import AVAILABILITY, FIRED_ALERTS, fired_alerts
from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_health import EVENT_TYPE
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology
from tests.eventhubs.broker import EventHubsBroker
from tests.eventhubs.helpers import consume
from tests.support.azure_side import graph_client, managed_identity, query_pages, rows


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimulatorServer, Path]]:
    ca = tmp_path_factory.mktemp("arm") / "ca.pem"
    topology = Topology.build(
        availability_sets=[{"name": "web", "vms": 3, "agentless": ["web-2"]}],
        scale_sets=[{"name": "api", "vms": 2}],
    )
    with SimulatorServer(topology=topology, azure=AzureOptions(arm_port=0, ca_path=ca)) as server:
        yield server, ca


@pytest.fixture
def client(fleet: tuple[SimulatorServer, Path]) -> Iterator[Any]:
    server, ca = fleet
    server.sim.reset()
    with managed_identity(server) as credential:
        yield graph_client(server, credential, ca)


def control(server: SimulatorServer, method: str, path: str, body: Any = None) -> requests.Response:
    session = requests.Session()
    session.trust_env = False
    return session.request(method, f"{server.url}/control{path}", json=body, timeout=5)


def availability(client: Any) -> dict[str, dict[str, Any]]:
    """Each VM's Resource Health properties, by the VM's name."""
    return {row["properties"]["targetResourceId"].rsplit("/", 1)[-1]: row["properties"]
            for row in rows(client, AVAILABILITY)}


def feed(server: SimulatorServer) -> list[dict[str, Any]]:
    return [e for e in control(server, "GET", "/feed/events").json() if e["type"] == EVENT_TYPE]


def started_reboot(server: SimulatorServer, vm: str, kind: str = "Reboot") -> str:
    return server.sim.add_event({"EventType": kind, "EventStatus": "Started", "NotBefore": "",
                                 "Resources": [vm]})["EventId"]


def test_every_vm_has_an_available_healthresources_row_in_the_documented_shape(fleet, client):
    server, _ = fleet
    found = rows(client, AVAILABILITY)
    assert sorted(r["properties"]["targetResourceId"].rsplit("/", 1)[-1] for r in found) == [
        "0", "1", "web-0", "web-1", "web-2"]
    web = next(r for r in found if r["properties"]["targetResourceId"].endswith("/web-1"))
    vm = server.azure.fleet.vm("web-1")
    assert web["id"] == f"{vm.resource_id}/providers/Microsoft.ResourceHealth/availabilityStatuses/current"
    assert (web["name"], web["type"]) == ("current", "microsoft.resourcehealth/availabilitystatuses")
    assert web["subscriptionId"] == server.azure.fleet.subscription
    props = web["properties"]
    assert props["targetResourceType"] == "Microsoft.Compute/virtualMachines"
    assert props["targetResourceId"] == vm.resource_id
    assert props["availabilityState"] == props["previousAvailabilityState"] == "Available"
    assert {"occurredTime", "reportedTime", "summary"} <= set(props)
    scale_set_vm = next(r for r in found
                        if "/virtualMachineScaleSets/api/" in r["properties"]["targetResourceId"])
    assert scale_set_vm["properties"]["targetResourceType"] == (
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines")


def test_a_vm_is_unavailable_while_a_reboot_of_it_is_started_and_available_after(fleet, client):
    server, _ = fleet
    event_id = started_reboot(server, "web-1")
    during = availability(client)
    assert during["web-1"]["availabilityState"] == "Unavailable"
    assert during["web-1"]["previousAvailabilityState"] == "Available"
    assert event_id in during["web-1"]["summary"]
    assert during["web-0"]["availabilityState"] == "Available"
    server.sim.delete_event(event_id)
    after = availability(client)["web-1"]
    assert (after["availabilityState"], after["previousAvailabilityState"]) == ("Available", "Unavailable")
    changes = [e["data"]["resourceInfo"]["properties"] for e in feed(server)]
    assert [(c["previousAvailabilityState"], c["availabilityState"]) for c in changes] == [
        ("Available", "Unavailable"), ("Unavailable", "Available")]


def test_an_availability_change_is_an_availabilitystatuschanged_event_in_the_documented_schema(fleet, client):
    server, _ = fleet
    started_reboot(server, "web-0", kind="Redeploy")
    (event,) = feed(server)
    vm = server.azure.fleet.vm("web-0")
    assert set(event) == {"specversion", "id", "source", "subject", "type", "time", "data"}
    assert (event["specversion"], event["type"]) == ("1.0", EVENT_TYPE)
    assert event["source"] == f"/subscriptions/{server.azure.fleet.subscription}"
    assert event["subject"] == vm.resource_id
    info = event["data"]["resourceInfo"]
    assert info["id"] == (f"{vm.resource_id}/providers/Microsoft.ResourceHealth/availabilityStatuses/"
                          f"{info['name']}")
    assert info["type"] == "Microsoft.ResourceHealth/availabilityStatuses"
    assert info["properties"] == {
        "targetResourceId": vm.resource_id, "targetResourceType": "Microsoft.Compute/virtualMachines",
        "occurredTime": event["time"], "previousAvailabilityState": "Available",
        "availabilityState": "Unavailable"}
    assert event["data"]["operationalInfo"] == {"resourceEventTime": event["time"]}
    assert event["data"]["apiVersion"] == "2023-12-01"


def test_a_freeze_takes_nothing_down_in_resource_health(fleet, client):
    server, _ = fleet
    started_reboot(server, "web-1", kind="Freeze")
    assert availability(client)["web-1"]["availabilityState"] == "Available"
    assert feed(server) == []


def test_the_control_api_sets_a_failure_no_event_explains_and_clears_it(fleet, client):
    server, _ = fleet
    answer = control(server, "POST", "/health", {"vm": "web-2", "availabilityState": "Degraded",
                                                  "summary": "disk latency"})
    assert answer.status_code == 200
    assert answer.json()["availabilityState"] == "Degraded" and answer.json()["setBy"] == "control"
    row = availability(client)["web-2"]
    assert (row["availabilityState"], row["summary"]) == ("Degraded", "disk latency")
    for state in ("Unknown", "Unavailable"):
        control(server, "POST", "/health", {"vm": "web-2", "availabilityState": state})
    assert availability(client)["web-2"]["availabilityState"] == "Unavailable"
    assert control(server, "POST", "/health", {"vm": "web-2", "availabilityState": None}).json()[
        "availabilityState"] == "Available"
    changes = [(c["vm"], c["availabilityState"]) for c in control(server, "GET", "/health").json()["changes"]]
    assert changes == [("web-2", "Degraded"), ("web-2", "Unknown"), ("web-2", "Unavailable"),
                       ("web-2", "Available")]
    assert [e["data"]["resourceInfo"]["properties"]["availabilityState"] for e in feed(server)] == [
        "Degraded", "Unknown", "Unavailable", "Available"]


def test_a_state_set_by_the_control_api_outlasts_an_event(fleet, client):
    server, _ = fleet
    control(server, "POST", "/health", {"vm": "web-1", "availabilityState": "Unavailable"})
    server.sim.delete_event(started_reboot(server, "web-1"))
    assert availability(client)["web-1"]["availabilityState"] == "Unavailable"
    control(server, "POST", "/health", {"vm": "web-1", "availabilityState": None})
    assert availability(client)["web-1"]["availabilityState"] == "Available"


@pytest.mark.parametrize(("body", "status", "said"), [
    ({"vm": "web-9", "availabilityState": "Unavailable"}, 404, "no VM 'web-9' in the simulated fleet"),
    ({"vm": "web-1", "availabilityState": "Down"}, 400,
     "availabilityState must be one of Available, Unavailable, Degraded, Unknown, or null"),
    ({"vm": "web-1"}, 400, "availabilityState must be one of"),
    ({"vm": "web-1", "availabilityState": "Degraded", "reason": "x"}, 400, "the body must be"),
])
def test_a_bad_health_setting_is_refused_with_one_line(fleet, body, status, said):
    server, _ = fleet
    answer = control(server, "POST", "/health", body)
    assert answer.status_code == status
    assert said in answer.json()["error"]


def test_a_reset_makes_every_vm_available_again_and_forgets_the_alerts(fleet, client):
    server, _ = fleet
    started_reboot(server, "web-0")
    control(server, "POST", "/alerts", {"name": "HighCpu"})
    server.sim.reset()
    assert {p["availabilityState"] for p in availability(client).values()} == {"Available"}
    assert rows(client, FIRED_ALERTS) == []


def test_availability_comes_in_pages_that_follow_the_skip_token(fleet, client):
    pages = query_pages(client, AVAILABILITY, top=2)
    assert [len(p.data) for p in pages] == [2, 2, 1]


def test_a_fired_alert_is_an_alertsmanagementresources_row_with_its_essentials(fleet, client):
    server, _ = fleet
    answer = control(server, "POST", "/alerts", {"name": "HighCpu", "severity": "Sev1", "target": "web-0",
                                                 "description": "CPU over 95 %"})
    assert answer.status_code == 201
    (row,) = rows(client, FIRED_ALERTS)
    assert row["id"] == answer.json()["id"]
    assert row["id"].startswith(f"/subscriptions/{server.azure.fleet.subscription}/providers/"
                                "Microsoft.AlertsManagement/alerts/")
    assert (row["name"], row["type"]) == ("HighCpu", "microsoft.alertsmanagement/alerts")
    essentials = row["properties"]["essentials"]
    assert essentials["monitorCondition"] == "Fired" and essentials["alertState"] == "New"
    assert (essentials["severity"], essentials["signalType"]) == ("Sev1", "Metric")
    assert essentials["targetResource"] == server.azure.fleet.vm("web-0").resource_id.lower()
    assert (essentials["targetResourceName"], essentials["targetResourceType"]) == (
        "web-0", "virtualmachines")
    assert essentials["description"] == "CPU over 95 %" and essentials["startDateTime"]
    assert essentials["monitorConditionResolvedDateTime"] is None


def test_a_resolved_or_closed_alert_is_no_longer_fired_but_keeps_its_row(fleet, client):
    server, _ = fleet
    first = control(server, "POST", "/alerts", {"name": "DiskFull"}).json()
    control(server, "POST", "/alerts", {"name": "HighCpu"})
    resolved = control(server, "PATCH", f"/alerts/{first['id']}", {"monitorCondition": "Resolved"}).json()
    assert resolved["properties"]["essentials"]["monitorConditionResolvedDateTime"]
    assert [r["name"] for r in rows(client, FIRED_ALERTS)] == ["HighCpu"]
    control(server, "PATCH", "/alerts/HighCpu", {"alertState": "Closed"})
    assert rows(client, FIRED_ALERTS) == []
    table = rows(client, "alertsmanagementresources | project id, name, "
                         "condition = tostring(properties.essentials.monitorCondition)")
    assert sorted((r["name"], r["condition"]) for r in table) == [
        ("DiskFull", "Resolved"), ("HighCpu", "Fired")]


def test_the_alert_query_narrows_to_severities_rules_and_a_scope(fleet, client):
    server, _ = fleet
    web0 = server.azure.fleet.vm("web-0").resource_id
    for name, severity, target in (("HighCpu", "Sev1", "web-0"), ("HighCpu", "Sev3", "web-1"),
                                   ("Latency", "Sev0", None), ("DiskFull", "Sev2", "web-0")):
        control(server, "POST", "/alerts", {"name": name, "severity": severity, "target": target})

    def names(query: str) -> list[tuple[str, str]]:
        return sorted((r["name"], r["properties"]["essentials"]["severity"]) for r in rows(client, query))

    assert names(fired_alerts(severities=["Sev0", "Sev1"])) == [("HighCpu", "Sev1"), ("Latency", "Sev0")]
    assert names(fired_alerts(rules=["highcpu"])) == [("HighCpu", "Sev1"), ("HighCpu", "Sev3")]
    assert names(fired_alerts(scope=web0.upper() + "/")) == [("DiskFull", "Sev2"), ("HighCpu", "Sev1")]
    group = web0.split("/providers/")[0]
    assert len(rows(client, fired_alerts(scope=group))) == 4
    assert names(fired_alerts(scope=web0[:-1])) == []  # web-: not a resource all these are under


def test_a_bad_alert_is_refused_with_one_line(fleet):
    server, _ = fleet
    assert "name must be the alert rule's name" in control(server, "POST", "/alerts", {"severity": "Sev1"}
                                                           ).json()["error"]
    assert control(server, "POST", "/alerts", {"name": "X", "severity": "critical"}).json()["error"] == (
        "severity must be one of Sev0, Sev1, Sev2, Sev3, Sev4")
    assert control(server, "PATCH", "/alerts/nope", {"alertState": "Closed"}).status_code == 404
    with pytest.raises(ValueError, match="'P1' is not an alert severity"):
        fired_alerts(severities=["P1"])


def test_availability_changes_reach_the_event_hub_as_event_grid_delivers_them(tmp_path):
    with EventHubsBroker(eventhub="azure-feed", partition_count=1) as broker, \
            SimulatorServer(vm_names=("vm0", "vm1"),
                            azure=AzureOptions(feed_connection_string=broker.connection_string())) as server:
        event = started_reboot(server, "vm1")
        server.sim.delete_event(event)
        assert server.sim.wait_until(lambda: server.azure.feed.settings()["published"] >= 4, timeout=15)
        messages = consume(broker.connection_string(), 4, timeout=15)
    events = [json.loads(m.body)[0] for m in messages]
    health = [e for e in events if e["type"] == EVENT_TYPE]
    assert [e["data"]["resourceInfo"]["properties"]["availabilityState"] for e in health] == [
        "Unavailable", "Available"]
    assert all(e["subject"].endswith("/virtualMachines/vm1") for e in health)
