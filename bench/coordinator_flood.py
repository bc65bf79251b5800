"""The coordinator's core under a flood from one compromised VM, beside the same fleet without it.

Two fresh processes run the fleet and the timeline of bench/coordinator_fold.py (10,000 VMs:
their last hour on the hub, three minutes of heartbeats, a burst of 1,000 platform events, a
rollout of 60 decision passes) with the default ``[limits]``. One of them also folds, spread over
the three minutes of heartbeats, the flood of the security review of issue 22, all of which one
VM can send with its own send right:

- 20 heartbeats of about 1.5 MB from one fleet VM, each listing 20,000 fake EventIds;
- 20,000 fake VMs, one heartbeat each;
- 20 heartbeats from one fleet VM with 5,000 tags each;
- 20,000 CloudEvents of as many unique types;
- 2,000 Scheduled reports of fake events from one fleet VM.

Hub time is each report's own time (as for honest agents). Prints, side by side, the RSS after the
rollout and the decision pass's p50 and p99 (evaluate and fold its decisions), with the goals of
issue 22 (RSS within 1.5x of the clean fleet, p99 at most 1 s), and what the limits dropped.
Asserts nothing.

    .venv/bin/python bench/coordinator_flood.py [--vms 10000]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from bench.coordinator_fold import (  # noqa: E402
    SUB,
    T0,
    Folder,
    burst,
    burst_events,
    fleet,
    heartbeat,
    heartbeat_minutes,
    iso,
    percentile,
    rollout,
    transition,
    vm,
)
from se_forwarder.fleet.coordinator.config.limits import DEFAULT_LIMITS  # noqa: E402

FLOOD_ROUNDS = 20  # heartbeats with fake EventIds, and heartbeats with tags
FAKE_EVENTS = 20_000  # EventIds listed per heartbeat
FAKE_VMS = 20_000
TAGS = 5_000
TYPES = 20_000
FAKE_REPORTS = 2_000


def flood(victim: dict, minute: int, share: int) -> list[str]:
    """One ``share``-th of the flood (``minute`` of ``share``), as JSON texts timed in that minute."""
    t = T0 + minute * 60 + 30
    texts: list[str] = []
    for r in range(minute, FLOOD_ROUNDS, share):
        listed = [{"EventId": f"FAKE-{r}-{i:05d}", "EventStatus": "Scheduled", "EventType": "Reboot"}
                  for i in range(FAKE_EVENTS)]
        texts.append(heartbeat(victim, t + r * 0.01, listed))
        tagged = {**victim, "tags": {f"tag{r}-{i}": "x" * 40 for i in range(TAGS)}}
        texts.append(heartbeat(tagged, t + r * 0.01 + 0.005, []))
    for i in range(minute, FAKE_VMS, share):
        texts.append(heartbeat(vm(f"fake{i}", "rg-fake", "", "", "0", "0"), t + i * 1e-4, []))
    for i in range(minute, TYPES, share):
        texts.append(json.dumps({"specversion": "1.0", "type": f"com.example.flood{i}", "id": f"t{i}",
                                 "source": "/flood", "time": iso(t), "data": {}}))
    for i in range(minute, FAKE_REPORTS, share):
        texts.append(transition("scheduled", victim, f"FAKE-REPORT-{i:05d}", [victim["name"]], t, t + 3600))
    return texts


def side(vms_count: int, with_flood: bool) -> dict[str, Any]:
    """One run; its figures as a dict (printed as JSON by the child process)."""
    proc = psutil.Process()
    groups = fleet(vms_count)
    vms = [v for g in groups for v in g]
    folder = Folder(DEFAULT_LIMITS)
    # The fleet's last hour on the hub: it is known before the minutes measured here.
    folder.feed(heartbeat(v, T0 - 3600 + i * 3600 / len(vms), []) for i, v in enumerate(vms))
    victim = vms[0]
    flood_seconds = 0.0

    def between(minute: int) -> None:
        nonlocal flood_seconds
        if with_flood:
            began = time.perf_counter()
            folder.feed(iter(flood(victim, minute, 3)))
            flood_seconds += time.perf_counter() - began

    heartbeat_minutes(folder, vms, 3, between)
    events = burst_events(groups, 1_000)
    folder.feed(burst(events, vms))
    run = rollout(folder, events, vms)
    gc.collect()
    stats = folder.stats
    return {
        "rss": proc.memory_info().rss / 1e6,
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6,  # KiB on Linux
        "p50": percentile(run.latencies, 0.5), "p99": percentile(run.latencies, 0.99),
        "max": max(run.latencies), "approvals": run.approvals, "vms": len(folder.state.vms),
        "events": len(folder.state.events), "flood_seconds": flood_seconds,
        "capped": dict(stats.capped), "dropped": stats.dropped, "skipped_names": len(stats.skipped),
        "skipped": sum(stats.skipped.values()),
    }


def child(vms_count: int, with_flood: bool) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--vms", str(vms_count), "--side",
                           "flood" if with_flood else "clean"], capture_output=True, text=True, check=True,
                          timeout=900)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=10_000)
    parser.add_argument("--side", choices=("clean", "flood"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side(args.vms, args.side == "flood")))
        return 0
    clean, flooded = child(args.vms, False), child(args.vms, True)
    ratio = flooded["rss"] / clean["rss"]
    rows = [
        ("RSS after the rollout", f"{clean['rss']:.0f} MB", f"{flooded['rss']:.0f} MB",
         f"{ratio:.2f}x the clean fleet (goal <= 1.5x)"),
        ("RSS peak", f"{clean['peak']:.0f} MB", f"{flooded['peak']:.0f} MB", ""),
        ("decision pass p50", f"{clean['p50'] * 1000:.1f} ms", f"{flooded['p50'] * 1000:.1f} ms", ""),
        ("decision pass p99", f"{clean['p99'] * 1000:.1f} ms", f"{flooded['p99'] * 1000:.1f} ms",
         f"goal <= 1000 ms: {'met' if flooded['p99'] <= 1.0 else 'MISSED'}"),
        ("decision pass max", f"{clean['max'] * 1000:.1f} ms", f"{flooded['max'] * 1000:.1f} ms", ""),
        ("approvals in the rollout", str(clean["approvals"]), str(flooded["approvals"]),
         "the flood's silent fake VMs count unavailable in the fleet scope (budget 5%)"),
        ("VMs / events in the fold", f"{clean['vms']:,} / {clean['events']:,}",
         f"{flooded['vms']:,} / {flooded['events']:,}", ""),
    ]
    print(f"coordinator core under a flood, {args.vms:,} VMs, default [limits] "
          f"(CPython {sys.version.split()[0]}, subscription {SUB[:8]}...)")
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"  {'':<{widths[0]}}  {'clean':>{widths[1]}}  {'flood':>{widths[2]}}")
    for name, a, b, note in rows:
        print(f"  {name:<{widths[0]}}  {a:>{widths[1]}}  {b:>{widths[2]}}  {note}")
    capped = ", ".join(f"{k} {v:,}" for k, v in sorted(flooded["capped"].items()))
    print(f"  flood folded in {flooded['flood_seconds']:.1f} s; dropped by the limits: {capped}; "
          f"whole reports dropped {flooded['dropped']:,}; {flooded['skipped']:,} of unknown types "
          f"counted under {flooded['skipped_names']} names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
