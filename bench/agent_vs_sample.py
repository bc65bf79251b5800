"""Side by side, same simulator, same run: CPU per idle poll cycle and RSS, agent vs sample loop.

The simulator first serves IMDS as documented (no ETag, every poll a 200 with the full document),
then with ETag/304, which only the agent uses (the documented sample never sends If-None-Match).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.common import ROOT, Row, agent, cpu_seconds, verdict, wait_for
from se_forwarder.simulator import SimulatorServer

INTERVAL = 0.25  # 4 polls/s: the most the agent sends to IMDS (which allows 5), for enough cycles
WARMUP = 3.0
MEASURE = 30.0


def polls_by(sim: SimulatorServer, vm: str) -> int:
    return sum(1 for r in sim.sim.requests(vm=vm) if r.get("route") == "scheduledevents")


def window(sim: SimulatorServer, procs: dict[str, psutil.Process]) -> dict[str, tuple[float, int]]:
    """(CPU seconds, polls) of each process over one measurement window."""
    cpu0 = {k: cpu_seconds(p) for k, p in procs.items()}
    n0 = {k: polls_by(sim, k) for k in procs}
    time.sleep(MEASURE)
    return {k: (cpu_seconds(p) - cpu0[k], polls_by(sim, k) - n0[k]) for k, p in procs.items()}


def run() -> list[Row]:
    """Both modes in one run, the documented one (no ETag) first; the same two processes."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, SimulatorServer(
        vm_names=("agent", "sample"), etag=False
    ) as sim:
        sim.sim.add_event({"EventType": "Freeze", "DurationInSeconds": 30, "Resources": ["x"],
                           "NotBeforeInSeconds": 86400})  # a document with content, never changing
        ours = agent(["--imds-url", sim.vm_url("agent"), "--state-dir", f"{tmp}/s",
                      "--sink", f"file:{tmp}/o.jsonl", "--poll-interval", str(INTERVAL),
                      "--dry-run"])
        base = subprocess.Popen([sys.executable, "-m", "bench.sample_loop", sim.vm_url("sample"),
                                 str(INTERVAL)], cwd=ROOT, stdout=subprocess.DEVNULL)
        try:
            wait_for(lambda: Path(f"{tmp}/o.jsonl").exists() and polls_by(sim, "sample") > 0)
            time.sleep(WARMUP)
            procs = {"agent": psutil.Process(ours.pid), "sample": psutil.Process(base.pid)}
            measured = {"no ETag (as documented)": window(sim, procs)}
            rss = {k: p.memory_info().rss / 1e6 for k, p in procs.items()}
            sim.etag = True
            time.sleep(WARMUP)
            measured["ETag/304 (simulator only)"] = window(sim, procs)
        finally:
            ours.terminate()
            base.terminate()
            ours.wait(10)
            base.wait(10)
    for mode, figures in measured.items():
        per_poll = {k: cpu / max(1, n) for k, (cpu, n) in figures.items()}
        ratio = per_poll["agent"] / per_poll["sample"] if per_poll["sample"] else float("nan")
        rows.append(Row("idle poll CPU", f"{mode}: sample loop (requests.get per poll)",
                        f"{per_poll['sample'] * 1e3:.2f} ms/poll ({figures['sample'][1]} polls)",
                        ratio="baseline"))
        rows.append(Row("idle poll CPU", f"{mode}: se-forwarder (file sink)",
                        f"{per_poll['agent'] * 1e3:.2f} ms/poll ({figures['agent'][1]} polls)",
                        "<= 0.5x the sample", verdict(ratio <= 0.5), f"{ratio:.2f}x the sample"))
    rows.append(Row("RSS", "sample loop", f"{rss['sample']:.1f} MB", ratio="baseline"))
    rows.append(Row("RSS", "se-forwarder (file sink)", f"{rss['agent']:.1f} MB", "<= 32 MB",
                    verdict(rss["agent"] <= 32), f"{rss['agent'] / rss['sample']:.2f}x the sample"))
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row.benchmark:<14} {row.figure:<55} {row.value:<24} {row.ratio:<18} {row.target:<20} "
              f"{row.note}")
