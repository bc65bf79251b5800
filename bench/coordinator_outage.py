"""The coordinator through an Event Hub outage: from the hub's return to the next decision.

What runs, all on this one machine: the Event Hubs broker fixture (tests/eventhubs/broker.py, in
this process: it is stopped and started again on the same port, refusing connections meanwhile),
Azurite blob and queue, and ``se-forwarder coordinator run`` as a subprocess. This script plays a
fleet of ``--vms`` VMs in availability sets of 10: heartbeats every second from one producer, and
maintenance events, each reported by every VM of its set and each fitting its budget at once.
``heartbeat_timeout`` is 30 min, so no VM stops being watched during an outage: what is measured
is the coordinator's own recovery, not the agents'. Every VM is a registered agent and signs its
reports (bench/fleet_identities.py), as in production.

1. Baseline: ``--events`` events published one at a time with the hub up; for each, from the
   moment its reports were on the hub (the send returned) to the coordinator's decision (its
   ``approve`` log line) and to its queue message (``sent approval``).
2. Outages: ``--rounds`` times, the broker refuses connections for ``--outage`` seconds; the
   moment it listens again, one event is published. Figures: hub back -> the event on the hub
   (this script's own producer reconnecting), hub back -> the coordinator says its reader has the
   hub again and has caught up (its log lines), the event on the hub -> decision (as the baseline),
   hub back -> decision, hub back -> queue message. "On the hub" is when the broker stored the first
   of the event's reports.

3. The coordinator's CPU while the hub is away, beside its CPU with the hub up.

Prints figures with the baseline beside them; asserts nothing.

    .venv/bin/python bench/coordinator_outage.py [--vms 200] [--events 5] [--rounds 3] [--outage 30]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import requests  # noqa: E402

from bench.common import end, percentile, print_figures  # noqa: E402
from bench.coordinator_e2e import Publisher, fleet, heartbeat, scheduled, start_coordinator  # noqa: E402
from bench.fleet_identities import Identities  # noqa: E402
from tests.azurite import Azurite  # noqa: E402
from tests.eventhubs.broker import EventHubsBroker  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

REGAINED = "reached the Event Hub (reading) again"  # the coordinator's log line: its reader has the hub back
CAUGHT_UP = "caught up with the Event Hub"


class Log:
    """The coordinator's JSON log lines, read as they come: (wall time, message)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[tuple[float, str]]:
        out = []
        for line in self.path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                at = datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()
                out.append((at, str(entry.get("message", ""))))
        return out

    def first(self, after: float, test: Any, timeout: float = 90) -> float | None:
        """The time of the first line at or after ``after`` for which ``test(message)`` holds."""
        found = self._search(after, test, timeout)
        return found[0] if found else None

    def find(self, after: float, test: Any, timeout: float = 90) -> str | None:
        """That line's message."""
        found = self._search(after, test, timeout)
        return found[1] if found else None

    def _search(self, after: float, test: Any, timeout: float) -> tuple[float, str] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, message in self.lines():
                if at >= after - 0.002 and test(message):
                    return at, message
            time.sleep(0.2)
        return None


