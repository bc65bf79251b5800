"""Benchmark: remote approval round trip, from a signed message sent to the queue to the StartRequests
POST received by IMDS.

Real parts: Azurite's queue service (npm, as in the tests), the IMDS simulator over HTTP on loopback,
and the agent as a subprocess with default intervals (IMDS polled every 1 s, the queue every 1 s).
For each sample an event is added and, once the agent has forwarded it, a signed approval is sent
at a random phase of the agent's receive loop; the latency is the simulator's record time of the
POST minus the time just before ``send_message``.

    python bench/approval_roundtrip.py [--samples 40] [--queue-poll 1.0] [--imds-poll 1.0]

Needs the ``queue`` extra and ``azurite-queue`` on PATH or in ``.cache/azurite``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from se_forwarder.approvals import signing  # noqa: E402
from se_forwarder.approvals.queue import queue_name  # noqa: E402
from se_forwarder.simulator import SimulatorServer  # noqa: E402
from tests.azurite import Azurite, find_binary  # noqa: E402


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def forwarded(sink: Path, event_id: str) -> bool:
    if not sink.exists():
        return False
    return any(json.loads(line).get("subject") == event_id
               for line in sink.read_text().splitlines() if line.strip())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--queue-poll", type=float, default=1.0, help="approvals.queue.poll_interval")
    parser.add_argument("--imds-poll", type=float, default=1.0, help="imds.poll_interval")
    args = parser.parse_args()
    if find_binary() is None:
        print("azurite-queue not found: npm install --prefix .cache/azurite azurite@3.37.0",
              file=sys.stderr)
        return 2
    key = signing.generate_private_key()
    public_line = signing.public_key_line(key)
    template = "bench-{vm_name}"
    with tempfile.TemporaryDirectory(prefix="se-bench-") as tmp, Azurite(workdir=Path(tmp)) as az, \
            SimulatorServer(etag=False) as server:
        base = Path(tmp)
        sink = base / "out.jsonl"
        config = base / "agent.toml"
        config.write_text(
            f'[imds]\nurl = "{server.url}"\npoll_interval = {args.imds_poll}\n'
            f'[state]\ndir = "{base / "state"}"\n'
            f'[[sinks]]\ntype = "file"\npath = "{sink}"\n'
            '[telemetry]\nlog_format = "json"\nlog_level = "warning"\n'
            f'[approvals.queue]\nqueue = "{template}"\nconnection_string_env = "APPROVALS_CONN"\n'
            f'verify_keys_env = "APPROVALS_PUBLIC_KEYS"\npoll_interval = {args.queue_poll}\n'
        )
        env = {**os.environ, "APPROVALS_CONN": az.connection_string,
               "APPROVALS_PUBLIC_KEYS": public_line}
        log = open(base / "agent.log", "wb")  # noqa: SIM115 - closed below
        agent = subprocess.Popen([sys.executable, "-m", "se_forwarder", "run", "--config", str(config)],
                                 env=env, cwd=ROOT, stdout=log, stderr=log)
        client = az.client(queue_name(template, "vm0"))
        try:
            def queue_ready() -> bool:
                try:
                    client.get_queue_properties()
                    return True
                except Exception:  # noqa: BLE001 - not created yet
                    return False

            wait(queue_ready, 30, "the agent's queue")
            latencies: list[float] = []
            for n in range(args.samples):
                event_id = server.sim.add_event({"EventType": "Reboot"})["EventId"]
                wait(lambda e=event_id: forwarded(sink, e), 15, "the agent forwarding the event")
                time.sleep(random.uniform(0.0, args.queue_poll))
                message = signing.new_message(
                    event_id, source="urn:bench", key=key,
                    expires_at=datetime.now(UTC) + timedelta(minutes=5), reason=f"bench {n}")
                text = signing.encode(message)
                sent = time.time()
                client.send_message(text)
                record = wait(lambda e=event_id: [a for a in server.sim.approvals() if a["EventId"] == e],
                              15, "the approval POST")[0]
                latencies.append(datetime.fromisoformat(record["time"]).timestamp() - sent)
                server.sim.delete_event(event_id)
        finally:
            agent.terminate()
            agent.wait(10)
            log.close()
    ms = [v * 1000 for v in latencies]
    print(f"approval round trip (message sent -> IMDS POST), {len(ms)} samples, "
          f"queue poll {args.queue_poll:g} s, IMDS poll {args.imds_poll:g} s")
    print(f"  p50 {percentile(ms, 50):7.0f} ms")
    print(f"  p90 {percentile(ms, 90):7.0f} ms")
    print(f"  p99 {percentile(ms, 99):7.0f} ms")
    print(f"  max {max(ms):7.0f} ms   mean {statistics.fmean(ms):.0f} ms   min {min(ms):.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
