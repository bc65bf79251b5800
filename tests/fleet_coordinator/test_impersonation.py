"""Attacks by one compromised VM on what the coordinator believes of the others (issue 24).

The fleet of test_rolling.py (the simulator, one agent subprocess per VM signing its reports, the
Event Hubs broker, Azurite blob and queue) and one live ``coordinator run`` with the simulator's CA
as its attestation anchors and signed reports required (the default), shared by the module.

A Freeze that every web VM sees lets the coordinator learn the availability set first. The
attacker is this test process holding what root on web-5 holds: the agents' Event Hubs send
connection string, web-5's own identity key (read from its agent's state directory) and web-5's
attested documents (fetched from the simulator's IMDS for web-5). Each test runs one attack of the
security review, then checks that the simulator's own record of StartRequests kept every budget
(never two VMs of a group or zone Started at once, min_healthy between them, as test_rolling.py
checks), and that the forgery was counted.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.approvals import signing
from se_forwarder.identity.attested import nonce_for
from tests.azurite import needs_blob_and_queue
from tests.support.waiting import wait_for

from .fleet import (
    ECHO_TIMEOUT,
    HEARTBEAT_TIMEOUT,
    MIN_HEALTHY,
    NOTICE,
    STARTED,
    Coordinator,
    Fleet,
    Timeline,
    shut_down,
)

pytestmark = [
    pytest.mark.slow,
    needs_blob_and_queue,
]

ATTACKER = "web-5"
WEB = [f"web-{i}" for i in range(6)]
ZONES = {"api_0": "1", "api_1": "2", "api_2": "1", "api_3": "2"}
PREFIX = "com.azure.scheduledevents."


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


class Attacker:
    """Root on web-5: the hub's send right, web-5's identity key and its attested documents."""

    def __init__(self, fleet: Fleet) -> None:
        from azure.eventhub import EventHubProducerClient

        self.fleet = fleet
        self.producer = EventHubProducerClient.from_connection_string(fleet.agent_env()["EH_CONN"])
        key_file = fleet.base / "agents" / ATTACKER / "state" / "identity.key"
        self.key = signing.load_private_key(key_file.read_bytes(), str(key_file))
        self.vm = self.instance(ATTACKER)

    def instance(self, name: str) -> dict[str, Any]:
        """What the VM's own agent sends as ``data.Vm`` (its instance metadata)."""
        return self.fleet.instance(name)

    def attested(self, name: str, nonce: str) -> dict[str, str]:
        url = (self.fleet.server.vm_url(name)
               + f"/metadata/attested/document?api-version=2021-02-01&nonce={nonce}")
        return requests.get(url, headers={"Metadata": "true"}, timeout=10, proxies={"http": ""}).json()

    def publish(self, *events: dict[str, Any]) -> None:
        from azure.eventhub import EventData

        batch = self.producer.create_batch()
        for event in events:
            data = EventData(json.dumps(event, separators=(",", ":")))
            data.content_type = "application/cloudevents+json"
            batch.add(data)
        self.producer.send_batch(batch)

    def signed(self, event: dict[str, Any]) -> dict[str, Any]:
        return signing.sign(event, self.key)

    def close(self) -> None:
        self.producer.close()


def report(kind: str, vm: dict[str, Any], event_id: str, t: float, resources: list[str],
           **data: Any) -> dict[str, Any]:
    status = "Started" if kind in ("started", "completed") else "Scheduled"
    return {"specversion": "1.0", "type": PREFIX + kind, "id": f"{event_id}/{kind}/{uuid.uuid4()}",
            "source": vm["resourceId"], "subject": event_id, "time": iso(t),
            "datacontenttype": "application/json", "eventtype": "Reboot", "eventstatus": status,
            "vmid": vm["vmId"],
            "data": {"EventId": event_id, "EventType": "Reboot", "ResourceType": "VirtualMachine",
                     "Resources": resources, "EventStatus": status, "NotBefore": "", "Description": "",
                     "EventSource": "Platform", "DurationInSeconds": -1, "NotBeforeUtc": None, "Vm": vm,
                     **data}}


