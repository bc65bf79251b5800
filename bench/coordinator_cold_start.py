"""A coordinator's cold start and snapshot start at fleet scale, through the Event Hubs broker fixture.

What runs, all on this one machine: the local AMQP broker (tests/eventhubs/broker.py, 4 partitions,
a process of its own), Azurite blob (lease, snapshot) and queue, and ``se-forwarder coordinator run``
as a subprocess with its defaults (``verify_workers`` unless ``--workers`` names it, ``[limits]``),
trusting a per-run CA as a real coordinator trusts Azure's (bench/fleet_identities.py's way).

1. The hub holds every VM's registration (its attested document, signed by the key it registers)
   and then one signed heartbeat from every VM: what a coordinator finds when it starts for the
   first time under a running fleet, or after a fleet-wide agent restart.
2. The baseline, same run: a bare receive loop over the same hub (the azure-eventhub client's
   ``receive_batch`` on every partition, one thread each, as the coordinator reads), events per
   second and seconds to read them all; nothing parsed.
3. Cold start: ``coordinator run`` with no snapshot. From the process's start: seconds until it
   acts (it leads and has read the hub to its end: its log's line, and ``/metrics``' ``acting``,
   which answers only between the service's turns), and until every VM is known (``vms`` and
   ``identities``).
4. Snapshot start: the coordinator is stopped (SIGTERM: it saves its snapshot at a clean stop) and
   started again; the same figures, from the snapshot.

The documents (and the VMs' keys) are made once, in parallel, and kept under ``--cache`` (default
``.cache/coordinator-cold-start``) with the CA that signed them; they are made again when they
would expire within a day (this bench's CA gives them a week, Azure's live six hours). The
heartbeats are signed at every run.

``--in-process N``: instead, the service's side of a cold start without the hub: the first N
registrations, then those VMs' heartbeats, decoded as the reader decodes them, through the
verifier's 2 worker processes and the gate, 300 to a batch; the CPU of the service's interpreter and
of the workers an event, beside ``json.loads`` of the same texts.

Prints figures beside the baseline; asserts nothing.

    .venv/bin/python bench/coordinator_cold_start.py [--vms 100000] [--cache DIR] [--in-process N]
        [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, end, print_figures  # noqa: E402
from bench.coordinator_e2e import PARTITIONS, BrokerProcess, Publisher, write_config  # noqa: E402
from bench.coordinator_e2e import heartbeat as e2e_heartbeat  # noqa: E402
from bench.coordinator_fold import fleet  # noqa: E402
from se_forwarder.approvals import signing  # noqa: E402

GOAL_COLD, GOAL_SNAPSHOT = 60.0, 20.0  # s to acting (issue 34)
LIFETIME = 7 * 86400.0  # the bench CA's documents
RENEW = 86400.0  # documents made again when they expire within this
WAIT = 1800.0  # s at most for a start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=100_000)
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "coordinator-cold-start")
    parser.add_argument("--in-process", type=int, default=0, metavar="N", help="the service's side alone")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="[trust] verify_workers (default: the coordinator's)")
    args = parser.parse_args()
    vms = [v for g in fleet(args.vms) for v in g]
    began = time.monotonic()
    cache = Documents(args.cache, vms)
    if args.in_process:
        return in_process(cache, vms[:args.in_process])
    made = time.monotonic() - began
    base = Path(tempfile.mkdtemp(prefix="coordinator-cold-start-"))
    print(f"working in {base}; documents {'made' if cache.made else 'read'} in {made:.0f} s", file=sys.stderr)
    from tests.azurite import Azurite

    broker, blob, queues = BrokerProcess(), Azurite("blob", workdir=base), Azurite("queue", workdir=base)
    broker.start()
    blob.start()
    queues.start()
    rows: list[tuple[str, str]] = []
    try:
        hub = broker.connection_string()
        publisher = Publisher(hub, cache.sign)
        t0, published = time.time(), time.monotonic()
        for start in range(0, len(vms), 5000):
            stop = min(start + 5000, len(vms))
            publisher.register([(i, cache.registrations[i]) for i in range(start, stop)])
        publisher.send([(i, e2e_heartbeat(v, t0 + i % 60)) for i, v in enumerate(vms)])
        publisher.close()
        total = 2 * len(vms)
        rows.append(("the hub", f"{len(vms):,} registrations + {len(vms):,} signed heartbeats "
                     f"({total:,} events, {PARTITIONS} partitions), published in "
                     f"{time.monotonic() - published:.0f} s"))
        seconds, cpu = bare_receive(hub, total)
        rows.append(("baseline: bare receive loop (azure-eventhub)",
                     f"{total / seconds:,.0f} events/s: all read in {seconds:.1f} s "
                     f"({cpu / total * 1e6:.0f} us of CPU an event)"))
        log = base / "coordinator.log"
        trust = ("[trust]\n"
                 f'attestation_roots = ["{cache.root}"]\n'
                 f'attestation_intermediates = ["{cache.intermediate}"]\n'
                 "fetch_intermediates = false\n"
                 + (f"verify_workers = {args.workers}\n" if args.workers is not None else ""))
        from tests.support.ports import free_port

        port = free_port()
        config = write_config(base, port, trust, "info")  # one key for both: the second reads the snapshot
        for label, goal in (("cold start", GOAL_COLD), ("snapshot start", GOAL_SNAPSHOT)):
            started, wall = time.monotonic(), time.time()
            proc = run_coordinator(config, hub, blob, queues, log)
            try:
                acting, known, (cpu_s, own_s) = watch(proc, port, len(vms), started)
            finally:
                end(proc, 120)
            said = _acted(log, wall)
            rows.append((f"{label}: to acting", f"{_s(said)} by its log, {_s(acting)} by /metrics "
                         f"(goal <= {goal:.0f} s)"))
            rows.append((f"{label}: to all {len(vms):,} VMs known", f"{_s(known)}; coordinator CPU "
                         f"{cpu_s:.0f} s: its own process {own_s:.1f} s "
                         f"({own_s / total * 1e6:.0f} us an event), its workers {cpu_s - own_s:.1f} s"))
        rows.append(("coordinator log", _said(log)))
    finally:
        queues.stop()
        blob.stop()
        broker.stop()
    print_figures(f"coordinator cold start, {len(vms):,} VMs, {os.cpu_count()} cores, load average "
                  f"{os.getloadavg()[0]:.1f} at the end (CPython {sys.version.split()[0]})", rows)
    return 0


def in_process(cache: Documents, vms: list[dict[str, Any]]) -> int:
    """The service's side of a cold start (module docstring, ``--in-process``)."""
    import queue
    from types import SimpleNamespace

    from bench.coordinator_fold import LIMITS
    from bench.coordinator_verified import SOURCE, put, workers_cpu
    from se_forwarder.fleet.coordinator import FleetState
    from se_forwarder.fleet.coordinator.config.anchors import anchors
    from se_forwarder.fleet.coordinator.edge import Edge, Gate, offload, trust
    from se_forwarder.fleet.coordinator.input.hub_reader import Batch, Position, decode_text
    from se_forwarder.fleet.coordinator.input.verifier import Verifier

    t0 = time.time()
    texts = [t.encode() for t in cache.registrations[:len(vms)]]
    texts += [cache.sign(e2e_heartbeat(v, t0 + i % 60)).encode() for i, v in enumerate(vms)]
    given = anchors([cache.root], [cache.intermediate])
    keys = signing.VerifyKeys([signing.generate_private_key().public_key()])
    state, gate = FleetState(), Gate(Edge(SOURCE, lambda: keys, trust.Attestation(given), limits=LIMITS))
    out: queue.Queue[Batch] = queue.Queue(maxsize=20)
    verifier = Verifier(out.put, 2, LIMITS, state.identities.get, lambda e: gate.known(state, e),
                        lambda: offload.Job.of(given, None))
    loads = time.process_time()
    for text in texts:
        json.loads(text)
    loads = time.process_time() - loads
    time.sleep(10)  # both workers started (each imports the coordinator) before the clock starts

    def read() -> None:
        for start in range(0, len(texts), 300):
            kept: list[bytes | None] = list(texts[start:start + 300])
            part = [decode_text(SimpleNamespace(properties={}, body=t))[0] for t in kept]
            events = [(e, Position(start + i, str(start + i), t0)) for i, e in enumerate(part)]
            put(verifier, Batch("0", events, time.monotonic(), kept))

    began, own, workers = time.perf_counter(), time.process_time(), workers_cpu(verifier)
    reader = threading.Thread(target=read)
    reader.start()
    outcomes: dict[str, int] = {}
    for _ in range(0, len(texts), 300):
        batch = out.get()
        checks = batch.checked or [None] * len(batch.events)
        for (event, _), checked in zip(batch.events, checks, strict=True):
            outcome = gate.admit(state, event, t0, checked) if event is not None else "not read"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    wall, own, workers = (time.perf_counter() - began, time.process_time() - own,
                          workers_cpu(verifier) - workers)
    reader.join()
    verifier.close()
    n = len(texts)
    print_figures(f"the service's side of a cold start in process, {len(vms):,} VMs, load average "
                  f"{os.getloadavg()[0]:.1f} at the end (CPython {sys.version.split()[0]})", [
        ("baseline: json.loads of the texts", f"{loads / n * 1e6:.1f} us an event"),
        ("registrations then heartbeats, 2 workers", f"{n:,} events in {wall:.1f} s: {outcomes}"),
        ("  the service's interpreter (reader + fold thread)", f"{own / n * 1e6:.0f} us of CPU an event "
         f"({own / loads:.1f}x json.loads)"),
        ("  the workers", f"{workers / n * 1e6:.0f} us of CPU an event")])
    return 0


