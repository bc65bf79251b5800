"""The webhook receiver and the Event Hubs broker down together during a scenario, then back.

The file sink keeps receiving throughout (a dead sink never blocks another); once the two come back,
each receives every transition, none lost, in outbox order.
"""

from __future__ import annotations

import json
import time

from se_forwarder.model import Kind
from se_forwarder.outbox import Outbox
from tests.eventhubs.broker import EventHubsBroker
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

EVENTS = 30  # scheduled + canceled each: 60 transitions, 30 of them during the outage


def hub_ids(broker: EventHubsBroker) -> list[str]:
    """Ids of the transitions on the hub (the agent's identity events go there too, never queued)."""
    events = [json.loads(m.message().body) for m in broker.all_messages()]
    return [e["id"] for e in events if e["type"] != Kind.IDENTITY.type]


def first_arrivals(ids: list[str]) -> list[str]:
    seen: set[str] = set()
    return [i for i in ids if not (i in seen or seen.add(i))]


def test_webhook_and_event_hubs_down_together_lose_nothing_and_keep_order(simulator, agents,
                                                                          tmp_path):
    out = tmp_path / "o.jsonl"
    with Receiver() as receiver, EventHubsBroker() as broker:
        config = tmp_path / "c.toml"
        config.write_text(
            f'[[sinks]]\ntype = "file"\npath = "{out}"\n'
            f'[[sinks]]\ntype = "webhook"\nurl = "{receiver.url}"\n'
            '[[sinks]]\ntype = "eventhubs"\neventhub = "scheduled-events"\n'
            'credential = "connection-string"\nconnection_string_env = "EH_CONN"\n')
        agent = AgentProcess(
            ["--config", str(config), "--imds-url", simulator.url,
             "--state-dir", str(tmp_path / "s"), "--poll-interval", "0.1"],
            env={"EH_CONN": broker.connection_string()}, log_path=tmp_path / "agent.log").start()
        agents.append(agent)
        sim = simulator.sim
        ids = [sim.add_event({"EventType": "Reboot"})["EventId"] for _ in range(10)]
        wait_for(lambda: len(hub_ids(broker)) == 10 and len(set(receiver.accepted_ids())) == 10,
                 timeout=40, what="the first events at both sinks")

        receiver.stop()
        broker.stop()
        for event_id in ids:
            sim.delete_event(event_id)
            time.sleep(0.02)
        ids += [sim.add_event({"EventType": "Reboot"})["EventId"] for _ in range(EVENTS - 10)]
        wait_for(lambda: len(read_jsonl(out)) == 10 + 10 + (EVENTS - 10), timeout=30,
                 what="the file sink to go on while the others are down")

        def backlog() -> dict[str, int]:
            with Outbox(tmp_path / "s", readonly=True) as box:
                return {n: box.sink_status(n).backlog for n in box.sink_names()}

        # The file sink acknowledges right after its fsynced write: wait for that, not just the line.
        wait_for(lambda: sorted(backlog().values()) == [0, 30, 30], timeout=10,
                 what="the file sink's acknowledgement and the others' backlog of 30")

        receiver.start()
        broker.start()
        for event_id in ids[10:]:
            sim.delete_event(event_id)
        expected = {f"{e}/{s}" for e in ids for s in ("scheduled", "canceled")}
        wait_for(lambda: {e["id"] for e in read_jsonl(out)} == expected, timeout=40,
                 what="every transition in the file")
        wait_for(lambda: set(receiver.accepted_ids()) == expected, timeout=60,
                 what="every transition at the webhook")
        wait_for(lambda: set(hub_ids(broker)) == expected, timeout=60,
                 what="every transition in the hub")
        assert agent.terminate() == 0
        order = [e["id"] for e in read_jsonl(out)]
        assert first_arrivals(receiver.accepted_ids()) == order
        assert first_arrivals(hub_ids(broker)) == order  # one VM: one partition key, one partition
