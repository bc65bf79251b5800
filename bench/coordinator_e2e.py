"""The coordinator service end to end: 10,000 VMs' events through the Event Hubs broker fixture.

What runs, all on this one machine: the local AMQP broker (tests/eventhubs/broker.py, 4 partitions,
in a process of its own so that this script's publishing does not share its interpreter lock),
Azurite blob (lease, snapshot) and queue (approval messages), and ``se-forwarder coordinator run``
as a subprocess. This script plays the fleet: it publishes structured CloudEvents with the real
``EventHubProducerClient``, as 10,000 agents would.

Every VM is a registered agent and signs its reports (bench/fleet_identities.py), so the figures
include the coordinator's verification, as in production.

1. Ingest. Before the coordinator starts, the hub holds every VM's registration, then
   ``--minutes`` rounds of heartbeats from
   every VM (10,000 a round) and an earlier Freeze (not managed) reported by every VM of each
   availability set, from which the fold learns the sets. The coordinator reads the backlog from
   the start of retention; the figure is events folded per second from its first event to its
   last (from ``/v1/state``).
2. Decision latency. With the fleet watched, ``--events`` maintenance events are published, each
   reported by every VM of its availability set (10 VMs), one event per set, heartbeats going on.
   Every event fits its budget at once, so each is approved and its signed message sent to the
   affected VM's queue. Latency per event: from the moment its reports were on the hub (the
   publisher's send returned) to the coordinator's "sent approval" log line (same clock), and the
   coordinator's own figure, from the arrival of the hub batch to the queue message.
3. RSS of the coordinator process after both.

Prints figures (with the goals of issue 16 beside them); asserts nothing.

    .venv/bin/python bench/coordinator_e2e.py [--vms 10000] [--minutes 3] [--events 200]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import requests  # noqa: E402

from bench.common import end, percentile, print_figures  # noqa: E402
from bench.fleet_identities import Identities  # noqa: E402
from se_forwarder.approvals import signing  # noqa: E402
from tests.azurite import Azurite  # noqa: E402
from tests.eventhubs.broker import EventHubsBroker  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

SUB = "11111111-2222-3333-4444-555555555555"
PARTITIONS = 4
DECIDED = re.compile(r"^approve (\S+): ")
SENT = re.compile(r"^sent approval (\S+)/coordinator/approve/\d+ .*\((\d+\.\d+) s after the event arrived\)")


MEANING = """\
What runs here: broker, Azurite, coordinator and this publisher share one machine's cores; the
broker is Python and single-threaded. Against a real hub, the publisher and the broker are off
the coordinator's machine and the hub is not the bottleneck: ingest is then bounded by the
coordinator's own verification, decoding and folding (bench/coordinator_verified.py: about 3,800
verified reports/s on one core of this machine; the fold alone 17,000-55,000/s by machine), and
the latency adds the network round trips to the hub and to Storage (a few ms each in one region)
to the figures above. 10,000 VMs with a heartbeat a minute are about 170 events/s.
The fleet here has already learned its availability sets; the first event seen from a set not
yet known rebuilds the scope index once (0.3-0.8 s at 10,000 VMs)."""


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def fleet(count: int) -> list[list[dict[str, Any]]]:
    """Availability sets of 10 VMs (80 %), scale sets of 50 in 3 zones (the rest)."""
    groups, n = [], 0
    for g in range(int(count * 0.8) // 10):
        groups.append([vm(f"web{g}-{i}", f"rg-{g % 50}", "", "", str(i % 3), str(i % 5)) for i in range(10)])
        n += 10
    s = 0
    while n < count:
        size = min(50, count - n)
        groups.append([vm(f"ss{s}-{i}", f"rg-ss{s % 10}", str(i % 3 + 1), f"ss{s}", str(i % 5), str(i % 5))
                       for i in range(size)])
        n += size
        s += 1
    return groups


def vm(name: str, rg: str, zone: str, scale_set: str, fd: str, ud: str) -> dict[str, Any]:
    vm_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{rg}/{name}"))
    return {"vmId": vm_id, "name": name, "resourceId": f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/"
            f"Microsoft.Compute/virtualMachines/{name}", "subscriptionId": SUB, "resourceGroupName": rg,
            "location": "westeurope", "zone": zone, "vmScaleSetName": scale_set, "platformFaultDomain": fd,
            "platformUpdateDomain": ud, "placementGroupId": "", "tags": {}, "complete": True}


def heartbeat(v: dict[str, Any], t: float) -> str:
    return json.dumps({
        "specversion": "1.0", "type": "com.azure.scheduledevents.heartbeat",
        "id": f"heartbeat/{v['vmId']}/{int(t)}", "source": v["resourceId"], "subject": v["vmId"],
        "time": iso(t), "datacontenttype": "application/json", "vmid": v["vmId"],
        "data": {"AgentVersion": "0.2.0", "HeartbeatInterval": 60, "LastPollUtc": iso(t),
                 "DocumentIncarnation": 4, "Events": [], "EnrichmentComplete": True,
                 "Backlog": {"hub": 0}, "Vm": v},
    })


def scheduled(v: dict[str, Any], event_id: str, names: list[str], t: float, not_before: float,
              kind: str = "Reboot") -> str:
    return json.dumps({
        "specversion": "1.0", "type": "com.azure.scheduledevents.scheduled", "id": f"{event_id}/scheduled",
        "source": v["resourceId"], "subject": event_id, "time": iso(t), "datacontenttype": "application/json",
        "eventtype": kind, "eventstatus": "Scheduled", "incarnation": 4, "vmid": v["vmId"],
        "data": {"EventId": event_id, "EventType": kind, "ResourceType": "VirtualMachine",
                 "Resources": names, "EventStatus": "Scheduled", "NotBefore": "", "Description": "bench",
                 "EventSource": "Platform", "DurationInSeconds": 9, "NotBeforeUtc": iso(not_before),
                 "DocumentIncarnation": 4, "AffectsThisVm": v["name"] in names, "Vm": v},
    })


class Publisher:
    """One producer; events spread over the partitions by VM, sent in full batches, each signed
    with its VM's key first (``Identities.sign``)."""

    def __init__(self, connection_string: str, sign: Callable[[str], str]) -> None:
        from azure.eventhub import EventHubProducerClient

        self.client = EventHubProducerClient.from_connection_string(connection_string, retry_total=2)
        self.sign = sign

    def send(self, items: list[tuple[int, str]]) -> None:
        """Reports: (partition key, JSON text) each, signed here."""
        self._send([(key, self.sign(text)) for key, text in items])

    def register(self, items: list[tuple[int, str]]) -> None:
        """Identity events (``Identities.registration``: signed already) on their VMs' partitions."""
        self._send(items)

    def _send(self, items: list[tuple[int, str]]) -> None:
        from azure.eventhub import EventData

        by_partition: dict[str, list[str]] = {}
        for key, text in items:
            by_partition.setdefault(str(key % PARTITIONS), []).append(text)
        for pid, texts in by_partition.items():
            batch = self.client.create_batch(partition_id=pid)
            for text in texts:
                data = EventData(text)
                data.content_type = "application/cloudevents+json"
                try:
                    batch.add(data)
                except ValueError:
                    self.client.send_batch(batch)
                    batch = self.client.create_batch(partition_id=pid)
                    batch.add(data)
            if len(batch):
                self.client.send_batch(batch)

    def close(self) -> None:
        self.client.close()


