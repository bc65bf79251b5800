"""What a shard pays for another shard's reports on a hub they share, beside what its own cost.

bench/coordinator_fold.py's fleet (10,000 VMs) split in two subscriptions by group, a minute of
heartbeats from every VM, each signed by its VM's own Ed25519 key. One shard owns the first
subscription; the reports go through its admission (input/admission.py) as the hub reader hands
them over (decoded), in batches of 100:

- the other shard's half: dropped by edge/shard.py on the subscription they claim, before the gate;
- its own half: verified with each VM's registered key and folded (the gate, as today);
- the baseline, in the same run: ``json.loads`` of the same texts (what the hub reader spends on
  every event, whoever it is for).

Prints figures; asserts nothing. One core: admission runs on the service's one thread.

    .venv/bin/python bench/coordinator_shards.py [--vms 10000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_figures  # noqa: E402
from bench.coordinator_fold import LIMITS, SUB, T0, fleet, heartbeat  # noqa: E402
from bench.coordinator_verified import registered  # noqa: E402
from se_forwarder.approvals import signing  # noqa: E402
from se_forwarder.fleet.coordinator.config.trust import TrustSettings  # noqa: E402
from se_forwarder.fleet.coordinator.fold import FleetState  # noqa: E402
from se_forwarder.fleet.coordinator.fold import identities as registrations  # noqa: E402
from se_forwarder.fleet.coordinator.input.admission import BatchAdmission  # noqa: E402
from se_forwarder.fleet.coordinator.input.hub_reader import Batch, Position  # noqa: E402

OTHER = "99999999-8888-7777-6666-555555555555"
BATCH = 100


def batches(events: list[dict]) -> list[Batch]:
    return [Batch("0", [(e, Position(i + j, str(i + j), T0 + 60)) for j, e in enumerate(events[i:i + BATCH])],
                  0.0) for i in range(0, len(events), BATCH)]  # as the hub reader hands them over


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=10_000)
    args = parser.parse_args()
    groups = fleet(args.vms)
    theirs = {v["vmId"] for g in groups[1::2] for v in g}  # every other group in the other subscription
    vms = [{**v, "subscriptionId": OTHER} if v["vmId"] in theirs else v for g in groups for v in g]
    keys = {v["vmId"]: signing.generate_private_key() for v in vms}
    texts = [json.dumps(signing.sign(json.loads(heartbeat(v, T0 + i % 60, [])), keys[v["vmId"]]))
             for i, v in enumerate(vms)]

    began = time.perf_counter()
    decoded = [json.loads(t) for t in texts]
    loads_s = time.perf_counter() - began
    other = [e for e in decoded if e["vmid"] in theirs]
    own = [e for e in decoded if e["vmid"] not in theirs]

    admission = BatchAdmission("urn:se-forwarder:coordinator:bench/a", lambda: signing.VerifyKeys(()),
                               TrustSettings(fetch_intermediates=False), LIMITS, owned=frozenset({SUB}))
    state = FleetState()
    registered(state, {k: v for k, v in keys.items() if k not in theirs})
    for vm_id in keys.keys() - theirs:
        registrations.verifier(state, vm_id.lower())
    began = time.perf_counter()
    for batch in batches(other):
        admission.fold(state, batch)
    drop_s = time.perf_counter() - began
    began = time.perf_counter()
    for batch in batches(own):
        admission.fold(state, batch)
    own_s = time.perf_counter() - began
    counts = admission.counts(state)

    loads_us, drop_us = loads_s / len(decoded) * 1e6, drop_s / len(other) * 1e6
    own_us = own_s / len(own) * 1e6
    refused = sum(counts.refused.values()) - counts.refused["other-shard"]
    rows = [
        ("json.loads, every report (baseline)", f"{loads_us:.1f} us a report"),
        ("another shard's report, dropped", f"{drop_us:.2f} us a report ({drop_us / loads_us:.2f}x "
         f"json.loads; {counts.refused['other-shard']:,} dropped)"),
        ("its own report, verified and folded", f"{own_us:.1f} us a report ({own_us / loads_us:.1f}x "
         f"json.loads; {sum(counts.folded.values()):,} folded, {refused} refused)"),
        ("what the other half costs this shard", f"{loads_s * len(other) / len(decoded) + drop_s:.2f} s "
         f"of {loads_s + drop_s + own_s:.2f} s for {len(decoded):,} reports"),
    ]
    print_figures(f"a shard on a shared hub, {args.vms:,} VMs in two subscriptions, a minute of signed "
                  f"heartbeats (CPython {sys.version.split()[0]})", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
