"""Budgets that hold when the coordinator's picture is late, stalled or lied to (issue 31), end to end.

Real parts: the simulator over HTTP (Azure starts each event at its NotBefore), one agent subprocess
per VM signing its reports to the Event Hubs broker, Azurite blob and queue, and ``coordinator run``
as a subprocess. The fleet is the review's: one-VM zonal scale sets ``a``, ``b`` and ``c`` in zone 1
and a scale set ``d`` of two VMs in zone 2, with budgets of one VM per group and 50% of a zone (one
VM of zone 1's three). Each test runs one failure or attack and is judged from the simulator's own
record (when each event Started and ended, and the StartRequests it took); the alerts it raises
reach a PagerDuty stand-in (tests/support/pager_receiver.py: PagerDuty cannot run here).

The attacker is this test process holding what root on ``d_0`` holds: the agents' Event Hubs send
connection string and ``d_0``'s identity key (read from its agent's state directory).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from se_forwarder.approvals import signing
from se_forwarder.simulator.topology import Topology
from tests.azurite import needs_blob_and_queue
from tests.pager.conftest import ROUTING_KEY
from tests.support.pager_receiver import PagerDutyReceiver
from tests.support.waiting import wait_for

from .fleet import (
    HEARTBEAT_TIMEOUT,
    MIN_HEALTHY,
    STARTED,
    TIME_SCALE,
    Coordinator,
    Fleet,
    Timeline,
    pagerduty_notify,
    shut_down,
    utc,
)

pytestmark = [
    pytest.mark.slow,
    needs_blob_and_queue,
]

TOPOLOGY = Topology.build(scale_sets=[
    {"name": "a", "vms": 1, "zones": ["1"]}, {"name": "b", "vms": 1, "zones": ["1"]},
    {"name": "c", "vms": 1, "zones": ["1"]}, {"name": "d", "vms": 2, "zones": ["2"]},
])
ZONE_1 = ("a_0", "b_0", "c_0")
BUDGETS = (("group", 1), ("zone", "50%"))
MAX_LAG = 3.0
ATTACKER = "d_0"
AHEAD = 15.0  # s the attacker dates its heartbeats ahead (within the 1 min clamp): see Attacker
PREFIX = "com.azure.scheduledevents."


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


class Attacker:
    """Root on d_0: the hub's send right and d_0's identity key; it sends signed heartbeats of d_0
    whose ``data.Vm`` it chooses, every 0.5 s and dated ``AHEAD`` seconds ahead, so that they stay
    d_0's newest word while it sends (even with this process held up that long by a loaded machine)
    and for ``AHEAD`` seconds after it stops."""

    def __init__(self, fleet: Fleet) -> None:
        from azure.eventhub import EventHubProducerClient

        self.fleet = fleet
        self.producer = EventHubProducerClient.from_connection_string(fleet.agent_env()["EH_CONN"])
        key_file = fleet.base / "agents" / ATTACKER / "state" / "identity.key"
        self.key = signing.load_private_key(key_file.read_bytes(), str(key_file))
        self.vm = fleet.instance(ATTACKER)
        self._claim: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def claim(self, **changes: str) -> None:
        """From now on d_0's heartbeats claim these changes of its instance metadata."""
        self._claim = {**self.vm, **changes}

    def quiet(self) -> None:
        self._claim = None

    def _run(self) -> None:
        from azure.eventhub import EventData

        while not self._stop.wait(0.5):
            vm = self._claim
            if vm is None:
                continue
            t = time.time() + AHEAD
            event = {"specversion": "1.0", "type": PREFIX + "heartbeat", "id": f"heartbeat/{uuid.uuid4()}",
                     "source": vm["resourceId"], "subject": self.vm["vmId"], "time": iso(t),
                     "datacontenttype": "application/json", "vmid": self.vm["vmId"],
                     "data": {"AgentVersion": "0.1.0", "HeartbeatInterval": 1, "LastPollUtc": iso(t),
                              "DocumentIncarnation": 1, "Events": [], "EnrichmentComplete": True,
                              "Backlog": {}, "Vm": vm}}
            batch = self.producer.create_batch(partition_key=self.vm["vmId"])
            batch.add(EventData(json.dumps(signing.sign(event, self.key), separators=(",", ":"))))
            self.producer.send_batch(batch)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.producer.close()


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("budgets")
    fleet = Fleet(base, topology=TOPOLOGY)
    timeline = Timeline()
    fleet.server.sim.subscribe(timeline)
    pager = PagerDutyReceiver(ROUTING_KEY).start()
    scene: dict[str, Any] = {"fleet": fleet, "timeline": timeline, "coordinators": [], "pager": pager}
    attacker = None
    try:
        fleet.start()
        live = start(scene)
        wait_for(lambda: live.get("/v1/status")["identities"]["registered"] == 5
                 and live.get("/v1/status")["fleet"]["watched"] == 5, 90,
                 "every agent registered and watched")
        scene["attacker"] = attacker = Attacker(fleet)
        yield scene
    finally:
        shut_down(fleet, *scene["coordinators"], closing=attacker)
        pager.stop()


