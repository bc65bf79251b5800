"""The coordinator's edge at fleet scale: verified reports per second beside the fold alone.

bench/coordinator_fold.py's fleet (10,000 VMs) and its burst (1,000 platform events, each reported
by every VM of its group, heartbeats going on), sent twice in the same run:

- unsigned, folded as today's fold reads them (``json.loads`` + ``fold_event``): the baseline;
- signed by each VM's own Ed25519 key (docs/identity.md), through the gate (gate.py: trust.py's
  verdict with the key registered for the report's vmid, then the fold): what the service does.

Each VM's key is registered beforehand (registrations.bind, as an identity event that verified
would), so the second figure is the report path alone; the cost of verifying one registration
(its IMDS attested document, signed by the simulator's per-run CA as Azure signs it) is measured
apart, as a registration comes once an hour per VM. Prints figures; asserts nothing. One core: the
fold and the gate run on the service's one thread.

    .venv/bin/python bench/coordinator_verified.py [--vms 10000] [--events 1000]
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_figures  # noqa: E402
from bench.coordinator_fold import LIMITS, T0, burst, burst_events, fleet, heartbeat  # noqa: E402
from se_forwarder.approvals import signing  # noqa: E402
from se_forwarder.fleet.coordinator import FleetState, FoldStats  # noqa: E402
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.config.anchors import anchors  # noqa: E402
from se_forwarder.fleet.coordinator.edge import (  # noqa: E402
    Edge,
    Gate,
    trust,  # noqa: E402
)
from se_forwarder.fleet.coordinator.fold import Identity  # noqa: E402
from se_forwarder.fleet.coordinator.fold import identities as registrations  # noqa: E402
from se_forwarder.identity.attested import nonce_for  # noqa: E402
from se_forwarder.simulator.attestation import AttestationAuthority  # noqa: E402

SOURCE = "urn:se-forwarder:coordinator:bench"
GOAL = 5_000


def texts(vms: list[dict], events: int, groups: list[list[dict]]) -> list[str]:
    """A minute of heartbeats from every VM, then the burst."""
    out = [heartbeat(v, T0 + i % 60, []) for i, v in enumerate(vms)]
    return out + list(burst(burst_events(groups, events), vms))


def registered(state: FleetState, keys: dict[str, signing.Ed25519PrivateKey]) -> None:
    for vm_id, key in keys.items():
        public = signing.public_key_line(key)
        registrations.bind(state, registrations.Claim(vm_id.lower(), Identity(
            public, signing.keyid(key), T0, T0 + 6 * 3600, vm_id, "sub", T0)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=1_000)
    args = parser.parse_args()
    groups = fleet(args.vms)
    vms = [v for g in groups for v in g]
    keys = {v["vmId"]: signing.generate_private_key() for v in vms}
    plain = texts(vms, args.events, groups)
    signed = [json.dumps(signing.sign(json.loads(t), keys[json.loads(t)["vmid"]])) for t in plain]
    received = T0 + 60

    state, stats = FleetState(), FoldStats()
    began = time.perf_counter()
    for text in plain:
        fold_event(state, json.loads(text), stats, LIMITS, received)
    fold_s = time.perf_counter() - began

    authority = AttestationAuthority()
    attested = trust.Attestation(anchors([authority.ca_file], [authority.intermediate_file]))
    coordinator_keys = signing.VerifyKeys([signing.generate_private_key().public_key()])
    gate = Gate(Edge(SOURCE, lambda: coordinator_keys, attested, limits=LIMITS))
    checked = FleetState()
    registered(checked, keys)
    for vm_id in keys:  # each VM's key parsed once, as for a VM heard from before (heartbeats: 1 a minute)
        registrations.verifier(checked, vm_id.lower())
    began = time.perf_counter()
    outcomes = [gate.admit(checked, json.loads(text), received) for text in signed]
    gate_s = time.perf_counter() - began
    refused = sum(gate.refused.values())

    sample = [json.loads(text) for text in signed[:500]]
    parts = [(registrations.verifier(checked, e["vmid"].lower()), e) for e in sample]
    began = time.perf_counter()
    for _, event in parts:
        signing.canonical(event)
    canonical_each = (time.perf_counter() - began) / len(parts)
    began = time.perf_counter()
    for keys_of, event in parts:
        assert keys_of is not None and signing.problem(event, keys_of) is None
    verify_each = (time.perf_counter() - began) / len(parts) - canonical_each

    agent = signing.generate_private_key()
    compute = {"vmId": vms[0]["vmId"], "subscriptionId": "sub"}
    document = authority.document(compute, nonce_for(signing.raw_public(agent)))
    identity = signing.sign({"specversion": "1.0", "type": trust.IDENTITY_TYPE, "id": "identity/bench",
                             "source": vms[0]["resourceId"], "time": "2026-03-02T12:00:00Z",
                             "vmid": compute["vmId"],
                             "data": {"PublicKey": base64.b64encode(signing.raw_public(agent)).decode(),
                                      "AttestedDocument": document}}, agent)
    began = time.perf_counter()
    runs = 20
    verdicts = [trust.registration(identity, attested, time.time()) for _ in range(runs)]
    register_each = (time.perf_counter() - began) / runs

    n = len(plain)
    rows = [
        ("reports folded, unsigned (today's fold)", f"{n:,} in {fold_s:.2f} s = {n / fold_s:,.0f} reports/s"),
        ("reports verified and folded (gate.py)", f"{n:,} in {gate_s:.2f} s = {n / gate_s:,.0f} reports/s "
         f"({fold_s / gate_s:.0%} of the fold alone; goal >= {GOAL:,}/s)"),
        ("  of which refused", f"{refused} ({dict(gate.refused)}); folded "
         f"{outcomes.count('folded'):,}"),
        ("  per report: canonical JSON, Ed25519 verification", f"{canonical_each * 1e6:.0f} us, "
         f"{verify_each * 1e6:.0f} us (the verification alone allows {1 / verify_each:,.0f}/s on this core)"),
        ("one registration (attested document verified)",
         f"{register_each * 1e3:.1f} ms ({'verified' if all(v.trusted for v in verdicts) else 'REFUSED'}; "
         f"about one per VM an hour)"),
        ("fold states equal", str(sorted(state.vms) == sorted(checked.vms)
                                  and sorted(state.events) == sorted(checked.events))),
    ]
    print_figures(f"coordinator edge, {args.vms:,} VMs, {args.events} platform events, {n:,} reports "
                  f"(CPython {sys.version.split()[0]})", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
