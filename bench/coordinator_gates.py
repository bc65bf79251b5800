"""What gates and maintenance windows cost a decision pass, beside the same pass without them.

bench/coordinator_fold.py's fleet (10,000 VMs by default) heard from, and a burst of Scheduled
events (one VM each, every VM of its group reporting it). The same fold is then evaluated
``--passes`` times with each of three policies, taking turns pass by pass: the baseline (budgets
only); with five gates (one closed, for a group no event touches) and a window plus a blackout for
each of three scopes, all open; and with the fleet outside its window (every event deferred at that
rule). Only ``evaluate`` is timed; nothing is folded back, so every pass sees the same fold. Prints
figures; asserts nothing.

    .venv/bin/python bench/coordinator_gates.py [--vms 10000] [--events 1000] [--passes 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_figures  # noqa: E402
from bench.coordinator_fold import (  # noqa: E402
    POLICY,
    T_BURST,
    Folder,
    burst,
    burst_events,
    fleet,
    heartbeat_minutes,
    percentile,
)
from se_forwarder.fleet.coordinator import evaluate  # noqa: E402
from se_forwarder.fleet.coordinator.config.windows import load_windows  # noqa: E402
from se_forwarder.fleet.coordinator.fold.gates import GateVerdict  # noqa: E402


def windows(always_open: bool) -> tuple:
    """A window and a blackout for each of three scopes; the fleet's window open now, or not."""
    hour = "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23" if always_open else "3"
    items = []
    for scope in ("fleet", "zone:1", "group:web7"):
        items.append({"scope": scope, "timezone": "Europe/Berlin", "duration": "1h",
                      "rrule": f"FREQ=DAILY;BYHOUR={hour}"})
        items.append({"scope": scope, "blackout": True, "timezone": "Europe/Berlin", "duration": "1h",
                      "rrule": "FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=24"})
    return load_windows(items)


def timed(folder: Folder, runs: list, now: float, passes: int) -> list[tuple[list[float], dict[str, int]]]:
    """Each run's pass latencies, the runs taking turns pass by pass (so the machine's noise falls
    on all of them alike), and its verdicts by code."""
    latencies: list[list[float]] = [[] for _ in runs]
    codes: list[dict[str, int]] = [{} for _ in runs]
    for _ in range(passes):
        for i, (_, policy, verdicts) in enumerate(runs):
            folder.state.gates = dict(verdicts)
            began = time.perf_counter()
            result = evaluate(folder.state, policy, now)
            latencies[i].append(time.perf_counter() - began)
            codes[i] = {}
            for verdict in result.verdicts.values():
                codes[i][verdict.code] = codes[i].get(verdict.code, 0) + 1
    return list(zip(latencies, codes, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=1_000)
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    groups = fleet(args.vms)
    vms = [v for g in groups for v in g]
    folder = Folder()
    heartbeat_minutes(folder, vms)
    folder.feed(burst(burst_events(groups, args.events), vms))
    now = T_BURST + 40
    gates = {f"gate-{i}": GateVerdict(f"gate-{i}", "alertmanager", f"group:nothing-{i}", i != 0,
                                      "1 alert fires" if i == 0 else "no matching alert fires", checked=now)
             for i in range(5)}
    rows = []
    runs = [("budgets only (baseline)", POLICY, {}),
            ("5 gates, 6 windows and blackouts, all open", replace(POLICY, windows=windows(True)), gates),
            ("fleet outside its window (each event deferred there)", replace(POLICY, windows=windows(False)),
             gates)]
    for _, policy, verdicts in runs:  # the scope index and the windows' occurrences, once
        folder.state.gates = dict(verdicts)
        evaluate(folder.state, policy, now)
    baseline = 0.0
    for (label, _, _), (latencies, codes) in zip(runs, timed(folder, runs, now, args.passes), strict=True):
        p50 = percentile(latencies, 0.5) * 1000
        baseline = baseline or p50
        top = ", ".join(f"{c} {n}" for c, n in sorted(codes.items(), key=lambda kv: -kv[1])[:3])
        p99 = percentile(latencies, 0.99) * 1000
        rows.append((label, f"p50 {p50:.1f} ms ({p50 / baseline:.2f}x), p99 {p99:.1f} ms over "
                     f"{args.passes} passes; verdicts: {top}"))
    print_figures(f"decision pass with gates and windows ({len(vms):,} VMs, {args.events:,} events)", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
