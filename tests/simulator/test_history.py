"""The simulator's record of each event's life (``/control/history``): when it came and how, when it
started and why, when it went and how, over real HTTP, from the engine's own changes."""

from __future__ import annotations

from datetime import datetime

from se_forwarder.simulator import SimulatorServer
from se_forwarder.simulator.topology import Topology
from tests.support.waiting import wait_for

HEADERS = {"Metadata": "true"}
EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"


def utc(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def lives(server: SimulatorServer, http) -> dict[str, dict]:
    reply = http.get(f"{server.url}/control/history", timeout=5)
    assert reply.status_code == 200
    return {life["EventId"]: life for life in reply.json()}


def test_an_approved_event_started_when_its_vm_asked_and_completed_when_it_left(start_sim, http):
    pair = Topology.build(availability_sets=[{"name": "web", "vms": 2}])
    server = start_sim(time_scale=60.0, topology=pair)
    event_id = server.sim.add_event({"EventType": "Reboot", "Resources": ["web-1"], "NotBeforeInSeconds": 600,
                                     "StartedSeconds": 30})["EventId"]
    http.post(f"{server.vm_url('web-0')}{EVENTS}", json={"StartRequests": [{"EventId": event_id}]},
              headers=HEADERS, timeout=5)
    life = wait_for(lambda: lives(server, http)[event_id]["end"] and lives(server, http)[event_id], 10,
                    "the event to complete")
    [approval] = server.sim.approvals()
    assert (life["addedAs"], life["how"], life["approvedBy"], life["end"]) == \
        ("Scheduled", "approved", "web-0", "completed")
    assert abs(utc(life["started"]) - utc(approval["time"])) < 0.1
    assert utc(life["added"]) <= utc(life["started"]) < utc(life["ended"]) < utc(life["notBefore"])
    assert (life["EventType"], life["Resources"], life["EventSource"]) == ("Reboot", ["web-1"], "Platform")


def test_an_event_nobody_approved_started_at_its_not_before(start_sim, http):
    server = start_sim(time_scale=60.0)
    event_id = server.sim.add_event({"EventType": "Freeze", "NotBeforeInSeconds": 60, "StartedSeconds": 6})[
        "EventId"]
    life = wait_for(lambda: lives(server, http)[event_id]["end"] and lives(server, http)[event_id], 10,
                    "the Freeze to start at its NotBefore and complete")
    assert (life["how"], life["approvedBy"], life["end"]) == ("not-before", None, "completed")
    assert utc(life["started"]) >= utc(life["notBefore"])


def test_an_event_added_started_had_no_notice(start_sim, http):
    server = start_sim()
    event_id = server.sim.add_event({"EventType": "Reboot", "EventStatus": "Started"})["EventId"]
    life = lives(server, http)[event_id]
    assert (life["addedAs"], life["how"], life["notBefore"]) == ("Started", "no-notice", None)
    assert life["end"] is None
    assert life["started"] == life["added"]


def test_an_event_removed_while_scheduled_was_canceled_and_one_set_started_was_changed(start_sim, http):
    server = start_sim()
    gone = server.sim.add_event({"EventType": "Redeploy"})["EventId"]
    patched = server.sim.add_event({"EventType": "Reboot"})["EventId"]
    server.sim.delete_event(gone)
    http.patch(f"{server.url}/control/events/{patched}", json={"EventStatus": "Started"}, timeout=5)
    found = lives(server, http)
    assert (found[gone]["started"], found[gone]["end"]) == (None, "canceled")
    assert (found[patched]["how"], found[patched]["end"]) == ("changed", None)
    assert list(found) == [gone, patched]  # oldest first
