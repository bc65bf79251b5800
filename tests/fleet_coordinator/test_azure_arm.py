"""The coordinator's Resource Graph catch-up and ``acknowledge`` (azure_graph.py, azure_ack.py) with
their real Azure SDK clients (``azure-mgmt-resourcegraph``, ``azure-mgmt-core``, azure-identity's
``ManagedIdentityCredential``) against the simulator's ARM over HTTPS with its test CA: Azure itself
cannot run here, so the simulator plays it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.fleet.coordinator.azure import Acknowledger, Graph, Reach
from se_forwarder.fleet.coordinator.azure.acknowledge import Ack
from se_forwarder.fleet.coordinator.config import AzureSettings
from se_forwarder.fleet.coordinator.decide.arm_path import ACK_API_VERSION
from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.azure_side import AzureOptions
from se_forwarder.simulator.topology import Topology
from se_forwarder.simulator.wire import DEFAULT_SUBSCRIPTION_ID
from tests.support.azure_side import managed_identity, owner_path

TOPOLOGY = Topology.build(
    availability_sets=[{"name": "db", "vms": 6, "fault_domains": 3, "update_domains": 2,
                        "agentless": ["db-4", "db-5"]}],
    scale_sets=[{"name": "api", "vms": 3}, {"name": "web", "vms": 2, "orchestration": "flexible",
                                             "zones": ["1"]}],
)


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimulatorServer, Path]]:
    ca = tmp_path_factory.mktemp("arm") / "ca.pem"
    with SimulatorServer(topology=TOPOLOGY, azure=AzureOptions(arm_port=0, ca_path=ca)) as server:
        yield server, ca


@pytest.fixture
def server(arm) -> SimulatorServer:
    server = arm[0]
    server.sim.reset()
    assert server.azure is not None
    server.azure.api.faults.clear()
    server.azure.update_settings({"roles": {"query": True, "acknowledge": True, "instance_view": True}})
    return server


@pytest.fixture
def settings(arm) -> AzureSettings:
    server, ca = arm
    assert server.azure is not None
    return AzureSettings((DEFAULT_SUBSCRIPTION_ID,), arm_endpoint=server.azure.arm_url, ca_file=str(ca),
                         acknowledge=True)


@pytest.fixture
def credential(server) -> Iterator[Any]:
    with managed_identity(server) as credential:
        yield credential


def queries(server: SimulatorServer) -> list[dict[str, Any]]:
    assert server.azure is not None
    return [r for r in server.azure.api.requests() if r["route"] == "query"]


def test_a_catch_up_reads_every_vm_and_event_of_the_subscription_page_by_page(server, settings, credential):
    events = [server.sim.add_event({"EventType": "Reboot", "Resources": [vm]}) for vm in ("db-4", "api_1")]
    before = len(queries(server))
    graph = Graph(settings, credential, page_size=2)
    try:
        result = graph.catch_up()
    finally:
        graph.close()
    assert result.errors == [] and result.covered == (DEFAULT_SUBSCRIPTION_ID,)
    assert sorted(vm.name for vm in result.vms) == sorted(TOPOLOGY.vm_names)
    assert {e.event_id for e in result.events} == {e["EventId"] for e in events}
    assert len(queries(server)) - before == result.queries > 3  # 11 VMs and 2 events, 2 rows a page


def test_vms_carry_azures_groups_zones_and_the_domains_of_their_instance_views(server, settings, credential):
    graph = Graph(settings, credential)
    try:
        result = graph.catch_up()
    finally:
        graph.close()
    vms = {vm.name: vm for vm in result.vms}
    db4 = vms["db-4"]
    assert (db4.availability_set, db4.fault_domain, db4.update_domain) == ("db", "1", "0")
    assert (vms["api_2"].scale_set, vms["api_2"].availability_set) == ("api", "")
    assert (vms["web_1"].scale_set, vms["web_1"].zone) == ("web", "1")
    assert result.views == 9  # the availability set's and the uniform scale set's VMs, read once each
    assert all(vm.opted_in for vm in result.vms)  # through their sets' scheduledEventsPolicy


def test_a_catch_up_reads_each_vms_resource_health_unavailable_while_its_reboot_runs(server, settings,
                                                                                    credential):
    assert server.azure is not None
    server.azure.signals.health.set("db-5", "Degraded", "", server.sim.now())
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["api_1"], "EventStatus": "Started"})
    graph = Graph(settings, credential, page_size=4)
    try:
        result = graph.catch_up()
    finally:
        graph.close()
    assert result.errors == [] and event["EventStatus"] == "Started"
    ids = {vm.name: vm.resource_id.lower() for vm in result.vms}
    health = {h.resource_id: h for h in result.health}
    assert set(health) == set(ids.values())  # one row per VM, through every page
    assert health[ids["db-5"]].state == "Degraded" and health[ids["api_1"]].state == "Unavailable"
    assert {health[ids[vm]].state for vm in ids if vm not in ("db-5", "api_1")} == {"Available"}
    assert {h.via for h in result.health} == {"graph"}


def test_a_429_is_waited_out_for_its_retry_after_and_the_catch_up_completes(server, settings, credential):
    assert server.azure is not None
    server.azure.api.faults.add({"status": 429, "retry_after": "1", "count": 1, "route": "query"})
    graph = Graph(settings, credential)
    try:
        result = graph.catch_up()
    finally:
        graph.close()
    assert result.errors == [] and result.covered == (DEFAULT_SUBSCRIPTION_ID,)
    throttled, retried = [r for r in queries(server) if r["fault"] == 429][-1], queries(server)
    after = [r for r in retried if r["time"] > throttled["time"]][0]
    assert after["status"] == 200
    from datetime import datetime
    waited = datetime.fromisoformat(after["time"]) - datetime.fromisoformat(throttled["time"])
    assert waited.total_seconds() >= 1.0  # Retry-After: 1


def test_a_subscription_whose_queries_fail_is_not_covered(server, settings, credential):
    assert server.azure is not None
    server.azure.update_settings({"roles": {"query": False}})
    graph = Graph(settings, credential)
    try:
        result = graph.catch_up()
    finally:
        graph.close()
    assert (result.covered, result.topology, result.events) == ((), (), [])
    assert "AuthorizationFailed" in result.errors[0]


def nowhere(settings: AzureSettings) -> AzureSettings:
    """``settings`` with an ARM endpoint where nothing answers."""
    return AzureSettings(settings.subscriptions, arm_endpoint="https://127.0.0.1:9", ca_file=settings.ca_file)


def path(server: SimulatorServer, event_id: str) -> str:
    return f"{owner_path(server, event_id)}/acknowledge?api-version={ACK_API_VERSION}"


def acknowledger(settings: AzureSettings, credential: Any) -> Acknowledger:
    return Acknowledger(settings, credential, lambda *_: None)


def test_acknowledge_starts_the_event_through_arm(server, settings, credential):
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["db-5"]})
    ack = acknowledger(settings, credential)
    try:
        outcome = ack.post(path(server, event["EventId"]))
    finally:
        ack.close()
    assert outcome == ("approved", "ARM answered 200: Successfully Approved")
    [record] = server.sim.approvals()
    assert (record["EventId"], record["via"], record["started"]) == (event["EventId"], "arm", True)


def test_a_403_from_acknowledge_is_forbidden_and_approves_nothing(server, settings, credential):
    assert server.azure is not None
    server.azure.update_settings({"roles": {"acknowledge": False}})
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["db-5"]})
    ack = acknowledger(settings, credential)
    try:
        code, reason = ack.post(path(server, event["EventId"]))
    finally:
        ack.close()
    assert code == "forbidden" and reason.startswith("ARM answered 403: AuthorizationFailed")
    assert server.sim.approvals() == []


def test_acknowledge_without_an_answer_has_failed(settings, credential):
    unreachable = nowhere(settings)
    ack = acknowledger(unreachable, credential)
    try:
        code, reason = ack.post("/subscriptions/s/x/acknowledge?api-version=2025-11-01")
    finally:
        ack.close()
    assert code == "failed" and reason.startswith("no answer from ARM")


def test_a_403_from_resource_graph_is_an_answer_arm_is_reachable(server, settings, credential):
    """A missing role is a finding of the catch-up (its errors), not an outage: /healthz stays ok."""
    assert server.azure is not None
    server.azure.update_settings({"roles": {"query": False}})
    arm = Reach("arm")
    graph = Graph(settings, credential, reach=arm)
    try:
        result = graph.catch_up()
    finally:
        graph.close()
    assert result.covered == () and arm.reachable and arm.last_success is not None


def test_a_catch_up_that_gets_no_answer_says_arm_is_unreachable(settings, credential):
    unreachable = nowhere(settings)
    arm = Reach("arm")
    graph = Graph(unreachable, credential, reach=arm, deadline=20)
    try:
        result = graph.catch_up()
    finally:
        graph.close()
    assert result.covered == () and not arm.reachable and "querying Resource Graph" in arm.last_error


def test_an_acknowledge_without_an_answer_says_arm_is_unreachable_and_one_answered_that_it_is_back(
        server, settings, credential):
    arm = Reach("arm")
    unreachable = nowhere(settings)
    down = Acknowledger(unreachable, credential, lambda *_: None, arm)
    try:
        assert down.post("/subscriptions/s/x/acknowledge?api-version=2025-11-01")[0] == "failed"
    finally:
        down.close()
    assert not arm.reachable and arm.last_error.startswith("acknowledging a scheduled event")
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["db-5"]})
    up = Acknowledger(settings, credential, lambda *_: None, arm)
    try:
        assert up.post(path(server, event["EventId"]))[0] == "approved"
    finally:
        up.close()
    assert arm.reachable


def ack(server: SimulatorServer, event: dict[str, Any]) -> Ack:
    event_id = event["EventId"]
    return Ack(f"{event_id}/coordinator/approve/1", event_id, owner_path(server, event_id))


def acknowledges(server: SimulatorServer) -> list[dict[str, Any]]:
    assert server.azure is not None
    return [r for r in server.azure.api.requests() if r["route"] == "acknowledge"]


def test_two_events_of_one_scale_set_are_acknowledged_in_one_call_and_both_start(server, settings,
                                                                                 credential):
    events = [server.sim.add_event({"EventType": "Reboot", "Resources": [vm]}) for vm in ("api_0", "api_1")]
    acks = [ack(server, e) for e in events]
    assert acks[0].owner == acks[1].owner and acks[0].owner.endswith("/virtualMachineScaleSets/api")
    before = len(acknowledges(server))
    posting = acknowledger(settings, credential)
    try:
        outcomes = posting.acknowledge(acks)
    finally:
        posting.close()
    assert [(a.event_id, code) for a, code, _ in outcomes] == [(e["EventId"], "approved") for e in events]
    [call] = acknowledges(server)[before:]
    assert call["path"].lower().endswith("/virtualmachinescalesets/api/providers/microsoft.maintenance/"
                                         "scheduledevents")
    assert call["event_ids"] == [e["EventId"] for e in events] and call["status"] == 200
    started = {a["EventId"] for a in server.sim.approvals() if a["started"] and a["via"] == "arm"}
    assert started == {e["EventId"] for e in events}


def test_a_list_with_an_event_no_longer_the_resources_is_acknowledged_event_by_event(
        server, settings, credential):
    """Azure's spec leaves open what the list form does with one bad EventId (the simulator refuses
    the whole list): each event then gets its own answer."""
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["api_0"]})
    gone = Ack("G/coordinator/approve/1", "00000000-0000-4000-8000-00000000dead",
               ack(server, event).owner + "/providers/Microsoft.Maintenance/scheduledevents/"
               "00000000-0000-4000-8000-00000000dead")
    posting = acknowledger(settings, credential)
    try:
        outcomes = posting.acknowledge([ack(server, event), gone])
    finally:
        posting.close()
    assert [code for _, code, _ in outcomes] == ["approved", "not-found"]
    assert [r["status"] for r in acknowledges(server)[-3:]] == [404, 200, 404]


def test_a_policy_403_is_reported_as_such_with_the_policys_name(server, settings, credential):
    assert server.azure is not None
    server.azure.api.faults.add({"status": 403, "code": "RequestDisallowedByPolicy",
                                 "policy": "No early maintenance", "route": "acknowledge"})
    events = [server.sim.add_event({"EventType": "Reboot", "Resources": [vm]}) for vm in ("api_0", "api_1")]
    posting = acknowledger(settings, credential)
    try:
        outcomes = posting.acknowledge([ack(server, e) for e in events])
    finally:
        posting.close()
    assert {code for _, code, _ in outcomes} == {"disallowed-by-policy"}
    reason = outcomes[0][2]
    assert reason.startswith("ARM answered 403 RequestDisallowedByPolicy: Azure Policy "
                             "'No early maintenance' (assignment 'No early maintenance' at /subscriptions/")
    assert "no role fixes that" in reason
    assert server.sim.approvals() == []


def test_a_missing_role_names_the_role_to_give(server, settings, credential):
    assert server.azure is not None
    server.azure.update_settings({"roles": {"acknowledge": False}})
    event = server.sim.add_event({"EventType": "Reboot", "Resources": ["db-5"]})
    posting = acknowledger(settings, credential)
    try:
        [(_, code, reason)] = posting.acknowledge([ack(server, event)])
    finally:
        posting.close()
    assert code == "forbidden" and reason.endswith("give the coordinator's identity the Scheduled Events "
                                                   "Contributor role")