def run_coordinator(config: Path, hub: str, blob: Any, queues: Any, log: Path) -> subprocess.Popen[bytes]:
    """``coordinator run`` with ``config`` (bench/coordinator_e2e.py's), logging to ``log``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BENCH_EH": hub, "BENCH_BLOB": blob.connection_string,
           "BENCH_QUEUE": queues.connection_string}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "se_forwarder", "coordinator", "run", "--config",
                                 str(config)], cwd=ROOT, env=env, stdout=out, stderr=out)


class Documents:
    """Every VM's key and registration (its identity event as JSON text), made once and cached with
    the CA that signed them."""

    def __init__(self, directory: Path, vms: list[dict[str, Any]]) -> None:
        self.vms, self.made = vms, False
        directory = directory / f"{len(vms)}"
        self.root = directory / "attestation-root.pem"
        self.intermediate = directory / "attestation-intermediate.pem"
        index = directory / "registrations.jsonl"
        meta = directory / "made.json"
        fresh = meta.exists() and json.loads(meta.read_text()).get("expires", 0) > time.time() + RENEW
        if not (fresh and index.exists() and self.root.exists()):
            make(directory, vms)
            self.made = True
        self.keys: dict[str, signing.Ed25519PrivateKey] = {}
        self.registrations: list[str] = []
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        with open(index, encoding="utf-8") as lines:
            for line in lines:
                vm_id, key, text = json.loads(line)
                self.keys[vm_id] = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(key))
                self.registrations.append(text)

    def sign(self, text: str) -> str:
        event = json.loads(text)
        return json.dumps(signing.sign(event, self.keys[event["vmid"]]))


_AUTHORITY: Any = None


def make(directory: Path, vms: list[dict[str, Any]]) -> None:
    """Make every VM's key and registration in worker processes (forked with the CA)."""
    import multiprocessing

    from se_forwarder.simulator.attestation import AttestationAuthority

    global _AUTHORITY
    directory.mkdir(parents=True, exist_ok=True)
    _AUTHORITY = AttestationAuthority(directory=directory, lifetime=LIFETIME)
    _AUTHORITY.ca_file, _AUTHORITY.intermediate_file  # noqa: B018 - written now
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 2) as pool, \
            open(directory / "registrations.jsonl.tmp", "w", encoding="utf-8") as out:
        for line in pool.imap(_registration, vms, chunksize=200):
            out.write(line + "\n")
    (directory / "registrations.jsonl.tmp").replace(directory / "registrations.jsonl")
    (directory / "made.json").write_text(json.dumps({"expires": time.time() + LIFETIME}))