class Heartbeats(threading.Thread):
    """Every VM's heartbeat once a second, from one producer; failures (the hub is down) are
    skipped, and a new producer is made for the next round."""

    def __init__(self, connection: str, vms: list[dict[str, Any]], sign: Callable[[str], str]) -> None:
        super().__init__(name="heartbeats", daemon=True)
        self.connection, self.vms, self.sign = connection, vms, sign
        self.stop = threading.Event()

    def run(self) -> None:
        publisher: Publisher | None = None
        while not self.stop.wait(1.0):
            try:
                publisher = publisher or Publisher(self.connection, self.sign)
                publisher.send([(i, heartbeat(v, time.time())) for i, v in enumerate(self.vms)])
            except Exception:  # noqa: BLE001 - the hub is down: try again next second
                if publisher is not None:
                    with contextlib.suppress(Exception):  # a broken producer cannot always be closed
                        publisher.close()
                publisher = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=200)
    parser.add_argument("--events", type=int, default=5, help="baseline events")
    parser.add_argument("--rounds", type=int, default=3, help="outages")
    parser.add_argument("--outage", type=float, default=30.0, help="seconds the hub refuses connections")
    args = parser.parse_args()
    groups = [g for g in fleet(args.vms) if len(g) == 10]
    vms = [v for g in groups for v in g]
    index = {v["vmId"]: i for i, v in enumerate(vms)}
    needed = args.events + args.rounds
    if len(groups) < needed:
        parser.error(f"--vms {args.vms} gives {len(groups)} availability sets; {needed} are needed")
    base = Path(tempfile.mkdtemp(prefix="coordinator-outage-"))
    print(f"working in {base}", file=sys.stderr)
    broker, blob, queue = EventHubsBroker(), Azurite("blob", workdir=base), Azurite("queue", workdir=base)
    broker.start()
    blob.start()
    queue.start()
    proc = beats = None
    rows: list[tuple[str, str]] = []
    try:
        identities = Identities(vms, base)
        publisher = Publisher(broker.connection_string(), identities.sign)
        t0 = time.time()
        publisher.register([(index[v["vmId"]], identities.registration(v)) for v in vms])
        publisher.send([(index[v["vmId"]], heartbeat(v, t0)) for v in vms])
        publisher.send([(index[v["vmId"]], scheduled(v, f"FREEZE-{g:03d}", [members[0]["name"]], t0,
                                                      t0 + 3 * 3600, "Freeze"))
                        for g, members in enumerate(groups) for v in members])
        for members in groups:
            queue.client(f"se-approvals-{members[0]['name']}").create_queue()
        port = free_port()
        log_path = base / "coordinator.log"
        proc = start_coordinator(base, port, broker.connection_string(), blob, queue, log_path,
                                 identities.trust_config())
        token = (base / "api.token").read_text().strip()
        log = Log(log_path)
        http = requests.Session()
        http.trust_env = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                r = http.get(f"http://127.0.0.1:{port}/v1/state", timeout=5,
                             headers={"Authorization": f"Bearer {token}"})
                if r.status_code == 200 and r.json()["acting"]:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"the coordinator exited: {log_path.read_text()[-2000:]}")
            time.sleep(0.3)
        else:
            raise RuntimeError("the coordinator did not lead within 2 minutes")
        beats = Heartbeats(broker.connection_string(), vms, identities.sign)
        beats.start()

        def publish_event(k: int, producer: Publisher) -> tuple[str, float]:
            """Publish event k; its id and when its first report was stored (the broker's clock)."""
            event_id = f"OUTAGE-{k:04d}"
            members = groups[k]
            now = time.time()
            producer.send([(index[v["vmId"]], scheduled(v, event_id, [members[0]["name"]], now, now + 1800))
                           for v in members])
            stored = [m.enqueued_time_ms / 1000 for m in broker.all_messages()
                      if event_id.encode() in m.encoded]
            return event_id, min(stored) if stored else time.time()

        def decided(event_id: str, after: float) -> tuple[float | None, float | None]:
            made = log.first(after, lambda m: m.startswith(f"approve {event_id}: "))
            sent = log.first(after, lambda m: m.startswith(f"sent approval {event_id}/"))
            return made, sent

        base_made: list[float] = []
        base_sent: list[float] = []
        for k in range(args.events):
            event_id, on_hub = publish_event(k, publisher)
            made, sent = decided(event_id, on_hub - 1)
            if made is not None:
                base_made.append(made - on_hub)
            if sent is not None:
                base_sent.append(sent - on_hub)
            time.sleep(0.5)
        publisher.close()
        process = psutil.Process(proc.pid)

        def cpu_share(seconds: float) -> float:
            """The coordinator's CPU over the next ``seconds``, as a share of one core."""
            before = sum(process.cpu_times()[:2])
            time.sleep(seconds)
            return (sum(process.cpu_times()[:2]) - before) / seconds

        cpu_up = cpu_share(min(args.outage, 10.0))
        cpu_down: list[float] = []

        back_hub: list[float] = []
        back_read: list[float] = []
        back_caught: list[float] = []
        back_made: list[float] = []
        back_sent: list[float] = []
        back_hub_made: list[float] = []
        missing = 0
        for r in range(args.rounds):
            broker.stop()
            time.sleep(2)  # the reader notices (it asks the hub every 2 s)
            cpu_down.append(cpu_share(args.outage - 2))
            broker.start()
            back = time.time()
            producer = Publisher(broker.connection_string(), identities.sign)
            event_id, on_hub = publish_event(args.events + r, producer)
            producer.close()
            back_hub.append(on_hub - back)
            read = log.first(back, lambda m: REGAINED in m, timeout=30)
            caught = None
            line = log.find(back, lambda m: CAUGHT_UP in m, timeout=30)
            if read is not None and line is not None:  # "... ended 0.8 s after it answered ..."
                took = re.search(r"ended (\d+\.\d+) s after it answered", line)
                caught = read + float(took.group(1)) if took else None
            made, sent = decided(event_id, back)
            for found, into in ((read, back_read), (caught, back_caught), (made, back_made),
                                (sent, back_sent)):
                if found is not None:
                    into.append(found - back)
            if made is not None:
                back_hub_made.append(made - on_hub)
            missing += made is None
            time.sleep(3)

        def spread(values: list[float]) -> str:
            if not values:
                return "not seen"
            return (f"p50 {percentile(values, 0.5):.2f} s, max {max(values):.2f} s "
                    f"({len(values)} measured)")

        rows.append(("baseline: event on the hub -> decision", spread(base_made)))
        rows.append(("baseline: event on the hub -> queue message", spread(base_sent)))
        rows.append((f"after a {args.outage:.0f} s outage: hub back -> event on the hub (this script)",
                     spread(back_hub)))
        rows.append(("  hub back -> coordinator's reader has the hub again (log)", spread(back_read)))
        rows.append(("  hub back -> coordinator caught up with the hub (log)", spread(back_caught)))
        rows.append(("  event on the hub -> decision", spread(back_hub_made)))
        rows.append(("  hub back -> decision", spread(back_made)))
        rows.append(("  hub back -> queue message", spread(back_sent)))
        rows.append(("coordinator CPU with the hub up (heartbeats flowing)",
                     f"{cpu_up * 100:.1f}% of a core"))
        rows.append(("coordinator CPU while the hub refuses connections",
                     f"{max(cpu_down) * 100:.1f}% of a core (the most of {len(cpu_down)} outages)"))
        if missing:
            rows.append(("  rounds without a decision within 90 s", str(missing)))
    finally:
        if beats is not None:
            beats.stop.set()
            beats.join(10)
        end(proc)
        queue.stop()
        blob.stop()
        broker.stop()
    print_figures(f"coordinator through Event Hub outages: {len(vms)} VMs in {len(groups)} availability "
                  "sets, heartbeats every second, broker with 4 partitions, all on one machine "
                  f"(CPython {sys.version.split()[0]})", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
