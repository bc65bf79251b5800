"""Event Hubs sink benchmark (not part of the test suite).

1. Throughput outbox -> hub: a backlog of CloudEvents in a real outbox, drained by the real delivery
   worker through the eventhubs sink (azure-eventhub over AMQP on loopback, via the padding relay)
   into the local qpid-proton broker of ``tests/eventhubs/broker.py``; structured and binary mode,
   each without and with the agent's Ed25519 signature on every event (docs/identity.md).
   Every event is checked to have arrived, in order, on its VM's partition.
2. Memory: the RSS of `se-forwarder run` with only a file sink, and with an Event Hubs sink loaded
   and connected (azure-eventhub + one long-lived producer), both after delivering an event.

The broker is Python and shares the machine's cores with the client, so the throughput is a floor
for what the sink does against a real hub on a LAN (where round trips, not CPU, dominate).

Run: /work/venv/bin/python bench/eventhubs_bench.py [--backlog 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from se_forwarder.approvals import signing  # noqa: E402
from se_forwarder.cloudevents import transition_rows  # noqa: E402
from se_forwarder.delivery import DeliveryWorker  # noqa: E402
from se_forwarder.model import Document, Transition, VmIdentity, parse_event  # noqa: E402
from se_forwarder.outbox import Outbox  # noqa: E402
from se_forwarder.simulator import SimulatorServer  # noqa: E402
from se_forwarder.sinks import SinkContext, eventhubs  # noqa: E402
from tests.eventhubs.broker import EventHubsBroker  # noqa: E402
from tests.support.agent import AgentProcess  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

VM = VmIdentity(
    vm_id="5b0e8c1a-0000-4000-8000-00000000be0c",
    name="vm-bench-1",
    resource_id="/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-bench-1",
)
SINK = "hub"


def record(state_dir: Path, count: int) -> list[str]:
    """``count`` scheduled transitions stored exactly as the agent stores them; their ids."""
    transitions = []
    for i in range(count):
        raw = {
            "EventId": f"bench-{i:05d}",
            "EventType": "Freeze",
            "ResourceType": "VirtualMachine",
            "Resources": [VM.name],
            "EventStatus": "Scheduled",
            "NotBefore": "Mon, 19 Sep 2033 18:29:47 GMT",
            "Description": "Host maintenance",
            "EventSource": "Platform",
            "DurationInSeconds": 9,
        }
        transitions.append(Transition("scheduled", parse_event(raw), i + 1))
    with Outbox(state_dir) as box:
        box.register_sinks([SINK])
        stored = box.record(Document(count), transition_rows(transitions, VM, datetime.now(UTC)))
    return [e.ce_id for e in stored]


def throughput(mode: str, count: int, work: Path, *, signed: bool = False) -> tuple[float, int]:
    """Events/s the delivery worker moves from the outbox to the broker; and the payload size.
    ``signed``: with the agent's identity key signing each event, as an agent's sink does."""
    state_dir = work / f"throughput-{mode}{'-signed' if signed else ''}"
    ids = record(state_dir, count)
    with EventHubsBroker() as broker:
        os.environ["BENCH_EH_CONN"] = broker.connection_string()
        options = eventhubs.validate(
            {
                "eventhub": broker.eventhub,
                "credential": "connection-string",
                "connection_string_env": "BENCH_EH_CONN",
                "mode": mode,
            },
            "sinks[0]",
        )
        key = signing.generate_private_key()
        context = SinkContext(state_dir, sign=lambda event: signing.sign(event, key)) if signed else None
        sink = eventhubs.create(SINK, options, context)
        assert sink.check() is None  # connect first: measure delivery, not the handshake
        stop = threading.Event()
        worker = DeliveryWorker(sink, state_dir, stop)
        began = time.perf_counter()
        worker.start()
        with Outbox(state_dir) as box:
            while box.sink_status(SINK).backlog:
                time.sleep(0.01)
        elapsed = time.perf_counter() - began
        stop.set()
        worker.wakeup.set()
        worker.join(10)
        got = []
        for stored in broker.all_messages():
            message = stored.message()
            got.append((message.properties or {}).get("cloudEvents_id") or json.loads(message.body)["id"])
        partitions = {m.partition for m in broker.all_messages()}
        if got != ids or len(partitions) != 1:
            raise SystemExit(f"{mode}: delivery incomplete or out of order ({len(got)}/{len(ids)})")
        size = len(next(broker.all_messages()).encoded)
    return count / elapsed, size


def agent_rss(work: Path, with_eventhubs: bool) -> float:
    """RSS (MB) of `se-forwarder run` after it delivered one event, with or without Event Hubs."""
    tag = "eventhubs" if with_eventhubs else "file"
    with SimulatorServer(etag=False) as simulator, EventHubsBroker() as broker:
        config = work / f"rss-{tag}.toml"
        text = f'[approvals]\nrules = []\n\n[[sinks]]\ntype = "file"\npath = "{work / f"rss-{tag}.jsonl"}"\n'
        if with_eventhubs:
            text += (
                '\n[[sinks]]\ntype = "eventhubs"\neventhub = "scheduled-events"\n'
                'credential = "connection-string"\nconnection_string_env = "BENCH_EH_CONN"\n'
            )
        config.write_text(text)
        agent = AgentProcess(
            [
                "--config",
                str(config),
                "--imds-url",
                simulator.url,
                "--state-dir",
                str(work / f"rss-{tag}-state"),
                "--poll-interval",
                "0.5",
            ],
            env={"BENCH_EH_CONN": broker.connection_string()},
            log_path=work / f"rss-{tag}.log",
        ).start()
        try:
            simulator.sim.add_event({"EventType": "Freeze"})
            wait_for(lambda: (work / f"rss-{tag}.jsonl").exists(), timeout=30, what="file delivery")
            if with_eventhubs:
                wait_for(lambda: broker.received_count >= 1, timeout=30, what="hub delivery")
            time.sleep(2)  # let allocations settle
            assert agent.proc is not None
            return psutil.Process(agent.proc.pid).memory_info().rss / 1e6
        finally:
            agent.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for mode, signed in (("structured", False), ("structured", True), ("binary", False),
                             ("binary", True)):
            rate, size = throughput(mode, args.backlog, work, signed=signed)
            label = f"{mode}{', signed' if signed else ''}"
            print(
                f"throughput outbox -> Event Hubs {label:<18} ({args.backlog} events of ~{size} B, "
                f"one worker, local proton broker): {rate:,.0f} events/s"
            )
        base = agent_rss(work, with_eventhubs=False)
        loaded = agent_rss(work, with_eventhubs=True)
        print(
            f"agent RSS after one delivery: file sink only {base:.1f} MB; with an Event Hubs sink "
            f"loaded and connected {loaded:.1f} MB (+{loaded - base:.1f} MB)"
        )


if __name__ == "__main__":
    main()
