"""What forged registrations cost the coordinator, beside an honest one and a fleet without them.

Printed side by side in one run (issue 31's review: a 7 KB chain bomb cost the fold thread 0.7-0.8 s):

1. The cost of refusing each kind of forged registration (tests/support/forged_registrations.py:
   the review's chain bomb, its signer alone with the 3071-bit exponent, a carried chain, a
   self-signed signer, a copy of another key's document, an expired one), each a new document, and
   of verifying an honest one (its chain's verdict cached, as in a running coordinator), in CPU
   time of one core (trust.registration).
2. The fold's lag under a chain-bomb flood: 2,000 registered VMs' signed heartbeats read at
   ``--rate`` a second for ``--seconds``, through input/verifier.py's worker processes into the
   fold thread (gate.py), without and then with chain-bomb registrations at the rate one
   throughput unit allows (``--bombs`` a second, about 1 MB/s); and, for comparison, the same flood
   verified on the fold thread (``verify_workers = 0``, the coordinator before this change). Lag:
   from a batch's arrival to the end of its fold.
3. The held pool at its caps: reports of unregistered GUID vmIds held until ``[limits]
   held_bytes`` (16 MiB by default) is full, its memory (tracemalloc) beside the bytes counted.

Prints figures; asserts nothing.

    .venv/bin/python bench/coordinator_forgery.py [--seconds 20] [--rate 1000] [--bombs 150] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
import tracemalloc
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import percentile, print_figures  # noqa: E402
from se_forwarder.approvals import signing  # noqa: E402
from se_forwarder.fleet.coordinator.config.anchors import anchors  # noqa: E402
from se_forwarder.fleet.coordinator.config.limits import DEFAULT_LIMITS  # noqa: E402
from se_forwarder.fleet.coordinator.edge import Edge, Gate, offload, trust  # noqa: E402
from se_forwarder.fleet.coordinator.fold import FleetState  # noqa: E402
from se_forwarder.fleet.coordinator.input.hub_reader import Batch, Position  # noqa: E402
from se_forwarder.fleet.coordinator.input.verifier import Verifier  # noqa: E402
from se_forwarder.simulator.attestation import AttestationAuthority  # noqa: E402
from tests.support.forged_registrations import KINDS, forged, honest  # noqa: E402

SOURCE = "urn:se-forwarder:coordinator:bench"
BATCH = 50  # events per hub batch under a steady trickle


def costs(authority: AttestationAuthority, attested: trust.Attestation) -> list[tuple[str, str]]:
    rows = []
    trust.registration(honest(authority), attested, time.time())  # the chain's verdict, once
    for kind in ("honest", *KINDS):
        events = [honest(authority) if kind == "honest" else forged(kind, authority) for _ in range(100)]
        began = time.process_time()
        verdicts = [trust.registration(e, attested, time.time()) for e in events]
        each = (time.process_time() - began) / len(events)
        codes = sorted({v.code or "trusted" for v in verdicts})
        rows.append((f"  {kind}", f"{each * 1e3:.2f} ms of one core ({', '.join(codes)})"))
    return rows


def heartbeat(vm: str, key: signing.Ed25519PrivateKey, t: float) -> bytes:
    return json.dumps(signing.sign({
        "specversion": "1.0", "type": "com.azure.scheduledevents.heartbeat", "id": str(uuid.uuid4()),
        "source": "/subscriptions/x", "subject": vm, "vmid": vm, "time": "2026-01-01T00:00:00Z",
        "data": {"Events": [], "LastPollUtc": "2026-01-01T00:00:00Z",
                 "Vm": {"vmId": vm, "name": vm[:8], "complete": True}}}, key)).encode()


def lag(authority: AttestationAuthority, attested: trust.Attestation, job: offload.Job, workers: int,
        seconds: float, rate: int, bombs: int) -> tuple[list[float], int, int]:
    """Seconds from each batch's arrival to the end of its fold; (lags, folded, refused)."""
    keys = {str(uuid.uuid4()): signing.generate_private_key() for _ in range(2000)}
    state = FleetState()
    gate = Gate(Edge(SOURCE, lambda: signing.VerifyKeys([]), attested, limits=DEFAULT_LIMITS))
    for vm, key in keys.items():
        assert gate.admit(state, honest(authority, vm, key), time.time()) == "registered"
    vms = list(keys)
    inbox: queue.Queue[Batch | None] = queue.Queue(maxsize=20)
    verifier = Verifier(inbox.put, workers, DEFAULT_LIMITS, state.identities.get,
                        lambda e: gate.known(state, e), lambda: job) if workers else None
    deliver = verifier.put if verifier is not None else inbox.put
    if verifier is not None:  # its worker processes started before the clock does
        warm = heartbeat(vms[0], keys[vms[0]], time.time())
        first = Batch("w", [(json.loads(warm), Position(0, "0", time.time()))], time.monotonic(), [warm])
        verifier.put(first)
        inbox.get(timeout=120)
    pool = [forged("chain_bomb", authority) for _ in range(max(1, bombs) * 2)]
    lags: list[float] = []
    outcomes: list[str] = []

    def read() -> None:
        began, sent, n = time.monotonic(), 0, 0
        while time.monotonic() - began < seconds:
            due = int((time.monotonic() - began) * rate)
            events: list[bytes] = []
            while sent < due and len(events) < BATCH:
                vm = vms[sent % len(vms)]
                events.append(heartbeat(vm, keys[vm], time.time()))
                sent += 1
            if bombs:
                events += [json.dumps(pool[(n + i) % len(pool)]).encode() for i in range(max(1, bombs // 20))]
            n += 1
            batch = Batch("0", [(json.loads(t), Position(n, str(n), time.time())) for t in events],
                          time.monotonic(), events)
            while True:
                try:
                    deliver(batch)
                    break
                except queue.Full:
                    continue
            time.sleep(0.05)
        inbox.put(None)

    reader = threading.Thread(target=read)
    reader.start()
    while (batch := inbox.get()) is not None:
        checks = batch.checked or [None] * len(batch.events)
        outcomes += [gate.admit(state, e, p.enqueued, c)
                     for (e, p), c in zip(batch.events, checks, strict=True)]
        lags.append(time.monotonic() - batch.arrived)
    reader.join()
    if verifier is not None:
        verifier.close()
    return lags, outcomes.count("folded"), sum(1 for o in outcomes if o.startswith("identity-"))


def held_pool() -> tuple[int, float, int]:
    """(bytes counted, MB in memory, reports held) with the pool at DEFAULT_LIMITS' caps."""
    key = signing.generate_private_key()
    gate, state = Gate(Edge(SOURCE, lambda: signing.VerifyKeys([]), None)), FleetState()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    vm = str(uuid.uuid4())
    while sum(gate.held_bytes.values()) < DEFAULT_LIMITS.held_bytes - DEFAULT_LIMITS.held_event_bytes:
        report = json.loads(heartbeat(vm, key, time.time()))
        report["data"]["Padding"] = "x" * 6000
        if gate.admit(state, signing.sign(report, key), time.time()) != "waiting":
            vm = str(uuid.uuid4())
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return sum(gate.held_bytes.values()), used / 1e6, gate.held(state)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=int, default=1000, help="heartbeats a second")
    parser.add_argument("--bombs", type=int, default=150, help="chain-bomb registrations a second")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    authority = AttestationAuthority()
    given = anchors([authority.ca_file], [authority.intermediate_file])
    attested = trust.Attestation(given)
    job = offload.Job.of(given, None)
    rows = [("refusing a forged registration, verifying an honest one", "")]
    rows += costs(authority, attested)

    def lag_row(label: str, workers: int, bombs: int) -> tuple[str, str]:
        lags, folded, refused = lag(authority, trust.Attestation(given), job, workers, args.seconds,
                                    args.rate, bombs)
        p50, p99 = percentile(lags, 0.5) * 1e3, percentile(lags, 0.99) * 1e3
        return (label, f"p50 {p50:.0f} ms, p99 {p99:.0f} ms, "
                f"max {max(lags) * 1e3:.0f} ms ({folded:,} heartbeats folded, {refused:,} registrations "
                "refused)")

    rows.append((f"fold lag, {args.rate:,} heartbeats/s for {args.seconds:.0f} s", ""))
    rows.append(lag_row(f"  {args.workers} workers, no flood", args.workers, 0))
    rows.append(lag_row(f"  {args.workers} workers, {args.bombs} chain bombs/s", args.workers, args.bombs))
    rows.append(lag_row(f"  fold thread verifies, {args.bombs} chain bombs/s", 0, args.bombs))
    counted, memory, held = held_pool()
    rows.append(("held pool at its caps (held_bytes 16 MiB)",
                 f"{counted / 2**20:.1f} MiB counted, {memory:.1f} MB in memory, {held:,} reports held"))
    title = f"forged registrations against the coordinator's edge (CPython {sys.version.split()[0]})"
    print_figures(title, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