def heartbeat(vm: dict[str, Any], t: float, events: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    listed = [{"EventId": e, "EventStatus": s, "EventType": "Reboot"} for e, s in events]
    return {"specversion": "1.0", "type": PREFIX + "heartbeat",
            "id": f"heartbeat/{vm['vmId']}/{uuid.uuid4()}",
            "source": vm["resourceId"], "subject": vm["vmId"], "time": iso(t),
            "datacontenttype": "application/json", "vmid": vm["vmId"],
            "data": {"AgentVersion": "0.1.0", "HeartbeatInterval": 1, "LastPollUtc": iso(t),
                     "DocumentIncarnation": 1, "Events": listed,
                     "EnrichmentComplete": True, "Backlog": {}, "Vm": vm}}


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("impersonation")
    fleet = Fleet(base)
    timeline = Timeline()
    fleet.server.sim.subscribe(timeline)
    live: Coordinator | None = None
    attacker = None
    try:
        fleet.start()
        live = fleet.coordinator("live").start()
        wait_for(live.ready, 60, "the live coordinator to lead")
        wait_for(lambda: live.get("/v1/status")["identities"]["registered"] == 10
                 and live.get("/v1/status")["fleet"]["watched"] == 10, 90,
                 "every agent registered and watched")
        # a Freeze (not managed) for web-5 that every web VM sees: the coordinator learns the set
        fleet.server.sim.add_event({"EventType": "Freeze", "Resources": [ATTACKER],
                                    "NotBeforeInSeconds": NOTICE})
        wait_for(lambda: any(g["size"] == 6 for g in live.get("/v1/groups")), 60, "the web set to be learned")
        attacker = Attacker(fleet)
        yield {"fleet": fleet, "live": live, "attacker": attacker, "timeline": timeline, "events": {}}
    finally:
        shut_down(fleet, live, closing=attacker)


def add(scene: dict[str, Any], *vms: str) -> str:
    body = {"EventType": "Reboot", "Resources": list(vms), "NotBeforeInSeconds": NOTICE,
            "StartedSeconds": STARTED}
    event_id = str(scene["fleet"].server.sim.add_event(body)["EventId"])
    scene["events"][event_id] = vms
    return event_id


def refused(live: Coordinator) -> dict[str, int]:
    return dict(live.get("/v1/status", decisions="0")["service"]["refused"])


def counted(live: Coordinator, before: dict[str, int], code: str, more: int = 1) -> None:
    wait_for(lambda: refused(live)[code] >= before.get(code, 0) + more, 30,
             f"{more} report(s) refused as {code}")


def pending(live: Coordinator, event_id: str) -> dict[str, Any] | None:
    return next((p for p in live.get("/v1/status")["pending"] if p["eventId"] == event_id), None)


def within_every_budget(scene: dict[str, Any]) -> None:
    """The simulator's record: in a group, and in a zone, never two Started at once, and each next
    start min_healthy after the previous completion (test_rolling.py's checks)."""
    timeline, events = scene["timeline"], scene["events"]
    starts = scene["fleet"].starts()
    scopes: dict[str, list[tuple[float, float, str]]] = {}
    for event_id, vms in events.items():
        if event_id not in timeline.started:
            continue
        end = timeline.completed.get(event_id, float("inf"))
        for vm in vms:
            for scope in ("web" if vm in WEB else "api", f"zone-{ZONES[vm]}" if vm in ZONES else None):
                if scope is not None:
                    scopes.setdefault(scope, []).append((timeline.started[event_id], end, event_id))
    for scope, spans in scopes.items():
        spans = sorted(set(spans))
        for (_s1, end1, e1), (start2, _e2, e2) in zip(spans, spans[1:], strict=False):
            assert start2 >= end1 + MIN_HEALTHY - 0.2, f"{scope}: {e2} started while {e1} was down"
    for event_id, vms in events.items():
        if event_id in starts:
            assert len(vms) == 1, f"{event_id} of {vms} was approved early: it can never fit a budget of 1"


def test_every_agent_registered_and_its_reports_verify(scene):
    live = scene["live"]
    status = live.get("/v1/status")
    assert status["identities"]["registered"] == 10 and status["identities"]["rekeyed"] == []
    metrics = requests.get(f"{live.url}/metrics", timeout=10, proxies={"http": ""}).text
    assert 'se_forwarder_coordinator_folded_total{type="heartbeat"}' in metrics
    assert 'se_forwarder_coordinator_refused_total{reason="unsigned"} 0.0' in metrics


def test_a_heartbeat_for_a_down_peer_keeps_nothing_watched(scene):
    fleet, live, attacker = scene["fleet"], scene["live"], scene["attacker"]
    victim = attacker.instance("web-4")
    fleet.agents["web-4"].kill()
    wait_for(lambda: any(u["name"] == "web-4" for u in live.get("/v1/status")["unwatched"]), 30,
             "web-4 to be not watched")
    before = refused(live)
    far = time.time() + 86400 * 365 * 70  # dated 2099
    as_itself = {**heartbeat(attacker.vm, far), "data": {**heartbeat(victim, far)["data"]}}
    attacker.publish(attacker.signed(heartbeat(victim, far)), heartbeat(victim, far),
                     attacker.signed(as_itself))
    event_id = add(scene, "web-0")
    wait_for(lambda: (pending(live, event_id) or {}).get("reasonCode") == "budget", 60,
             "web-0's event to wait for the group budget web-4 holds")
    counted(live, before, "bad-signature")
    counted(live, before, "unsigned")
    counted(live, before, "wrong-vm")
    time.sleep(HEARTBEAT_TIMEOUT / 2)
    assert fleet.requests_for(event_id) == [] and pending(live, event_id)["reasonCode"] == "budget"
    fleet.start_agent("web-4")
    wait_for(lambda: fleet.starts().get(event_id), 90, "web-0's event to be approved once web-4 is back")
    wait_for(lambda: event_id in scene["timeline"].completed, 60, "web-0's event to complete")
    within_every_budget(scene)


def test_completed_and_approved_for_a_peers_events_end_nothing_and_block_nothing(scene):
    fleet, live, attacker = scene["fleet"], scene["live"], scene["attacker"]
    first = add(scene, "web-1")
    wait_for(lambda: first in scene["timeline"].started, 60, "web-1's event to be approved and Started")
    second = add(scene, "web-2")  # after: two events with one NotBefore are taken in EventId order
    before = refused(live)
    now = time.time()
    web1 = attacker.instance("web-1")
    attacker.publish(
        attacker.signed(report("completed", attacker.vm, first, now - 2 * 86400, ["web-1"])),  # as itself
        attacker.signed(report("approved", attacker.vm, second, now, ["web-2"], ApprovedBy="cli")),
        attacker.signed(report("completed", web1, first, now, ["web-1"])))  # in web-1's name
    counted(live, before, "bad-signature")
    wait_for(lambda: second in scene["timeline"].completed and first in scene["timeline"].completed, 120,
             "web-1's event to complete, then web-2's to be approved and roll")
    assert [d for d in fleet.decisions("live") if d["data"]["EventId"] == second
            and d["data"]["Decision"] == "approve"], "the fake echo kept the coordinator from approving"
    assert scene["timeline"].started[second] >= scene["timeline"].completed[first] + MIN_HEALTHY - 0.2
    within_every_budget(scene)


def test_a_shrunken_resources_list_does_not_shrink_the_event(scene):
    fleet, live, attacker = scene["fleet"], scene["live"], scene["attacker"]
    both = add(scene, "web-2", "web-3")  # two VMs of a group whose budget is 1: never early
    wait_for(lambda: pending(live, both), 60, "the coordinator to see the two-VM event")
    attacker.publish(attacker.signed(report("scheduled", attacker.vm, both, time.time() + 50, ["web-2"])))
    time.sleep(ECHO_TIMEOUT / 2)
    waiting = pending(live, both)
    assert sorted(waiting["resources"]) == ["web-2", "web-3"] and waiting["reasonCode"] == "budget"
    assert fleet.requests_for(both) == []
    within_every_budget(scene)


def test_fifty_fake_vms_add_nothing_to_the_fleet(scene):
    live, attacker = scene["live"], scene["attacker"]
    before = refused(live)
    fakes = []
    for i in range(50):
        fake = {**attacker.vm, "vmId": str(uuid.uuid4()), "name": f"fake-{i}", "zone": "1",
                "resourceId": attacker.vm["resourceId"].rsplit("/", 1)[0] + f"/fake-{i}"}
        fakes.append(attacker.signed(heartbeat(fake, time.time() + 86400 * 365 * 70)))  # its own key
        claimed = {**heartbeat(attacker.vm, time.time()), "data": heartbeat(fake, time.time())["data"]}
        fakes.append(attacker.signed(claimed))
    attacker.publish(*fakes)
    counted(live, before, "wrong-vm", 50)
    status = live.get("/v1/status")
    assert status["fleet"]["vms"] == 10 and status["service"]["waiting"] <= 50
    assert not any(v["name"].startswith("fake-") for g in live.get("/v1/groups") for v in g["vms"])
    within_every_budget(scene)


def test_a_fake_topology_for_a_peer_is_refused_and_a_stolen_name_is_a_conflict(scene):
    fleet, live, attacker = scene["fleet"], scene["live"], scene["attacker"]
    before = refused(live)
    moved = {**attacker.instance("api_0"), "zone": "2", "platformFaultDomain": "9"}
    attacker.publish(attacker.signed(heartbeat(moved, time.time() + 50)))
    counted(live, before, "bad-signature")
    as_web0 = {**attacker.vm, "name": "web-0"}
    attacker.publish(attacker.signed(heartbeat(as_web0, time.time() + 50)))  # itself, claiming web-0's name
    conflict = wait_for(lambda: live.get("/v1/status")["nameConflicts"], 30, "the name conflict to show")
    assert conflict[0]["name"] == "web-0" and len(conflict[0]["vms"]) == 2
    event_id = add(scene, "web-0")
    wait_for(lambda: pending(live, event_id), 60, "the coordinator to see web-0's event")
    groups = {v["name"]: v for g in live.get("/v1/groups") for v in g["vms"]}
    assert groups["web-0"]["state"] == "name-conflict" and groups["api_0"]["zone"] == "1"
    assert fleet.requests_for(event_id) == []
    attacker.publish(attacker.signed(heartbeat(attacker.vm, time.time() + 55)))  # its own name again
    wait_for(lambda: not live.get("/v1/status")["nameConflicts"], 30, "the conflict to end")
    wait_for(lambda: event_id in scene["timeline"].completed, 120, "web-0's event to roll after")
    within_every_budget(scene)


def test_a_replayed_registration_of_another_vm_binds_nothing(scene):
    live, attacker = scene["live"], scene["attacker"]
    web0 = attacker.instance("web-0")
    status = live.get("/v1/status")
    registered = status["identities"]["registered"]
    before = refused(live)
    key_file = scene["fleet"].base / "agents" / "web-0" / "state" / "identity.key"
    web0_key = signing.load_private_key(key_file.read_bytes(), str(key_file))
    stolen = attacker.attested("web-0", nonce_for(signing.raw_public(web0_key)))  # web-0's own document
    public = signing.public_key_line(attacker.key)
    identity = {"specversion": "1.0", "type": PREFIX + "identity", "source": web0["resourceId"],
                "id": f"identity/{web0['vmId']}/{signing.keyid(attacker.key)}/{int(time.time())}",
                "subject": web0["vmId"], "time": iso(time.time()), "datacontenttype": "application/json",
                "vmid": web0["vmId"],
                "data": {"PublicKey": public, "Nonce": nonce_for(signing.raw_public(attacker.key)),
                         "AttestedDocument": stolen, "AgentVersion": "0.1.0", "Vm": web0}}
    attacker.publish(attacker.signed(identity))
    counted(live, before, "identity-nonce")
    attacker.publish(attacker.signed(heartbeat(web0, time.time())))  # web-0's report, the attacker's key
    counted(live, before, "bad-signature")
    status = live.get("/v1/status")
    assert status["identities"]["registered"] == registered and status["identities"]["rekeyed"] == []
    within_every_budget(scene)
