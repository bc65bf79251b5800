"""The coordinator's pure core at fleet scale: fold throughput, decision-pass latency, memory.

10,000 VMs (800 availability sets of 10, 40 scale sets of 50 over 3 zones) send three minutes of
heartbeats; then a burst of 1,000 platform events (one VM each), each reported by every VM of its
group, with the heartbeats going on; then a rollout: a decision pass every 10 s of fleet time while
approved events start and complete 20 s later. Budgets: group 1, fault and update domain 1, zone
10%, fleet 5%.
Events are structured CloudEvent JSON texts as the hub delivers them. The burst is folded as the
service takes it: in turns of at most 5,000 events or 0.25 s, each followed by the turn's upkeep
(the scope index and /v1/state's digest brought up to date, service.py), timed apart; so is each
step of the rollout before its pass. ``fold_json`` and ``evaluate`` (plus folding the decisions
back) are timed. ``json.loads`` of the same texts is the baseline: the fold cannot be faster than
parsing. Prints figures; asserts nothing.

    .venv/bin/python bench/coordinator_fold.py [--vms 10000] [--only-snapshot]

``--only-snapshot`` goes from the rollout straight to the snapshot's save and load.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import itertools
import json
import resource
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, overload

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_figures  # noqa: E402
from se_forwarder.approvals import signing  # noqa: E402
from se_forwarder.fleet.coordinator import (  # noqa: E402
    FleetState,
    FoldStats,
    evaluate,
    fold_json,
    load_policy,
    to_json,
)
from se_forwarder.fleet.coordinator.config import Limits  # noqa: E402
from se_forwarder.fleet.coordinator.decide import Decision, signed, to_dict  # noqa: E402
from se_forwarder.fleet.coordinator.decide.scopes import index  # noqa: E402
from se_forwarder.fleet.coordinator.edge import trust  # noqa: E402
from se_forwarder.fleet.coordinator.fold.dispatch import OWN, fold_event  # noqa: E402
from se_forwarder.fleet.coordinator.fold.snapshot import pieces, snapshot, written  # noqa: E402
from se_forwarder.fleet.coordinator.ha.keeper import freeze  # noqa: E402
from se_forwarder.fleet.coordinator.ha.snapshot_blob import LEVEL, SnapshotBlob  # noqa: E402
from se_forwarder.fleet.coordinator.input.hub_reader import Position  # noqa: E402
from se_forwarder.fleet.coordinator.input.inbox import CHUNK, TURN_EVENTS, TURN_SECONDS  # noqa: E402
from se_forwarder.fleet.coordinator.view.alerts import derive  # noqa: E402
from se_forwarder.fleet.coordinator.view.digest import Digest  # noqa: E402

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp()
T_BURST = T0 + 180
SUB = "11111111-2222-3333-4444-555555555555"
SOURCE = "urn:se-forwarder:coordinator:bench"
POLICY = load_policy({
    "policy": {"approve_within": "2h", "min_healthy": "2m"},
    "budgets": [
        {"scope": "group", "max_unavailable": 1}, {"scope": "zone", "max_unavailable": "10%"},
        {"scope": "fault_domain", "max_unavailable": 1}, {"scope": "update_domain", "max_unavailable": 1},
        {"scope": "fleet", "max_unavailable": "5%"},
    ],
})


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def fleet(count: int) -> list[list[dict]]:
    """Groups of VMs (their data.Vm): availability sets of 10, then scale sets of 50 in zones."""
    return [list(group) for group in compact_fleet(count)]


Row = tuple[str, str, str, str, str, str]  # vm's arguments


class Rows(Sequence[dict]):
    """VMs kept as the numbers of their rows (``row``: ``vm``'s arguments) and made into their
    data.Vm when read: 100,000 dicts held by the bench would add 110 MB to the RSS it reports as the
    coordinator's, and 100,000 rows 16 MB."""

    def __init__(self, count: int, numbers: range) -> None:
        self.size, self.numbers = count, numbers

    def __len__(self) -> int:
        return len(self.numbers)

    @overload
    def __getitem__(self, i: int) -> dict: ...

    @overload
    def __getitem__(self, i: slice) -> Rows: ...

    def __getitem__(self, i: int | slice) -> dict | Rows:
        if isinstance(i, slice):
            return Rows(self.size, self.numbers[i])
        return vm(*row(self.size, self.numbers[i]))


def row(count: int, n: int) -> Row:
    """The arguments of VM number ``n`` of ``compact_fleet(count)``."""
    intern, avsets = sys.intern, int(count * 0.8) // 10
    if n < avsets * 10:
        g, i = divmod(n, 10)
        return f"web{g}-{i}", intern(f"rg-{g % 50}"), "", "", str(i % 3), str(i % 5)
    s, i = divmod(n - avsets * 10, 50)
    zone, domain = str(i % 3 + 1), str(i % 5)
    return f"ss{s}_{i}", intern(f"rg-ss{s % 10}"), zone, intern(f"ss{s}"), domain, domain


def compact_fleet(count: int) -> list[Rows]:
    """``fleet``'s groups (availability sets of 10, then scale sets of 50 in zones), each VM made
    into its data.Vm only when read."""
    avsets = int(count * 0.8) // 10
    bounds = [*range(0, avsets * 10, 10), *range(avsets * 10, count, 50), count]
    return [Rows(count, range(a, b)) for a, b in itertools.pairwise(bounds) if b > a]


def vm(name: str, rg: str, zone: str, scale_set: str, fd: str, ud: str) -> dict:
    vm_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{rg}/{name}"))
    return {"vmId": vm_id, "name": name, "resourceId": f"/subscriptions/{SUB}/resourceGroups/{rg}/providers/"
            f"Microsoft.Compute/virtualMachines/{name}", "subscriptionId": SUB, "resourceGroupName": rg,
            "location": "westeurope", "zone": zone, "vmScaleSetName": scale_set, "platformFaultDomain": fd,
            "platformUpdateDomain": ud, "placementGroupId": "", "tags": {}, "complete": True}


def heartbeat(v: dict, t: float, events: list[dict]) -> str:
    return json.dumps({
        "specversion": "1.0", "type": "com.azure.scheduledevents.heartbeat",
        "id": f"heartbeat/{v['vmId']}/{int(t)}", "source": v["resourceId"], "subject": v["vmId"],
        "time": iso(t), "datacontenttype": "application/json", "vmid": v["vmId"],
        "data": {"AgentVersion": "0.2.0", "HeartbeatInterval": 60, "LastPollUtc": iso(t),
                 "DocumentIncarnation": 4, "Events": events, "EnrichmentComplete": True,
                 "Backlog": {"hub": 0}, "Vm": v},
    })


def transition(state: str, v: dict, event_id: str, names: list[str], t: float, not_before: float) -> str:
    status = "Started" if state in ("started", "completed") else "Scheduled"
    nb = iso(not_before) if status == "Scheduled" else None
    return json.dumps({
        "specversion": "1.0", "type": f"com.azure.scheduledevents.{state}", "id": f"{event_id}/{state}",
        "source": v["resourceId"], "subject": event_id, "time": iso(t), "datacontenttype": "application/json",
        "eventtype": "Reboot", "eventstatus": status, "incarnation": 4, "vmid": v["vmId"],
        "data": {"EventId": event_id, "EventType": "Reboot", "ResourceType": "VirtualMachine",
                 "Resources": names, "EventStatus": status, "NotBefore": "", "Description": "maintenance",
                 "EventSource": "Platform", "DurationInSeconds": 9, "NotBeforeUtc": nb,
                 "DocumentIncarnation": 4, "AffectsThisVm": v["name"] in names, "Vm": v},
    })


# The whole fleet joins in its first minute here (as if restored from a snapshot); on a hub, a real
# fleet's history spreads over hours, which the default limits admit (1,000 new VMs a minute).
LIMITS = Limits(new_vms_per_minute=1_000_000)


class FileBlob:
    """A container of one blob in a temporary file: what SnapshotBlob writes and reads, without a
    network. The body is not held in memory: Azure holds the service's, and 12.8 MB of it at
    100,000 VMs was counted in the RSS the bench reports as the coordinator's."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile()  # noqa: SIM115 (open as long as the blob)

    def get_blob_client(self, _name: str) -> FileBlob:
        return self

    def upload_blob(self, body: bytes, **_: object) -> None:
        self.file.seek(0)
        self.file.truncate()
        self.file.write(body)

    def download_blob(self, **_: object) -> FileBlob:
        return self

    def readall(self) -> bytes:
        self.file.seek(0)
        return self.file.read()


class Folder:
    def __init__(self, limits: Limits = LIMITS) -> None:
        self.state, self.stats, self.limits = FleetState(), FoldStats(), limits
        self.fold_seconds = self.parse_seconds = 0.0
        self.count = 0
        self.upkeep_seconds = 0.0  # turns' upkeep (``upkeep``)
        self.turn_max = self.upkeep_max = 0.0

    def upkeep(self) -> None:
        """What the service does after each turn of folding (service.py's ``_fold_available``): the
        scope index and /v1/state's digest brought up to date with what the turn changed; seconds."""
        began = time.perf_counter()
        index(self.state, POLICY)
        Digest().of(self.state)
        spent = time.perf_counter() - began
        self.upkeep_seconds += spent
        self.upkeep_max = max(self.upkeep_max, spent)

    def turns(self, texts: Iterator[str]) -> None:
        """``texts`` folded as the service takes them (input/inbox.py): in turns of at most
        TURN_EVENTS events or TURN_SECONDS, the clock looked at every CHUNK events, each turn followed
        by its ``upkeep``; ``turn_max``: the longest turn, its folding and upkeep."""
        began, taken = time.perf_counter(), 0
        while chunk := list(itertools.islice(texts, CHUNK)):
            self.feed(iter(chunk))
            taken += len(chunk)
            if taken >= TURN_EVENTS or time.perf_counter() - began >= TURN_SECONDS:
                self.upkeep()
                self.turn_max = max(self.turn_max, time.perf_counter() - began)
                began, taken = time.perf_counter(), 0
        if taken:
            self.upkeep()
            self.turn_max = max(self.turn_max, time.perf_counter() - began)

    def feed(self, texts: Iterator[str], received: float | None = None) -> None:
        for text in texts:
            began = time.perf_counter()
            json.loads(text)
            middle = time.perf_counter()
            fold_json(self.state, text, self.stats, self.limits, received)
            self.fold_seconds += time.perf_counter() - middle
            self.parse_seconds += middle - began
            self.count += 1


def high_water(reset: bool = False) -> float:
    """The process's peak RSS in MB since the last reset (Linux's VmHWM; reset through clear_refs),
    else since it began."""
    try:
        if reset:
            Path("/proc/self/clear_refs").write_text("5")
        status = Path("/proc/self/status").read_text()
        return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1e3
    except (OSError, StopIteration, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# EventId, the VMs that see it, affected names, NotBefore
Event = tuple[str, Sequence[dict], list[str], float]


def heartbeat_minutes(folder: Folder, vms: Sequence[dict], minutes: int = 3,
                      between: Callable[[int], None] | None = None) -> None:
    """``minutes`` minutes of heartbeats from every VM; ``between(minute)`` after each."""
    for minute in range(minutes):
        folder.feed(heartbeat(v, T0 + minute * 60 + i % 60, []) for i, v in enumerate(vms))
        if between is not None:
            between(minute)


def burst_events(groups: Sequence[Sequence[dict]], count: int) -> list[Event]:
    """One platform event per group in turn (one VM each), due 10 to 58 minutes after the burst."""
    events: list[Event] = []
    for e in range(count):
        members = groups[e % len(groups)]
        affected = [members[(e // len(groups)) % len(members)]]
        events.append((f"EV-{e:05d}", members, [a["name"] for a in affected], T_BURST + 600 + (e % 97) * 30))
    return events


def burst(events: list[Event], vms: Sequence[dict]) -> Iterator[str]:
    """Each event reported by every VM of its group, about 170 heartbeats a second alongside."""
    beat = 0
    for k, (event_id, members, names, nb) in enumerate(events):
        for v in members:
            yield transition("scheduled", v, event_id, names, T_BURST + k * 0.001, nb)
        for _ in range(len(members) // 12 + 1):
            v = vms[beat % len(vms)]
            beat += 1
            yield heartbeat(v, T_BURST + 1, [])


SAMPLE = 500  # decisions signed and checked at the end


class Collections:
    """CPU seconds the garbage collector spends, summed from gc.callbacks while ``with``."""

    def __init__(self) -> None:
        self.seconds, self._began = 0.0, 0.0

    def __call__(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._began = time.process_time()
        else:
            self.seconds += time.process_time() - self._began

    def __enter__(self) -> Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


@dataclass
class Rollout:
    latencies: list[float]
    first: tuple[float, int, float, float]  # the first pass: seconds, decisions, CPU seconds, the collector's
    cpus: list[float]  # CPU seconds of each pass
    approvals: int
    decisions: int
    pending: int
    made: list[Decision]  # the first SAMPLE decisions of the passes, in order


def rollout(folder: Folder, events: list[Event], vms: Sequence[dict], steps: int = 60) -> Rollout:
    """A decision pass every 10 s of fleet time (timed, with folding its decisions); approved events
    start and complete 20 s later; heartbeats go on."""
    by_id = {event_id: (members, names, nb) for event_id, members, names, nb in events}
    latencies: list[float] = []
    cpus: list[float] = []
    approvals = decisions = 0
    made: list[Decision] = []
    now = T_BURST + 30
    running: list[tuple[str, float]] = []
    first = (0.0, 0, 0.0, 0.0)
    share = -(-len(vms) // 6)  # every VM once a minute: 60 s heartbeats
    collections = Collections()
    for step in range(steps):
        now += 10
        folder.feed(heartbeat(v, now, []) for v in vms[(step * share) % len(vms):][:share])
        done = [(e, t) for e, t in running if t <= now]
        running = [(e, t) for e, t in running if t > now]
        texts = []
        for event_id, _ in done:
            members, names, nb = by_id[event_id]
            affected = [v for v in members if v["name"] in names]
            texts += [transition("started", v, event_id, names, now - 5, nb) for v in affected]
            texts += [transition("completed", v, event_id, names, now, nb) for v in affected]
        folder.feed(iter(texts))
        folder.upkeep()  # the turn's, before the pass (timed apart)
        began, cpu, collected = time.perf_counter(), time.process_time(), collections.seconds
        with collections:
            result = evaluate(folder.state, POLICY, now)
            for decision in result.decisions:  # as the service folds them: the dict, not its text
                fold_event(folder.state, to_dict(decision, SOURCE), sender=OWN)
        latencies.append(time.perf_counter() - began)
        cpus.append(time.process_time() - cpu)
        if step == 0:
            first = (latencies[0], len(result.decisions), time.process_time() - cpu,
                     collections.seconds - collected)
        decisions += len(result.decisions)
        made += result.decisions[:SAMPLE - len(made)]
        fresh = [d for d in result.decisions if d.kind == "approve"]
        approvals += len(fresh)
        running += [(d.event_id or "", now + 20) for d in fresh]
    pending = sum(1 for v in result.verdicts.values() if v.code != "approved")
    return Rollout(latencies, first, cpus, approvals, decisions, pending, made)


PASSES_PER_SECOND = 20  # the service's pass cadence while input keeps arriving (service.PASS_EVERY)


def steady(folder: Folder, vms: Sequence[dict], start: float, seconds: int = 30,
           ) -> tuple[float, float, float]:
    """``seconds`` of fleet time with 60 s heartbeats as the service takes them: each second a
    sixtieth of the fleet folded in ``PASSES_PER_SECOND`` turns, a decision pass and a look at
    /v1/state's digest after each. CPU seconds per second of fleet time: the whole, the digest's
    share, and json.loads of the same texts."""
    share, turn = -(-len(vms) // 60), -(-len(vms) // 60 // PASSES_PER_SECOND)
    digest = Digest()
    digest.of(folder.state)  # the first look hashes the whole fold (a start, a restore): timed apart
    cpu = digest_cpu = parse_cpu = 0.0
    for second in range(seconds):
        now = start + second
        texts = [heartbeat(v, now, []) for v in vms[(second * share) % len(vms):][:share]]
        began = time.process_time()
        for text in texts:
            json.loads(text)
        parse_cpu += time.process_time() - began
        began = time.process_time()
        for k in range(0, len(texts), turn):
            folder.feed(iter(texts[k:k + turn]))
            result = evaluate(folder.state, POLICY, now)
            for decision in result.decisions:
                fold_event(folder.state, to_dict(decision, SOURCE), sender=OWN)
            looked = time.process_time()
            digest.of(folder.state)
            digest_cpu += time.process_time() - looked
        cpu += time.process_time() - began
    return cpu / seconds, digest_cpu / seconds, parse_cpu / seconds


def read_models(folder: Folder, vms: Sequence[dict], rows: list[tuple[str, str]]) -> None:
    """/v1/state's digest and the alerts' derivation at this size, beside the old whole-fold hash."""
    state = folder.state
    state.journal = None  # as at a start or a restore: nothing kept yet
    began = time.perf_counter()
    kept = Digest()
    kept.of(state)
    whole_s = time.perf_counter() - began
    now, looks = T_BURST + 760, []
    for count in (len(vms) // 60 // PASSES_PER_SECOND, len(vms) // 60):  # a pass's heartbeats, a second's
        folder.feed(heartbeat(v, now, []) for v in vms[:count])
        began = time.perf_counter()
        kept.of(state)
        looks.append((count, time.perf_counter() - began))
    began = time.perf_counter()
    hashlib.sha256(json.dumps(snapshot(state), sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    old_s = time.perf_counter() - began
    (turn, turn_s), (second, second_s) = looks
    rows.append(("/v1/state digest, a look as the service makes it",
                 f"{turn_s * 1000:.1f} ms after a pass's {turn} heartbeats (goal <= 10 ms), "
                 f"{second_s * 1000:.1f} ms after a second's {second}; made whole at a start or restore "
                 f"{whole_s:.2f} s; baseline, the whole fold's JSON hashed as before: {old_s:.2f} s"))
    evaluation = evaluate(state, POLICY, now)
    began = time.perf_counter()
    found = derive(state, evaluation)
    rows.append(("alerts derived from the fold (view/alerts.py, once a second)",
                 f"{(time.perf_counter() - began) * 1000:.1f} ms ({len(found.open)} open, "
                 f"{len(found.resolved)} resolved; {len(state.events)} events kept)"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=1_000, help="platform events in the burst")
    parser.add_argument("--only-snapshot", action="store_true",
                        help="from the rollout straight to the snapshot (no steady state, no read models)")
    args = parser.parse_args()
    proc = psutil.Process()
    gc.collect()
    rss_start = proc.memory_info().rss / 1e6
    groups = compact_fleet(args.vms)
    vms = Rows(args.vms, range(args.vms))
    folder = Folder()
    rows: list[tuple[str, str]] = []

    # 1. three minutes of heartbeats from every VM, and a pass (the service decides all along)
    start, n0 = folder.fold_seconds, folder.count
    heartbeat_minutes(folder, vms)
    hb = folder.count - n0
    rows.append(("heartbeats folded", f"{hb:,} in {folder.fold_seconds - start:.2f} s = "
                 f"{hb / (folder.fold_seconds - start):,.0f} events/s"))
    began = time.perf_counter()  # the fold as a snapshot gives it: the keeper's thread passes once
    evaluate(folder.state, POLICY, T_BURST)
    rows.append(("  a first pass, as on the load's thread at a start (ha/keeper.py)",
                 f"{time.perf_counter() - began:.2f} s (the scope index made whole, the pass's caches)"))
    key = signing.generate_private_key()
    keys = signing.VerifyKeys([key.public_key()])
    store = SnapshotBlob(FileBlob(), "bench", "hub", lambda: key, lambda: keys)
    began = time.perf_counter()
    Digest().of(folder.state)  # as the keeper does on the load's thread, then the service after every turn
    rows.append(("  /v1/state's digest made whole, as at a start", f"{time.perf_counter() - began:.2f} s"))
    began = time.perf_counter()
    store.pack(folder.state, {"0": Position(1, "1")}, "bench")  # as the service does every snapshot_interval
    middle = time.perf_counter()
    freeze()  # Keeper.pack's second half: the fold frozen out of the collector's passes
    rows.append(("  a snapshot packed on the loop, as the service does each minute",
                 f"{middle - began:.2f} s, then {time.perf_counter() - middle:.2f} s the collector's pass "
                 f"and freeze (the whole fold here, the first)"))

    # 2. a burst: one platform event per group, reported by every VM of the group, heartbeats going on
    events = burst_events(groups, args.events)
    start, parse0, n0 = folder.fold_seconds, folder.parse_seconds, folder.count
    folder.turns(burst(events, vms))  # the first turns: the figures below are the burst's
    burst_n, burst_s = folder.count - n0, folder.fold_seconds - start
    rows.append(("burst folded (scheduled reports + heartbeats)",
                 f"{burst_n:,} in {burst_s:.2f} s = {burst_n / burst_s:,.0f} events/s"))
    rows.append(("  baseline: json.loads of the same texts",
                 f"{burst_n / (folder.parse_seconds - parse0):,.0f} events/s"))
    rows.append(("  a turn and its upkeep (the scope index, /v1/state's digest)",
                 f"at most {folder.turn_max * 1000:.0f} ms, the upkeep at most "
                 f"{folder.upkeep_max * 1000:.0f} ms ({folder.upkeep_seconds:.2f} s in all: the burst's "
                 "learned groups named anew)"))

    # 3. the rollout: decision passes; approved events start and complete; heartbeats go on
    run = rollout(folder, events, vms)
    latencies = run.latencies
    p50, p99 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
    rows.append(("decision pass (evaluate + fold its decisions)",
                 f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(latencies) * 1000:.1f} ms "
                 f"over {len(latencies)} passes"))
    rows.append(("  first pass after the burst", f"{run.first[0] * 1000:.0f} ms, {run.first[2]:.2f} s of CPU "
                 f"(the garbage collector's {run.first[3]:.2f} s of it; {run.first[1]} decisions made and "
                 f"folded; the scope index brought up to date by the burst's turns)"))
    rows.append(("  the other passes, CPU", f"max {max(run.cpus[1:], default=0) * 1000:.1f} ms, "
                 f"p99 {percentile(run.cpus[1:] or [0], 0.99) * 1000:.1f} ms"))
    rows.append(("  rollout", f"{run.approvals} approvals, {run.decisions} decisions, {run.pending} events "
                 f"waiting, {len(folder.state.events)} events and {len(folder.state.vms):,} VMs in the fold"))

    if not args.only_snapshot:
        evaluate_alone(folder, rows)
    # 4. steady state: 60 s heartbeats at the service's cadence, and the read models
    gc.collect()
    rss_steady = proc.memory_info().rss / 1e6
    if not args.only_snapshot:
        cpu, digest_cpu, parse_cpu = steady(folder, vms, T_BURST + 700)
        rows.append(("steady state, 60 s heartbeats: CPU per second",
                     f"{cpu:.3f} core (goal < 0.25; of which /v1/state's digest kept {digest_cpu:.3f}); "
                     f"baseline json.loads of the same texts {parse_cpu:.3f} core"))
        read_models(folder, vms, rows)
    peak_save, peak_snapshot = snapshot_figures(folder, store, rows)
    if run.made and not args.only_snapshot:
        edge_figures(run.made, key, keys, rows)
    gc.collect()
    rows.append(("RSS after the rollout", f"{rss_steady:.0f} MB (goal <= 400 MB)"))
    rows.append(("RSS", f"{proc.memory_info().rss / 1e6:.0f} MB at the end (goal <= 400 MB), "
                 f"{peak_save:.0f} MB peak with the snapshot packed and saved (goal <= 600 MB), "
                 f"{peak_snapshot:.0f} MB once it was loaded too, a second fold beside the first (as a "
                 f"rebuild holds them); the interpreter and libraries alone: {rss_start:.0f} MB"))
    rows.append(("events folded in all", f"{folder.count:,} ({dict(folder.stats.folded)}, "
                 f"skipped {sum(folder.stats.skipped.values())}, malformed {folder.stats.malformed})"))
    print_figures(f"coordinator core, {args.vms:,} VMs, {len(groups)} groups, {args.events} platform events "
                  f"(CPython {sys.version.split()[0]})", rows)
    return 0


def evaluate_alone(folder: Folder, rows: list[tuple[str, str]]) -> None:
    """3b. the same state decided with free_slot = "recovered" (no agent here reports recovered: every
    VM a completed event took down is still waiting for its recovery), side by side in this run."""
    now = max(r.time for r in folder.state.decisions.values()) + 10
    recovering = dataclasses.replace(POLICY, free_slot="recovered")
    for name, policy in (("min_healthy", POLICY), ("recovered", recovering)):
        times = []
        for _ in range(5):
            began = time.perf_counter()
            evaluate(folder.state, policy, now)
            times.append(time.perf_counter() - began)
        rows.append((f"  evaluate alone, same state, free_slot {name}",
                     f"median {percentile(times, 0.5) * 1000:.1f} ms of 5"))


def snapshot_figures(folder: Folder, store: SnapshotBlob, rows: list[tuple[str, str]]) -> tuple[float, float]:
    """5. the snapshot as the service saves and loads it (ha/snapshot_blob.py); the peaks of memory
    with it saved, and with it loaded too."""
    gc.collect()
    high_water(reset=True)  # the peaks below are the snapshot's, not the read models' baseline above
    began = time.perf_counter()
    packed = store.pack(folder.state, {"0": Position(1, "1")}, "bench")
    pack_s = time.perf_counter() - began
    began = time.perf_counter()
    freeze()  # what was made since the first freeze (the collection just above took most of it)
    freeze_s = time.perf_counter() - began
    began, cpu_began = time.perf_counter(), time.process_time()
    size = store.save(packed)  # on the keeper's thread in the service
    save_s, save_cpu = time.perf_counter() - began, time.process_time() - cpu_began
    peak_save = high_water()  # the fold and its snapshot
    del packed
    began, cpu_began = time.perf_counter(), time.process_time()
    loaded = store.load()
    load_s, load_cpu = time.perf_counter() - began, time.process_time() - cpu_began
    assert loaded is not None and len(loaded.state.vms) == len(folder.state.vms)
    assert Digest().of(loaded.state) == Digest().of(folder.state)  # the same fold
    del loaded
    gc.collect()
    peak_snapshot = high_water()
    began = time.perf_counter()
    text = [*written(pieces(folder.state))]  # the fold encoded whole, as each pack did on the loop before
    encode_s = time.perf_counter() - began
    began = time.perf_counter()
    zlib.compress(b"".join(text), LEVEL)
    gzip_s = time.perf_counter() - began
    began, cpu_began = time.perf_counter(), time.process_time()
    for line in text:
        json.loads(line)
    parse_s, parse_cpu = time.perf_counter() - began, time.process_time() - cpu_began
    raw_mb = sum(map(len, text)) / 1e6
    rows.append(("snapshot, as saved: the fold packed on the loop", f"{pack_s:.2f} s (goal <= 2 s; its large "
                 f"parts copied) and {freeze_s:.2f} s the collector's pass and freeze; then encoded, "
                 f"compressed, sealed and signed off the loop in {save_s:.2f} s ({save_cpu:.2f} s CPU; "
                 f"{raw_mb:.1f} MB text, {size / 1e6:.1f} MB gzipped)"))
    rows.append(("  baseline: the fold encoded whole, as the loop did before; zlib of the lines alone",
                 f"{encode_s:.2f} s; {gzip_s:.2f} s"))
    rows.append(("snapshot, as loaded: verified, then restored", f"{load_s:.2f} s ({load_cpu:.2f} s CPU)"))
    rows.append(("  baseline: json.loads of the same lines", f"{parse_s:.2f} s ({parse_cpu:.2f} s CPU)"))
    return peak_save, peak_snapshot


def edge_figures(sample: list[Decision], key: Ed25519PrivateKey, keys: signing.VerifyKeys,
                 rows: list[tuple[str, str]]) -> None:
    """Decisions signed and checked at the edge, beside folding them."""
    began = time.perf_counter()
    published = [signed(d, SOURCE, key) for d in sample]
    sign_each = (time.perf_counter() - began) / len(sample)
    began = time.perf_counter()
    assert all(trust.check(e, source=SOURCE, keys=keys).trusted for e in published)
    check_each = (time.perf_counter() - began) / len(sample)
    began = time.perf_counter()
    for d in sample:
        fold_json(FleetState(), to_json(d, SOURCE))
    fold_each = (time.perf_counter() - began) / len(sample)
    rows.append(("decision signed / checked at the edge",
                 f"{sign_each * 1e6:.0f} us / {check_each * 1e6:.0f} us each (baseline: to_json + "
                 f"fold_json of it, {fold_each * 1e6:.0f} us)"))


if __name__ == "__main__":
    sys.exit(main())