def serve_broker(address: Any, stop: Any) -> None:
    """The broker in a child process: its connection string goes back on ``address``."""
    broker = EventHubsBroker().start()
    address.put(broker.connection_string())
    stop.wait()
    broker.stop()


class BrokerProcess:
    def __init__(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self.address, self.stop_event = context.Queue(), context.Event()
        self.process = context.Process(target=serve_broker, args=(self.address, self.stop_event), daemon=True)

    def start(self) -> BrokerProcess:
        self.process.start()
        self.connection = str(self.address.get(timeout=60))
        return self

    def connection_string(self) -> str:
        return self.connection

    def stop(self) -> None:
        self.stop_event.set()
        self.process.join(20)
        if self.process.is_alive():
            self.process.kill()


def write_config(base: Path, port: int, trust: str, log_level: str = "info") -> Path:
    key, token = base / "signing.key", base / "api.token"
    key.write_bytes(signing.private_key_pem(signing.generate_private_key()))
    token.write_text("bench-token-" + os.urandom(12).hex() + "\n")
    config = base / "coordinator.toml"
    config.write_text(f"""
[coordinator]
name = "bench"
instance = "a"
[eventhub]
eventhub = "scheduled-events"
consumer_group = "coordinator"
credential = "connection-string"
connection_string_env = "BENCH_EH"
[storage]
credential = "connection-string"
connection_string_env = "BENCH_BLOB"
container = "coordinator"
snapshot_interval = "10m"
[queues]
credential = "connection-string"
connection_string_env = "BENCH_QUEUE"
[signing]
key_file = "{key}"
[api]
listen = "127.0.0.1:{port}"
token_file = "{token}"
[telemetry]
log_format = "json"
log_level = "{log_level}"
[policy]
approve_within = "2h"
heartbeat_timeout = "30m"
[[budgets]]
scope = "group"
max_unavailable = 1
[[budgets]]
scope = "zone"
max_unavailable = "10%"
[limits]
# The backlog of the whole fleet is published within a minute or two here; a real fleet's history
# on the hub spreads over hours, which the default (1,000 new VMs a minute of hub time) admits.
new_vms_per_minute = 1000000
{trust}""")
    return config


def start_coordinator(base: Path, port: int, hub: str, blob: Azurite, queue: Azurite, log: Path,
                      trust: str, log_level: str = "info") -> subprocess.Popen[bytes]:
    """``coordinator run`` with ``write_config``'s file (``trust``: its [trust] section), logging
    to ``log``."""
    config = write_config(base, port, trust, log_level)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BENCH_EH": hub, "BENCH_BLOB": blob.connection_string,
           "BENCH_QUEUE": queue.connection_string}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "se_forwarder", "coordinator", "run", "--config",
                                 str(config)], cwd=ROOT, env=env, stdout=out, stderr=out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=3, help="rounds of heartbeats in the backlog")
    parser.add_argument("--events", type=int, default=200, help="maintenance events, one per set")
    args = parser.parse_args()
    groups = fleet(args.vms)
    vms = [v for g in groups for v in g]
    sets = [g for g in groups if len(g) == 10][: args.events]
    base = Path(tempfile.mkdtemp(prefix="coordinator-e2e-"))
    print(f"working in {base}", file=sys.stderr)
    broker, blob, queue = BrokerProcess(), Azurite("blob", workdir=base), Azurite("queue", workdir=base)
    broker.start()
    blob.start()
    queue.start()
    proc = None
    rows: list[tuple[str, str]] = []
    try:
        identities = Identities(vms, base)
        publisher = Publisher(broker.connection_string(), identities.sign)
        t0 = time.time()
        began = time.monotonic()
        publisher.register([(i, identities.registration(v)) for i, v in enumerate(vms)])
        for minute in range(args.minutes):
            publisher.send([(i, heartbeat(v, t0 - (args.minutes - minute) * 60 + i % 60))
                            for i, v in enumerate(vms)])
        # earlier maintenance (a Freeze, not managed) seen by every availability set: the fold has
        # learned the sets, as a coordinator running for a while has
        index = {v["vmId"]: i for i, v in enumerate(vms)}  # a VM's events stay on one partition
        earlier = [(index[v["vmId"]], scheduled(v, f"FREEZE-{g:05d}", [members[0]["name"]], t0 - 60,
                                                t0 + 3 * 3600, "Freeze"))
                   for g, members in enumerate(groups) if len(members) == 10 for v in members]
        publisher.send(earlier)
        backlog = args.minutes * len(vms) + len(earlier)
        rows.append(("backlog published", f"{backlog:,} signed reports ({args.minutes} heartbeats per VM, a "
                     f"Freeze reported by every availability set) after {len(vms):,} registrations, in "
                     f"{time.monotonic() - began:.1f} s"))
        targets = [g[0] for g in sets]
        for v in targets:  # the agents create their queues; here the bench does
            queue.client(f"se-approvals-{v['name']}").create_queue()

        port = free_port()
        log = base / "coordinator.log"
        proc = start_coordinator(base, port, broker.connection_string(), blob, queue, log,
                                 identities.trust_config(), os.environ.get("BENCH_LOG_LEVEL", "info"))
        token = (base / "api.token").read_text().strip()
        http = requests.Session()
        http.trust_env = False

        def state() -> dict[str, Any] | None:
            try:
                r = http.get(f"http://127.0.0.1:{port}/v1/state", timeout=10,
                             headers={"Authorization": f"Bearer {token}"})
                return r.json() if r.status_code == 200 else None
            except requests.RequestException:
                return None

        def progress() -> tuple[int, int] | None:
            """(folded, skipped) from /metrics: counters, where /v1/state would hash the whole fold
            for its digest at every poll, on the loop that is folding."""
            try:
                text = http.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            except requests.RequestException:
                return None
            sums = {"folded": 0.0, "skipped": 0.0}
            for line in text.splitlines():
                for name in sums:
                    if line.startswith(f"se_forwarder_coordinator_{name}_total{{"):
                        sums[name] += float(line.rsplit(" ", 1)[1])
            return int(sums["folded"]), int(sums["skipped"])

        first = last = None
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            p = progress()
            if proc.poll() is not None:
                raise RuntimeError(f"the coordinator exited: {log.read_text()[-2000:]}")
            now = time.monotonic()
            if p and p[0] > 0 and first is None:
                first = (now, p[0])
            if p and p[0] + p[1] >= backlog:
                last = (now, p[0])
                break
            time.sleep(0.2)
        if first is None or last is None:
            raise RuntimeError("the coordinator did not read the backlog in 10 minutes")
        rate = (last[1] - first[1]) / max(last[0] - first[0], 1e-6)
        rows.append(("ingest (hub -> fold)", f"{rate:,.0f} events/s over {last[1] - first[1]:,} events "
                     f"(goal >= 2,000)"))
        rss_after_ingest = psutil.Process(proc.pid).memory_info().rss / 1e6
        while not (s := state()) or not s["acting"]:
            time.sleep(0.2)

        published: dict[str, float] = {}
        now = time.time()
        beat = 0
        for k, members in enumerate(sets):
            event_id = f"BENCH-{k:05d}"
            names = [members[0]["name"]]
            items = [(index[v["vmId"]], scheduled(v, event_id, names, now, now + 1800)) for v in members]
            items += [(beat + j, heartbeat(vms[(beat + j) % len(vms)], time.time())) for j in range(2)]
            beat += 2
            publisher.send(items)
            published[event_id] = time.time()
            time.sleep(0.02)
        publisher.close()
        deadline = time.monotonic() + 120
        sent: dict[str, tuple[float, float]] = {}
        decided: dict[str, float] = {}
        while time.monotonic() < deadline and len(sent) < len(published):
            time.sleep(0.5)
            for line in log.read_text(errors="replace").splitlines():
                if not line.startswith("{"):
                    continue
                entry = json.loads(line)
                made = DECIDED.match(entry.get("message", ""))
                if made and made.group(1) in published:
                    at = datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()
                    decided[made.group(1)] = at - published[made.group(1)]
                match = SENT.match(entry.get("message", ""))
                if match and match.group(1) in published:
                    at = datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()
                    sent[match.group(1)] = (at - published[match.group(1)], float(match.group(2)))
        end_to_end = [v[0] for v in sent.values()]
        internal = [v[1] for v in sent.values()]
        if end_to_end:
            rows.append(("decision latency, hub -> queue message",
                         f"p50 {percentile(end_to_end, 0.5) * 1000:.0f} ms, p99 "
                         f"{percentile(end_to_end, 0.99) * 1000:.0f} ms over {len(sent)} of {len(published)} "
                         "events (goal p99 <= 1 s)"))
            made = list(decided.values())
            rows.append(("  hub -> decision made", f"p50 {percentile(made, 0.5) * 1000:.0f} ms, p99 "
                         f"{percentile(made, 0.99) * 1000:.0f} ms"))
            rows.append(("  arrival -> queue message (coordinator's own)",
                         f"p50 {percentile(internal, 0.5) * 1000:.0f} ms, p99 "
                         f"{percentile(internal, 0.99) * 1000:.0f} ms"))
        else:
            rows.append(("decision latency", f"no approval was sent: {log.read_text()[-1500:]}"))
        rss = psutil.Process(proc.pid).memory_info().rss / 1e6
        rows.append(("coordinator RSS", f"{rss_after_ingest:.0f} MB after ingest, {rss:.0f} MB after the "
                     f"approvals ({len(vms):,} VMs in the fold; goal <= 300 MB)"))
    finally:
        end(proc)
        queue.stop()
        blob.stop()
        broker.stop()
    print_figures(f"coordinator service, {args.vms:,} VMs, {len(groups)} groups, {args.events} events, "
                  f"broker with {PARTITIONS} partitions, all on one machine "
                  f"(CPython {sys.version.split()[0]})", rows)
    print(MEANING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