def launch(scene: dict[str, Any]) -> Coordinator:
    """The live coordinator started (again): the scene's ``live`` from now on."""
    live = scene["fleet"].coordinator("live", budgets=BUDGETS, max_lag=f"{MAX_LAG:g}s",
                                      extra=pagerduty_notify(scene["pager"].url))
    live.env["PD_ROUTING_KEY"] = ROUTING_KEY
    scene["live"] = live = live.start()
    scene["coordinators"].append(live)
    return live


def start(scene: dict[str, Any]) -> Coordinator:
    """The live coordinator (again), once it acts."""
    live = launch(scene)
    wait_for(live.ready, 90, "the live coordinator to lead and act")
    return live


def pending(live: Coordinator, event_id: str) -> dict[str, Any] | None:
    return next((p for p in live.get("/v1/status")["pending"] if p["eventId"] == event_id), None)


def vm_state(live: Coordinator, name: str) -> str:
    return next(v["state"] for g in live.get("/v1/groups") for v in g["vms"] if v["name"] == name)


def healthz(live: Coordinator) -> requests.Response:
    return requests.get(f"{live.url}/healthz", timeout=10, proxies={"http": ""})


def paged(scene: dict[str, Any], alert: str) -> bool:
    """The alert ``alert`` is open at the PagerDuty stand-in."""
    return f"se-forwarder/live/{alert}" in scene["pager"].alerts.open


def metric(live: Coordinator, name: str) -> float:
    text = requests.get(f"{live.url}/metrics", timeout=10, proxies={"http": ""}).text
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))


def never_two_of_zone_1_down_at_once(scene: dict[str, Any], events: dict[str, str]) -> None:
    """The simulator's record: of zone 1 (budget 1), each next event started min_healthy after the
    previous one ended."""
    timeline = scene["timeline"]
    spans = sorted((timeline.started[e], timeline.completed.get(e, float("inf")), vm)
                   for vm, e in events.items() if e in timeline.started)
    for (_s1, end1, vm1), (start2, _e2, vm2) in zip(spans, spans[1:], strict=False):
        assert start2 >= end1 + MIN_HEALTHY - 0.2, f"{vm2} started while {vm1} was down or within min_healthy"


def test_a_held_reboot_due_while_its_agent_is_stopped_keeps_its_zone_peer_waiting(scene):
    """The review's case: a_0's Reboot held, its agent stopped (SIGSTOP) as the VM goes down at
    NotBefore; b_0 (the same zone, budget 1) does not start until a_0's event ended plus min_healthy."""
    fleet, live, timeline = scene["fleet"], scene["live"], scene["timeline"]
    live.cli_ok("pause", "--reason", "hold a_0's Reboot before anything is approved")
    held = fleet.add("a_0", NotBeforeInSeconds=10 * TIME_SCALE, StartedSeconds=4 * TIME_SCALE)
    not_before = utc(wait_for(lambda: pending(live, held), 30, "the coordinator to see a_0's event")
                     ["notBeforeUtc"])
    live.cli_ok("hold", held, "--reason", "database primary on a_0")
    live.cli_ok("resume", "--reason", "a_0's Reboot is held")
    agent = fleet.agents["a_0"]
    assert agent.proc is not None
    time.sleep(max(0.0, not_before - 0.7 - time.time()))
    os.kill(agent.proc.pid, signal.SIGSTOP)  # it goes down with its VM and says nothing
    stopped = time.time()
    try:
        wait_for(lambda: held in timeline.started, 30, "Azure to start a_0's event at its NotBefore")
        peer = fleet.add("b_0")
        wait_for(lambda: (pending(live, peer) or {}).get("reasonCode") == "budget", 30,
                 "b_0's event to wait for the zone a_0 holds")
        assert vm_state(live, "a_0") == "due"
        assert "started by Azure (due)" in live.cli_ok("status")
        # stopped as long as it can be without being counted down for want of heartbeats
        time.sleep(max(0.0, stopped + HEARTBEAT_TIMEOUT - 1.5 - time.time()))
        assert fleet.requests_for(peer) == [] and peer not in timeline.started
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    wait_for(lambda: peer in timeline.completed, 90, "b_0's event to be approved and roll after a_0's")
    assert timeline.started[peer] >= timeline.completed[held] + MIN_HEALTHY - 0.2
    assert fleet.requests_for(held) == []  # never approved: Azure started it
    never_two_of_zone_1_down_at_once(scene, {"a_0": held, "b_0": peer})


