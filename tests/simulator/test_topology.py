"""A simulated fleet: availability sets and scale sets, each group seeing only its own events, each
VM with its own instance metadata, over real HTTP as the agents read it."""

from __future__ import annotations

import base64
import json

import pytest
import requests
from asn1crypto import cms

from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.topology import Topology, TopologyError

FLEET = Topology.build(
    availability_sets=[{"name": "web", "vms": 6, "fault_domains": 3, "tags": {"tier": "web"}}],
    scale_sets=[{"name": "api", "vms": 4, "zones": ["1", "2"]}],
)
HEADERS = {"Metadata": "true"}


def document(server: SimulatorServer, vm: str) -> dict:
    r = requests.get(f"{server.vm_url(vm)}/metadata/scheduledevents", params={"api-version": "2020-07-01"},
                     headers=HEADERS, timeout=5)
    assert r.status_code == 200
    return r.json()


def compute(server: SimulatorServer, vm: str) -> dict:
    r = requests.get(f"{server.vm_url(vm)}/metadata/instance/compute", params={"api-version": "2021-02-01"},
                     headers=HEADERS, timeout=5)
    assert r.status_code == 200
    return r.json()


def test_an_event_is_seen_by_every_vm_of_its_group_and_by_no_other():
    with SimulatorServer(topology=FLEET) as server:
        assert server.sim.vm_names == FLEET.vm_names
        web = server.sim.add_event({"EventType": "Reboot", "Resources": ["web-2"]})["EventId"]
        api = server.sim.add_event({"EventType": "Redeploy", "Resources": ["api_1"]})["EventId"]
        for vm in [f"web-{i}" for i in range(6)]:
            assert [e["EventId"] for e in document(server, vm)["Events"]] == [web]
        for vm in [f"api_{i}" for i in range(4)]:
            assert [e["EventId"] for e in document(server, vm)["Events"]] == [api]


def test_each_group_has_its_own_incarnation_that_moves_only_when_its_events_change():
    with SimulatorServer(topology=FLEET) as server:
        web0, api0 = document(server, "web-0")["DocumentIncarnation"], document(server, "api_0")[
            "DocumentIncarnation"]
        server.sim.add_event({"EventType": "Reboot", "Resources": ["web-1"]})
        assert document(server, "web-3")["DocumentIncarnation"] == web0 + 1
        assert document(server, "web-0")["DocumentIncarnation"] == web0 + 1  # the same for the group
        assert document(server, "api_0")["DocumentIncarnation"] == api0  # nothing changed for it


def test_each_vm_has_its_own_fault_domain_zone_and_scale_set_in_its_instance_metadata():
    with SimulatorServer(topology=FLEET) as server:
        domains = [compute(server, f"web-{i}")["platformFaultDomain"] for i in range(6)]
        assert domains == ["0", "1", "2", "0", "1", "2"]
        web = compute(server, "web-4")
        assert (web["name"], web["zone"], web["vmScaleSetName"]) == ("web-4", "", "")
        assert {"name": "tier", "value": "web"} in web["tagsList"]
        assert web["resourceId"].endswith("/virtualMachines/web-4")
        zones = [compute(server, f"api_{i}")["zone"] for i in range(4)]
        assert zones == ["1", "2", "1", "2"]
        api = compute(server, "api_3")
        assert api["vmScaleSetName"] == "api" and api["placementGroupId"]
        assert api["resourceId"].endswith("/virtualMachineScaleSets/api/virtualMachines/3")
        assert len({compute(server, f"api_{i}")["vmId"] for i in range(4)}) == 4


def test_a_standalone_vm_is_a_group_of_its_own_with_its_zone_and_tags_and_no_set():
    fleet = Topology.build(availability_sets=[{"name": "web", "vms": 2}],
                           standalone=[{"name": "db", "zone": "3", "tags": {"tier": "db"}}])
    with SimulatorServer(topology=fleet) as server:
        assert server.sim.vm_names == ("web-0", "web-1", "db")
        own = server.sim.add_event({"EventType": "Freeze", "Resources": ["db"]})["EventId"]
        web = server.sim.add_event({"EventType": "Reboot", "Resources": ["web-0"]})["EventId"]
        assert [e["EventId"] for e in document(server, "db")["Events"]] == [own]
        assert [e["EventId"] for e in document(server, "web-1")["Events"]] == [web]
        db = compute(server, "db")
        assert (db["zone"], db["vmScaleSetName"], db["placementGroupId"]) == ("3", "", "")
        assert {"name": "tier", "value": "db"} in db["tagsList"]
        described = requests.get(f"{server.url}/control/topology", timeout=5).json()
        assert {"name": "db", "kind": "standalone", "vms": ["db"], "agentless": []} in described["groups"]