def _registration(vm: dict[str, Any]) -> str:
    """One VM's registration as the agent builds it (bench/fleet_identities.py), with its key."""
    from cryptography.hazmat.primitives import serialization

    from bench.fleet_identities import Identities

    key = signing.generate_private_key()
    identities = Identities.__new__(Identities)
    identities.vms, identities.authority, identities.keys = [vm], _AUTHORITY, {vm["vmId"]: key}
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    return json.dumps([vm["vmId"], raw.hex(), identities.registration(vm)])


def bare_receive(hub: str, total: int) -> tuple[float, float]:
    """Seconds (wall) and CPU seconds of this process to receive ``total`` events from every
    partition, one client and thread per partition, as the coordinator's reader does."""
    from azure.eventhub import EventHubConsumerClient

    counted = [0]
    lock, done = threading.Lock(), threading.Event()

    def on_batch(_context: Any, events: list[Any]) -> None:
        with lock:
            counted[0] += len(events)
            if counted[0] >= total:
                done.set()

    clients = [EventHubConsumerClient.from_connection_string(hub, consumer_group="$Default")
               for _ in range(PARTITIONS)]
    began, cpu = time.monotonic(), time.process_time()
    threads = [threading.Thread(target=c.receive_batch, daemon=True, kwargs={
        "on_event_batch": on_batch, "partition_id": str(p), "starting_position": "-1",
        "max_batch_size": 300, "prefetch": 50, "max_wait_time": None}) for p, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    done.wait(WAIT)
    seconds, cpu = time.monotonic() - began, time.process_time() - cpu
    for client in clients:
        client.close()
    return seconds, cpu


def watch(proc: Any, port: int, vms: int, started: float
          ) -> tuple[float | None, float | None, tuple[float, float]]:
    """Seconds from ``started`` until ``/metrics`` says it acts and until every VM is known, and the
    coordinator's CPU seconds by then: with its workers, and of its own process (the service's
    interpreter: readers, verifier's hand-over, fold)."""
    import psutil
    import requests

    http = requests.Session()
    http.trust_env = False
    acting = known = None
    deadline = started + WAIT
    cpu, own, said = 0.0, 0.0, 0.0
    while time.monotonic() < deadline and proc.poll() is None and (acting is None or known is None):
        try:
            text = http.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        except requests.RequestException:
            time.sleep(0.2)
            continue
        figures = {line.split(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("se_forwarder_coordinator_") and "{" not in line.split(" ", 1)[0]}
        now = time.monotonic() - started
        if now - said >= 5:
            said = now
            shown = ", ".join(f"{k} {figures.get(PREFIX + k, 0):,.0f}"
                              for k in ("acting", "vms", "identities", "waiting"))
            print(f"  {now:5.0f} s: {shown}, folded {folded(text):,.0f}", file=sys.stderr)
        if acting is None and figures.get("se_forwarder_coordinator_acting") == 1:
            acting = now
        if known is None and figures.get("se_forwarder_coordinator_vms", 0) >= vms \
                and figures.get("se_forwarder_coordinator_identities", 0) >= vms:
            known = now
        try:
            main = psutil.Process(proc.pid)
            every = (main, *main.children(recursive=True))
            times = [p.cpu_times() for p in every]
            cpu, own = sum(t.user + t.system for t in times), times[0].user + times[0].system
        except psutil.Error:
            pass
        time.sleep(0.2)
    return acting, known, (cpu, own)


PREFIX = "se_forwarder_coordinator_"


def folded(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(PREFIX + "folded_total{"))


def _s(value: float | None) -> str:
    return f"{value:.1f} s" if value is not None else f"not within {WAIT:.0f} s"


def _acted(log: Path, since: float) -> float | None:
    """Seconds from ``since`` (epoch) to the log's first "acts as the leader" line after it: the
    service says so on its own thread, while ``/metrics`` may wait for that thread's first pass."""
    from datetime import datetime

    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
            when = datetime.fromisoformat(record["time"].replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if when >= since and str(record.get("message", "")).startswith("this instance acts as the leader"):
            return when - since
    return None


def _said(log: Path) -> str:
    """The lines that say how each start went (restored, acting), in short."""
    said = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            message = json.loads(line).get("message", "")
        except ValueError:
            continue
        if any(k in message for k in ("restored", "no snapshot", "acts as the leader", "refused", "dropped")):
            said.append(message[:140])
    return " | ".join(said[-6:]) or "-"


if __name__ == "__main__":
    sys.exit(main())
