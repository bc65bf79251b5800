"""The coordinator's edge at fleet scale: signed reports verified per second, beside same-run baselines.

bench/coordinator_fold.py's fleet (10,000 VMs) and its burst (1,000 platform events, each reported
by every VM of its group, heartbeats going on), every report signed by its VM's own Ed25519 key
(docs/identity.md). In process, one run, side by side:

- the baselines: ``json.loads`` of the texts; a bare verification loop (canonical form and
  Ed25519) with ``cryptography`` (OpenSSL) and with PyNaCl (libsodium), on one core;
- the fold alone (``json.loads`` + ``fold_event``), and its ratio to ``json.loads``: as the service
  folds a verified report (its VM registered, the sender its key), and an unsigned one;
- the serial edge: the fold thread verifying every report itself (gate.py, ``verify_workers = 0``);
- the parallel edge: input/verifier.py's worker processes checking the signatures while the fold
  thread folds (``verify_workers``, default 2), from the texts to the fold, as the service runs;
- one honest registration (its attested document verified), amortised over many VMs' documents
  signed by one certificate (the chain's verdict cached), on one core, as a worker judges it: its
  JSON text handed over with 31 others and the job (input/verifier.py's chunks), unpickled,
  judged (``offload.registrations``) and the answers pickled; beside its verdict alone
  (``trust.registration`` of the parsed event, as this bench measured before) and its two signature
  checks alone (the registration's Ed25519 and the document's RSA, their inputs read beforehand):
  the best of ``PASSES`` passes over 300 documents each.

``--broker``: end to end as well, through the Event Hubs broker fixture (a process of its own),
Azurite and ``coordinator run`` as a subprocess with its default ``verify_workers``: every VM's
registration and ``--rounds`` signed heartbeats from each VM waiting on the hub (a cold start),
then the reports folded per second from the first to the last (``/metrics``); beside it, a bare
receive loop over the same hub (bench/coordinator_cold_start.py's: the azure-eventhub client
alone, as the coordinator's reader uses it, nothing parsed).

Prints figures; asserts nothing.

    .venv/bin/python bench/coordinator_verified.py [--vms 10000] [--events 1000] [--workers 2] [--broker]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import queue
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_figures  # noqa: E402
from bench.coordinator_fold import LIMITS, T0, burst, burst_events, fleet, heartbeat  # noqa: E402
from se_forwarder.approvals import signing  # noqa: E402
from se_forwarder.fleet.coordinator import FleetState, FoldStats  # noqa: E402
from se_forwarder.fleet.coordinator import claimed as fold_event  # noqa: E402
from se_forwarder.fleet.coordinator.config.anchors import anchors  # noqa: E402
from se_forwarder.fleet.coordinator.edge import Edge, Gate, offload, trust  # noqa: E402
from se_forwarder.fleet.coordinator.fold import Identity, Sender  # noqa: E402
from se_forwarder.fleet.coordinator.fold import identities as registrations  # noqa: E402
from se_forwarder.fleet.coordinator.input.hub_reader import Batch, Position  # noqa: E402
from se_forwarder.fleet.coordinator.input.verifier import REGISTRATIONS, Verifier  # noqa: E402
from se_forwarder.simulator.attestation import AttestationAuthority  # noqa: E402
from tests.support.forged_registrations import honest  # noqa: E402

SOURCE = "urn:se-forwarder:coordinator:bench"
GOAL = 10_000
BATCH = 300  # events per hub batch (hub_reader.MAX_BATCH)
PASSES = 7  # over the registrations, the best taken


def texts(vms: list[dict], events: int, groups: list[list[dict]]) -> list[str]:
    """A minute of heartbeats from every VM, then the burst."""
    out = [heartbeat(v, T0 + i % 60, []) for i, v in enumerate(vms)]
    return out + list(burst(burst_events(groups, events), vms))


def registered(state: FleetState, keys: dict[str, signing.Ed25519PrivateKey]) -> None:
    for vm_id, key in keys.items():
        public = signing.public_key_line(key)
        registrations.bind(state, registrations.Claim(vm_id.lower(), Identity(
            public, signing.keyid(key), T0, T0 + 6 * 3600, vm_id, "sub", T0)))


def cpu(fn) -> float:  # type: ignore[no-untyped-def]
    began = time.process_time()
    fn()
    return time.process_time() - began


def bare_loops(signed: list[bytes], keys: dict[str, signing.Ed25519PrivateKey]) -> tuple[float, float]:
    """Seconds of one core to put every report in canonical form and verify it: (OpenSSL, libsodium)."""
    events = [json.loads(t) for t in signed]
    publics = {vm: k.public_key() for vm, k in keys.items()}
    raws = {vm: signing.raw_public(k) for vm, k in keys.items()}
    import base64

    def openssl() -> None:
        for e in events:
            publics[e["vmid"]].verify(base64.b64decode(e["signature"]), signing.canonical(e))

    def sodium() -> None:
        for e in events:
            assert offload.ed25519(raws[e["vmid"]])(base64.b64decode(e["signature"]), signing.canonical(e))

    return cpu(openssl), cpu(sodium)


def signature_checks(documents: list[dict]) -> float:
    """CPU seconds of the two signature checks of each registration alone, its parts read beforehand:
    the event's Ed25519 over its canonical form (libsodium), the attested document's RSA over what it
    signs (OpenSSL): what a registration cannot cost less than."""
    import base64

    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    from se_forwarder.fleet.coordinator.edge import ed25519, signed_data

    parts = []
    for event in documents:
        raw = base64.b64decode(event["data"]["PublicKey"])
        read = signed_data.read(signed_data.unpack(event["data"]["AttestedDocument"]))
        key = read.cert.public_key()
        assert isinstance(key, rsa.RSAPublicKey)  # the bench's CA signs with RSA, as Azure does
        parts.append((ed25519.verifier(raw), base64.b64decode(event["signature"]), signing.canonical(event),
                      key, read.signature, read.message, read.hash_type()))

    def check() -> None:
        for verify, signature, body, key, document_signature, message, hashed in parts:
            assert verify(signature, body)
            key.verify(document_signature, message, padding.PKCS1v15(), hashed)

    return cpu(check)


def worker_registrations(job: offload.Job, documents: list[dict], now: float) -> float:
    """CPU seconds of a worker judging each registration as input/verifier.py hands them over:
    chunks of ``REGISTRATIONS`` JSON texts (the hub's) with the job, unpickled, judged and the
    answers pickled back (the process pool's own plumbing aside)."""
    texts = [json.dumps(d).encode() for d in documents]
    chunks = [pickle.dumps((job, [(t, now, None) for t in texts[i:i + REGISTRATIONS]]))
              for i in range(0, len(texts), REGISTRATIONS)]

    def judge() -> None:
        for chunk in chunks:
            answers = offload.registrations(*pickle.loads(chunk))
            assert all(a is not None and a[0] for a in answers)  # every one trusted
            pickle.dumps(answers)

    return cpu(judge)


def workers_cpu(verifier: Verifier) -> float:
    """CPU seconds the verifier's worker processes have used so far (Linux's /proc)."""
    pool = verifier._pool  # the bench looks inside
    ticks = 0
    for pid in list(getattr(pool, "_processes", {}) or {}):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def put(verifier: Verifier, batch: Batch) -> None:
    """``verifier.put``, tried again while its stage is full, as the hub reader does."""
    while True:
        try:
            verifier.put(batch)
            return
        except queue.Full:
            continue


def parallel(signed: list[bytes], checked: FleetState, gate: Gate, workers: int, received: float,
             job: offload.Job) -> tuple[float, float, list[str], Verifier]:
    """Wall seconds from the texts to the fold through the verifier's workers (as the service runs:
    a reader thread decodes and hands batches on, the fold thread admits them), and the CPU seconds
    the workers spent meanwhile."""
    import threading

    out: queue.Queue[Batch] = queue.Queue(maxsize=20)
    verifier = Verifier(out.put, workers, LIMITS, checked.identities.get, lambda e: False, lambda: job)
    warm = json.loads(signed[0])  # start the workers before the clock does
    verifier.put(Batch("w", [(warm, Position(0, "0", received))], time.monotonic(), [signed[0]]))
    out.get(timeout=120)
    outcomes: list[str] = []

    def read() -> None:
        for start in range(0, len(signed), BATCH):
            part = signed[start:start + BATCH]
            put(verifier, Batch("0", [(json.loads(t), Position(start + i, str(start + i), received))
                                      for i, t in enumerate(part)], time.monotonic(), list(part)))

    began, workers_began = time.perf_counter(), workers_cpu(verifier)
    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(0, len(signed), BATCH):
        batch = out.get()
        checks = batch.checked or [None] * len(batch.events)
        outcomes += [gate.admit(checked, e, received, c)
                     for (e, _), c in zip(batch.events, checks, strict=True)]
    wall = time.perf_counter() - began
    reader.join()
    return wall, workers_cpu(verifier) - workers_began, outcomes, verifier


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--broker", action="store_true", help="end to end through the broker as well")
    parser.add_argument("--rounds", type=int, default=5, help="heartbeats per VM on the hub (--broker)")
    args = parser.parse_args()
    groups = fleet(args.vms)
    vms = [v for g in groups for v in g]
    keys = {v["vmId"]: signing.generate_private_key() for v in vms}
    plain = texts(vms, args.events, groups)
    signed = [json.dumps(signing.sign(json.loads(t), keys[json.loads(t)["vmid"]])).encode() for t in plain]
    received = T0 + 60
    n = len(plain)

    loads_s = cpu(lambda: [json.loads(t) for t in plain])
    state, stats = FleetState(), FoldStats()
    parsed = [json.loads(t) for t in plain]
    fold_s = cpu(lambda: [fold_event(state, e, stats, LIMITS, received) for e in parsed])
    # As the service folds a report the edge verified: its VM registered, the sender its key.
    verified_state, verified_stats = FleetState(), FoldStats()
    senders = [Sender(e["vmid"].lower()) for e in parsed]
    registered(verified_state, keys)
    parsed = [json.loads(t) for t in plain]
    fold_verified_s = cpu(lambda: [fold_event(verified_state, e, verified_stats, LIMITS, received, sender=s)
                                   for e, s in zip(parsed, senders, strict=True)])
    openssl_s, sodium_s = bare_loops(signed, keys)

    authority = AttestationAuthority()
    given = anchors([authority.ca_file], [authority.intermediate_file])
    attested = trust.Attestation(given)
    coordinator_keys = signing.VerifyKeys([signing.generate_private_key().public_key()])

    def gate_of() -> tuple[Gate, FleetState]:
        gate, checked = Gate(Edge(SOURCE, lambda: coordinator_keys, attested, limits=LIMITS)), FleetState()
        registered(checked, keys)
        return gate, checked

    gate, checked = gate_of()
    for vm_id in keys:  # each VM's key parsed once, as for a VM heard from before
        registrations.verifier(checked, vm_id.lower())
    began, serial_cpu = time.perf_counter(), time.process_time()
    serial = [gate.admit(checked, json.loads(t), received) for t in signed]
    serial_s, serial_cpu = time.perf_counter() - began, time.process_time() - serial_cpu

    gate, checked = gate_of()
    fold_thread = time.process_time()
    job = offload.Job.of(given, None)
    wall, worker_s, outcomes, verifier = parallel(signed, checked, gate, args.workers, received, job)
    fold_thread = time.process_time() - fold_thread
    verifier.close()

    documents = [honest(authority) for _ in range(300)]
    trust.registration(honest(authority), attested, time.time())  # the chain's verdict, once
    worker_registrations(job, documents[:2], time.time())  # and in the worker's attestation
    passes = range(PASSES)  # the best of several: one pass may take a collection
    gc.collect()
    gc.freeze()  # the two folds above are no worker's: kept out of the collections a pass may take
    worker_each = min(worker_registrations(job, documents, time.time()) for _ in passes) / len(documents)
    register_each = min(cpu(lambda: [trust.registration(d, attested, time.time()) for d in documents])
                        for _ in passes) / len(documents)
    checks_each = min(signature_checks(documents) for _ in passes) / len(documents)
    gc.unfreeze()

    rows = [
        ("baseline: json.loads of the texts",
         f"{n / loads_s:,.0f} reports/s ({loads_s / n * 1e6:.1f} us each)"),
        ("baseline: bare verification loop, cryptography (OpenSSL)",
         f"{n / openssl_s:,.0f} reports/s ({openssl_s / n * 1e6:.0f} us each: canonical form + Ed25519)"),
        ("baseline: bare verification loop, PyNaCl (libsodium)",
         f"{n / sodium_s:,.0f} reports/s ({sodium_s / n * 1e6:.0f} us each)"),
        ("the fold alone, as the service folds verified reports (each from its registered VM)",
         f"{n / (loads_s + fold_verified_s):,.0f} reports/s: the fold is "
         f"{fold_verified_s / loads_s:.1f}x json.loads (goal <= 2x)"),
        ("the fold alone, unsigned reports (each VM's word read from its report)",
         f"{n / (loads_s + fold_s):,.0f} reports/s: the fold is {fold_s / loads_s:.1f}x json.loads"),
        ("serial edge: the fold thread verifies (verify_workers = 0)",
         f"{n / serial_s:,.0f} reports/s wall, {n / serial_cpu:,.0f} per CPU second "
         f"({serial_cpu / n * 1e6:.0f} us a report; {serial.count('folded'):,} folded)"),
        (f"parallel edge: {args.workers} worker processes + the fold thread",
         f"{n / wall:,.0f} reports/s ({outcomes.count('folded'):,} folded; {verifier.restarts} restarts; "
         f"goal >= {GOAL:,}/s end to end)"),
        ("  the service process's CPU in it (reader + fold thread)",
         f"{fold_thread / n * 1e6:.0f} us a report "
         f"({fold_thread / (loads_s + fold_s):.1f}x json.loads + fold)"),
        ("  the workers' CPU in it", f"{worker_s / n * 1e6:.0f} us a report"),
        ("  so, on 2 idle cores (derived from the CPU, not measured)",
         f"at most {2 * n / (fold_thread + worker_s):,.0f} reports/s"),
        ("baseline: a registration's two signature checks alone (Ed25519, the document's RSA)",
         f"{checks_each * 1e3:.2f} ms of one core"),
        ("one honest registration, chain cached, as a worker judges it (text to answer)",
         f"{worker_each * 1e3:.2f} ms of one core, {worker_each / checks_each:.1f}x its signature "
         f"checks, {(worker_each - checks_each) * 1e6:.0f} us above them (goal <= 0.3 ms)"),
        ("  its verdict alone (trust.registration of the parsed event)",
         f"{register_each * 1e3:.2f} ms, {(register_each - checks_each) * 1e6:.0f} us above its checks"),
        ("fold states equal", str(sorted(state.vms) == sorted(checked.vms)
                                  and sorted(state.events) == sorted(checked.events))),
    ]
    if args.broker:
        rows += through_broker(vms, args.rounds)
    print_figures(f"coordinator edge, {args.vms:,} VMs, {args.events} platform events, {n:,} signed reports, "
                  f"{os.cpu_count()} cores (CPython {sys.version.split()[0]})", rows)
    return 0


def through_broker(vms: list[dict], rounds: int) -> list[tuple[str, str]]:
    """A cold start through the broker: (registrations + rounds x heartbeats) folded per second."""
    import requests

    from bench.common import end
    from bench.coordinator_cold_start import bare_receive
    from bench.coordinator_e2e import BrokerProcess, Publisher, start_coordinator
    from bench.coordinator_e2e import heartbeat as e2e_heartbeat
    from bench.fleet_identities import Identities
    from tests.azurite import Azurite
    from tests.support.ports import free_port

    base = Path(tempfile.mkdtemp(prefix="coordinator-verified-"))
    broker, blob, queues = BrokerProcess(), Azurite("blob", workdir=base), Azurite("queue", workdir=base)
    broker.start()
    blob.start()
    queues.start()
    proc = None
    try:
        identities = Identities(vms, base)
        publisher = Publisher(broker.connection_string(), identities.sign)
        t0 = time.time()
        publisher.register([(i, identities.registration(v)) for i, v in enumerate(vms)])
        for r in range(rounds):
            publisher.send([(i, e2e_heartbeat(v, t0 - (rounds - r) * 60 + i % 60))
                            for i, v in enumerate(vms)])
        publisher.close()
        total = len(vms) * (rounds + 1)
        bare_s, bare_cpu = bare_receive(broker.connection_string(), total)
        port = free_port()
        log = base / "coordinator.log"
        proc = start_coordinator(base, port, broker.connection_string(), blob, queues, log,
                                 identities.trust_config(), "warning")
        http = requests.Session()
        http.trust_env = False
        first = last = None
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                text = http.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            except requests.RequestException:
                time.sleep(0.2)
                continue
            # reports folded, skipped or refused, and registrations bound (identities, a gauge)
            done = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith(("se_forwarder_coordinator_folded_total{",
                                           "se_forwarder_coordinator_skipped_total{",
                                           "se_forwarder_coordinator_refused_total{",
                                           "se_forwarder_coordinator_identities ")))
            now = time.monotonic()
            if done > 0 and first is None:
                first = (now, done)
            if done >= total:
                last = (now, done)
                break
            time.sleep(0.1)
        if first is None or last is None:
            return [("through the broker", f"not read in 15 minutes: {log.read_text()[-800:]}")]
        rate = (last[1] - first[1]) / max(last[0] - first[0], 1e-6)
        return [("baseline: bare receive loop over the same hub (azure-eventhub)",
                 f"{total / bare_s:,.0f} events/s ({bare_cpu / total * 1e6:.0f} us of CPU an event, "
                 "nothing parsed)"),
                ("through the broker: cold start, coordinator run",
                 f"{rate:,.0f} events/s ({len(vms):,} registrations + {len(vms) * rounds:,} signed "
                 "heartbeats; "
                 f"goal >= {GOAL:,}/s)")]
    finally:
        end(proc)
        queues.stop()
        blob.stop()
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