def test_no_early_approval_while_the_fold_is_behind_the_hub_then_the_rollout_goes_on(scene):
    fleet, live, timeline = scene["fleet"], scene["live"], scene["timeline"]
    live.cli_ok("pause", "--reason", "the lag test's event waits")
    event_id = fleet.add("c_0")
    wait_for(lambda: (pending(live, event_id) or {}).get("reasonCode") == "paused", 30, "c_0's event")
    fleet.broker.stall_deliveries()  # what the agents send piles up on the hub, unread
    try:
        wait_for(lambda: "no early approval" in healthz(live).text, 30, "/healthz to say the fold is late")
        assert healthz(live).status_code == 200
        live.cli_ok("resume", "--reason", "the lag test goes on")
        wait_for(lambda: (pending(live, event_id) or {}).get("reasonCode") == "stale", 30,
                 "c_0's event to wait for the fold to catch up")
        status = live.cli_ok("status")
        assert "NO EARLY APPROVAL (the fold is late)" in status and "behind the agents' hub" in status
        time.sleep(2)
        assert fleet.requests_for(event_id) == []
    finally:
        fleet.broker.resume_deliveries()
    wait_for(lambda: event_id in timeline.completed, 60, "c_0's event to be approved once caught up")
    said = [line["message"] for line in live.logged()]
    assert len([m for m in said if m.startswith("no early approval while the fold is late")]) == 1
    assert any(m.startswith("the fold caught up with its hubs") for m in said)
    assert "no early approval" not in healthz(live).text


def test_a_vm_claiming_a_zone_does_not_grow_that_zone_s_budget(scene):
    fleet, live, attacker = scene["fleet"], scene["live"], scene["attacker"]
    attacker.claim(zone="1")
    try:
        outside = wait_for(lambda: live.get("/v1/status")["outsideInventory"], 30, "the claim to be seen")
        assert [o["name"] for o in outside] == [ATTACKER] and outside[0]["scopes"][0].endswith("/1")
        scopes = live.get("/v1/status", all="1")["scopes"]
        zone = next(s for s in scopes if s["scope"] == outside[0]["scopes"][0])
        assert (zone["size"], zone["inventory"], zone["max"]) == (4, 3, 1)  # 50% of 4 would be 2
        assert metric(live, "se_forwarder_coordinator_outside_inventory") == 1
        events = {vm: fleet.add(vm, StartedSeconds=STARTED) for vm in ("a_0", "b_0")}
        wait_for(lambda: all(e in scene["timeline"].completed for e in events.values()), 90,
                 "both zone 1 events to roll")
        assert "VMS OUTSIDE THEIR INVENTORY" in live.cli_ok("status")
    finally:
        attacker.quiet()
    never_two_of_zone_1_down_at_once(scene, events)


def test_a_copied_resource_id_holds_down_the_copier_not_the_peer_once_it_outlasts_heartbeat_timeout(scene):
    fleet, live, attacker, timeline = scene["fleet"], scene["live"], scene["attacker"], scene["timeline"]
    victim = fleet.instance("c_0")
    attacker.claim(resourceId=victim["resourceId"])
    try:
        conflict = wait_for(lambda: live.get("/v1/status")["nameConflicts"], 30, "the conflict to show")
        began = time.time()
        # young, both count down: c_0 holds zone 1's budget, so a_0 waits
        event_id = fleet.add("a_0", StartedSeconds=STARTED)
        wait_for(lambda: pending(live, event_id), 30, "the coordinator to see a_0's event")
        assert vm_state(live, "c_0") == "name-conflict"
        wait_for(lambda: event_id in timeline.started, 60, "a_0's event to go once the conflict settled")
        assert timeline.started[event_id] >= began + HEARTBEAT_TIMEOUT - 1.5
        [shown] = live.get("/v1/status")["nameConflicts"]
        assert shown["first"].startswith("c_0 (") and [h.split(" (")[0] for h in shown["held"]] == [ATTACKER]
        assert vm_state(live, ATTACKER) == "name-conflict" and vm_state(live, "c_0") != "name-conflict"
        assert len(conflict[0]["vms"]) == 2
        assert metric(live, "se_forwarder_coordinator_name_conflicts") == 2
        wait_for(lambda: paged(scene, "name-conflict"), 30, "the name-conflict alert")
    finally:
        attacker.quiet()
    wait_for(lambda: event_id in timeline.completed, 60, "a_0's event to complete")
    wait_for(lambda: not paged(scene, "name-conflict"), 60 + HEARTBEAT_TIMEOUT,
             "the alert to resolve once the copier fell silent")


