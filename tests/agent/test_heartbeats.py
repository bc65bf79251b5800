"""Heartbeats: a sign of life for sinks with heartbeat_interval, never stored, never in the way.

The agent is a real subprocess; the sinks are a file and a real webhook receiver.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime

from se_forwarder import __version__
from se_forwarder.outbox import Outbox
from se_forwarder.simulator.wire import vm_id_for
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.config import write_config
from tests.support.receiver import Receiver, Reply
from tests.support.waiting import wait_for

HEARTBEAT = "com.azure.scheduledevents.heartbeat"


def heartbeats(path):
    return [e for e in read_jsonl(path) if e["type"] == HEARTBEAT]


def test_a_sink_with_heartbeat_interval_gets_one_at_start_and_then_at_that_interval(
        simulator, agents, tmp_path):
    event_id = simulator.sim.add_event({"EventType": "Reboot"})["EventId"]
    beats, plain = tmp_path / "beats.jsonl", tmp_path / "plain.jsonl"
    cfg = write_config(tmp_path / "agent.toml",
                       [{"type": "file", "path": str(beats), "heartbeat_interval": 1},
                        {"type": "file", "path": str(plain)}],
                       imds={"url": simulator.url, "poll_interval": 0.2},
                       state={"dir": str(tmp_path / "state")}, vm={"tags": ["environment"]})
    began = time.time()
    agents.append(AgentProcess(["--config", str(cfg)], log_path=tmp_path / "agent.log").start())
    wait_for(lambda: len(heartbeats(beats)) >= 4, timeout=15, what="four heartbeats")
    sent = heartbeats(beats)
    first, last = sent[0], sent[-1]
    vm_id = vm_id_for("vm0")
    assert re.fullmatch(rf"heartbeat/{vm_id}/\d+", last["id"])
    assert abs(int(first["id"].rsplit("/", 1)[1]) - began) < 5  # one at start
    stamps = [datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp() for e in sent]
    assert all(0.5 < b - a < 2.5 for a, b in zip(stamps, stamps[1:], strict=False)), stamps
    assert (last["subject"], last["vmid"]) == (vm_id, vm_id)
    assert last["source"].endswith("/virtualMachines/vm0")
    data = last["data"]
    assert set(data) == {"AgentVersion", "HeartbeatInterval", "LastPollUtc", "DocumentIncarnation",
                         "Events", "EnrichmentComplete", "Backlog", "Health", "Vm"}
    assert data["AgentVersion"] == __version__ and data["HeartbeatInterval"] == 1
    assert abs(datetime.fromisoformat(data["LastPollUtc"].replace("Z", "+00:00")).timestamp()
               - stamps[-1]) < 2
    assert data["DocumentIncarnation"] == simulator.sim.incarnation
    assert data["Events"] == [{"EventId": event_id, "EventStatus": "Scheduled", "EventType": "Reboot"}]
    assert data["EnrichmentComplete"] is True
    assert data["Health"] is None  # no [health] probes configured
    assert data["Backlog"] == {f"file:{beats}": 0, f"file:{plain}": 0}
    assert data["Vm"]["vmId"] == vm_id and data["Vm"]["tags"] == {"environment": "simulator"}
    assert heartbeats(plain) == []  # off by default
    with Outbox(tmp_path / "state", readonly=True) as box:
        assert all(e.ce_type != HEARTBEAT for e in box.all_events())  # never in the outbox


def test_a_webhook_that_is_down_skips_heartbeats_and_its_backlog_keeps_its_batch_and_order(
        simulator, agents, tmp_path):
    down = threading.Event()
    with Receiver() as receiver:
        receiver.respond_with(lambda request: Reply(503) if down.is_set() else None)
        cfg = write_config(tmp_path / "agent.toml",
                           [{"type": "webhook", "url": receiver.url, "mode": "batch",
                             "heartbeat_interval": 1}],
                           imds={"url": simulator.url, "poll_interval": 0.2},
                           state={"dir": str(tmp_path / "state")})
        agents.append(AgentProcess(["--config", str(cfg)], log_path=tmp_path / "agent.log").start())
        wait_for(lambda: any(e.get_type() == HEARTBEAT for r in receiver.accepted() for e in r.events),
                 what="the heartbeat at start")
        down.set()
        outage_began = len(receiver.posts())
        ids = [simulator.sim.add_event({"EventType": "Reboot"})["EventId"] for _ in range(3)]
        wait_for(lambda: len(receiver.posts()) - outage_began >= 3, timeout=20,
                 what="three refused deliveries")
        time.sleep(2.5)  # heartbeats fall due meanwhile, more than once
        during = receiver.posts()[outage_began:]
        down.clear()
        wait_for(lambda: {f"{i}/scheduled" for i in ids} <= set(receiver.accepted_ids()), timeout=40,
                 what="the backlog after the outage")
        wait_for(lambda: any(e.get_type() == HEARTBEAT for r in receiver.accepted()[-3:]
                             for e in r.events), timeout=10, what="heartbeats again")
    assert all(e.get_type() != HEARTBEAT for r in during for e in r.events), \
        "a sink that is down gets no heartbeats"
    assert len({r.webhook_id for r in during}) == 1, "every retry of the batch kept its webhook-id"
    after = [r for r in receiver.accepted() if r.at >= during[-1].at]
    # The first delivery after the outage is the refused batch itself (same webhook-id, same
    # events): no heartbeat went before it or into it; then the rest in outbox order.
    assert (after[0].webhook_id, after[0].ids) == (during[0].webhook_id, during[0].ids)
    transitions = [i for r in after for i in r.ids if not i.startswith("heartbeat/")]
    assert transitions[:3] == [f"{i}/scheduled" for i in ids]