def test_a_vm_cannot_approve_an_event_its_group_does_not_see():
    with SimulatorServer(topology=FLEET) as server:
        event_id = server.sim.add_event({"EventType": "Reboot", "Resources": ["web-0"]})["EventId"]
        body = {"StartRequests": [{"EventId": event_id}]}
        outside = requests.post(f"{server.vm_url('api_0')}/metadata/scheduledevents",
                                params={"api-version": "2020-07-01"}, headers=HEADERS, json=body, timeout=5)
        assert outside.status_code == 400
        inside = requests.post(f"{server.vm_url('web-5')}/metadata/scheduledevents",
                               params={"api-version": "2020-07-01"}, headers=HEADERS, json=body, timeout=5)
        assert inside.status_code == 200
        assert [(a["EventId"], a["vm"], a["started"]) for a in server.sim.approvals()] == [
            (event_id, "api_0", False), (event_id, "web-5", True)]


def test_the_control_api_describes_the_topology():
    with SimulatorServer(topology=FLEET) as server:
        described = requests.get(f"{server.url}/control/topology", timeout=5).json()
        assert [g["name"] for g in described["groups"]] == ["web", "api"]
        assert described["vms"]["api_1"]["zone"] == "2"


def test_without_a_topology_every_vm_sees_the_shared_list_as_before():
    with SimulatorServer(vm_names=("a", "b")) as server:
        event_id = server.sim.add_event({"Resources": ["a"]})["EventId"]
        assert [e["EventId"] for e in document(server, "b")["Events"]] == [event_id]
        assert compute(server, "b")["platformFaultDomain"] == "1"
        assert requests.get(f"{server.url}/control/topology", timeout=5).json() is None


@pytest.mark.parametrize("data, named", [
    ({}, "at least one"),
    ({"availability_sets": [{"name": "a", "vms": 0}]}, "vms"),
    ({"availability_sets": [{"name": "a", "vms": 2, "colour": "red"}]}, "'colour'"),
    ({"scale_sets": [{"name": "s", "vms": 2, "zones": "1"}]}, "zones"),
    ({"standalone": [{"name": "db", "zone": 1}]}, "standalone\\[0\\].zone"),
    ({"standalone": [{"name": "db", "vms": 2}]}, "'vms'"),
    ({"standalone": [{"name": "db"}], "availability_sets": [{"name": "a", "vms": ["db"]}]}, "two groups"),
    ({"availability_sets": [{"name": "a", "vms": ["x"]}, {"name": "b", "vms": ["x"]}]}, "two groups"),
])
def test_a_bad_topology_names_the_problem(data, named):
    with pytest.raises(TopologyError, match=named):
        Topology.from_mapping(data)


def test_simulate_takes_a_topology_file(tmp_path, run_cli):
    path = tmp_path / "fleet.toml"
    path.write_text('[[availability_sets]]\nname = "web"\nvms = 2\n')
    result = run_cli("--topology", str(path), "--port", "0", "--vms", "a,b")
    assert result.returncode == 2 and "not both" in result.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[[scale_sets]]\nname = 1\n")
    result = run_cli("--topology", str(bad), "--port", "0")
    assert result.returncode == 2 and "name" in result.stderr


def test_a_group_can_live_in_a_subscription_of_its_own_in_metadata_and_attested_documents():
    other = "99999999-8888-7777-6666-555555555555"
    fleet = Topology.build(availability_sets=[{"name": "web", "vms": 2}],
                           scale_sets=[{"name": "api", "vms": 2, "subscription": other.upper()}])
    with SimulatorServer(topology=fleet) as server:
        api, web = compute(server, "api_1"), compute(server, "web-1")
        assert api["subscriptionId"] == other and api["resourceId"].startswith(f"/subscriptions/{other}/")
        assert web["subscriptionId"] != other
        reply = requests.get(f"{server.vm_url('api_1')}/metadata/attested/document",
                             params={"api-version": "2021-02-01", "nonce": "1234567890"}, headers=HEADERS,
                             timeout=10).json()
        signed = cms.ContentInfo.load(base64.b64decode(reply["signature"]))["content"]
        assert json.loads(signed["encap_content_info"]["content"].native)["subscriptionId"] == other


def test_a_subscription_that_is_not_a_guid_is_one_line_naming_it():
    with pytest.raises(TopologyError, match=r"scale_sets\[0\]\.subscription: .prod. is not a"):
        Topology.build(scale_sets=[{"name": "api", "vms": 1, "subscription": "prod"}])