def snapshot_blob(scene: dict[str, Any]) -> Any:
    from azure.storage.blob import BlobClient

    return BlobClient.from_connection_string(scene["fleet"].blob.connection_string, "coordinator",
                                             "live/snapshot.json.gz")


def generation(blob: Any) -> int:
    return generation_of(blob.download_blob().readall())


def generation_of(saved: bytes) -> int:
    """The generation a snapshot blob's seal (its last line) numbers."""
    return int(json.loads(gzip.decompress(saved).splitlines()[-1]).get("generation", 0))


def start_refused(scene: dict[str, Any]) -> tuple[Coordinator, str]:
    """The live coordinator started again, and what its /healthz says once it is unhealthy (503)."""
    live = launch(scene)
    answer = wait_for(lambda: (r := healthz(live)).status_code == 503 and r.text, 60, "/healthz to say why")
    return live, answer


def stopped_and_paged(scene: dict[str, Any], live: Coordinator) -> None:
    """It does not act, and says so to the metric and, though it does not act, to the pager."""
    assert live.get("/v1/state")["acting"] is False
    assert metric(live, "se_forwarder_coordinator_fold_gap") == 1
    wait_for(lambda: paged(scene, "fold-gap"), 30, "the fold-gap alert from the instance that does not act")


def restart_without_snapshot(scene: dict[str, Any], blob: Any) -> None:
    """What an operator does once they looked: delete the snapshot, start again (from retention);
    once it acts, the fold-gap alert is resolved."""
    scene["live"].stop()
    blob.delete_blob()
    start(scene)
    wait_for(lambda: not paged(scene, "fold-gap"), 30, "the fold-gap alert to resolve")


def test_an_older_signed_snapshot_put_back_is_refused_and_the_instance_does_not_act(scene):
    blob = snapshot_blob(scene)
    old = wait_for(lambda: blob.exists() and blob.download_blob().readall(), 30, "a snapshot")
    first = generation_of(old)  # the blob may hold a newer one already
    wait_for(lambda: generation(blob) >= first + 1, 60, "a newer snapshot")
    assert scene["live"].stop() == 0  # and it saves one more
    blob.upload_blob(old, overwrite=True)  # signed by the coordinator: only its generation is old
    live, answer = start_refused(scene)
    assert "older snapshot was put back" in answer and f"generation {first}," in answer
    stopped_and_paged(scene, live)
    errors = [line["message"] for line in live.logged() if line.get("level") == "error"]
    assert any("an older snapshot was put back, and is refused" in m for m in errors)
    restart_without_snapshot(scene, blob)


def test_a_position_older_than_the_partition_s_retained_beginning_stops_the_instance_from_acting(scene):
    fleet, blob = scene["fleet"], snapshot_blob(scene)
    wait_for(lambda: blob.exists(), 30, "a snapshot")
    assert scene["live"].stop() == 0  # a clean stop saves the snapshot with the positions it covers
    saved = json.loads(gzip.decompress(blob.download_blob().readall()).splitlines()[0])["positions"]
    partition, position = next((p, v["sequence"]) for p, v in saved.items() if not p.startswith("feed:"))
    wait_for(lambda: len(fleet.broker.messages(partition)) > position + 3, 30, "the agents to send on")
    fleet.broker.expire(partition, len(fleet.broker.messages(partition)) - 1)  # retention took the rest
    live, answer = start_refused(scene)
    assert "the fold has a gap" in answer and f"was folded up to {position}" in answer
    stopped_and_paged(scene, live)
    time.sleep(3)  # it reads on, and still does not act
    assert live.get("/v1/state")["acting"] is False
    errors = [line["message"] for line in live.logged() if line.get("level") == "error"]
    assert len([m for m in errors if m.startswith("the fold has a gap")]) == 1
    restart_without_snapshot(scene, blob)
