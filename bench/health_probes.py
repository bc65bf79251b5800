"""Side by side, same simulator, same run: what `[health]` costs an idle agent.

Two agents poll the same simulator every 0.25 s with a file sink: one without `[health]`, one with
an HTTP and a TCP probe every second (the shortest interval allowed; the default is 10 s) against a
local application. Figures: CPU over the window, RSS, and the polls each made, which shows whether
the probes held polling back.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import psutil

from bench.common import Row, agent, cpu_seconds, wait_for
from se_forwarder.simulator import SimulatorServer
from tests.support.app_server import AppServer, TcpPort

INTERVAL = 0.25
WARMUP = 3.0
MEASURE = 30.0


def polls_by(sim: SimulatorServer, vm: str) -> int:
    return sum(1 for r in sim.sim.requests(vm=vm) if r.get("route") == "scheduledevents")


def config(tmp: Path, name: str, url: str, health: str) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(f'[imds]\nurl = "{url}"\npoll_interval = {INTERVAL}\n[state]\ndir = "{tmp}/{name}"\n'
                    f'[approvals]\ndry_run = true\n[[sinks]]\ntype = "file"\npath = "{tmp}/{name}.jsonl"\n'
                    + health)
    return path


def run() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp_dir, SimulatorServer(vm_names=("plain", "probed")) as sim, \
            AppServer() as app, TcpPort() as db:
        tmp = Path(tmp_dir)
        sim.sim.add_event({"EventType": "Freeze", "DurationInSeconds": 30, "Resources": ["x"],
                           "NotBeforeInSeconds": 86400})
        health = ('[health]\ninterval = 1\ntimeout = 0.5\n'
                  f'[[health.probes]]\ntype = "http"\nurl = "{app.url}"\n'
                  f'[[health.probes]]\ntype = "tcp"\naddress = "{db.address}"\n')
        procs = {"plain": agent(["--config", str(config(tmp, "plain", sim.vm_url("plain"), ""))]),
                 "probed": agent(["--config", str(config(tmp, "probed", sim.vm_url("probed"), health))])}
        try:
            wait_for(lambda: all(polls_by(sim, k) for k in procs) and len(app.requests) > 1)
            time.sleep(WARMUP)
            ps = {k: psutil.Process(p.pid) for k, p in procs.items()}
            cpu0 = {k: cpu_seconds(p) for k, p in ps.items()}
            n0, checks0 = {k: polls_by(sim, k) for k in ps}, len(app.requests)
            time.sleep(MEASURE)
            cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in ps.items()}
            polls = {k: polls_by(sim, k) - n0[k] for k in ps}
            checks = len(app.requests) - checks0
            rss = {k: p.memory_info().rss / 1e6 for k, p in ps.items()}
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(10)
    per_minute = {k: v * 60 / MEASURE for k, v in cpu.items()}
    return [
        Row("health probes", "agent without [health]: CPU, polls",
            f"{per_minute['plain']:.2f} s/min, {polls['plain']} polls in {MEASURE:.0f} s", ratio="baseline"),
        Row("health probes", "agent with an HTTP and a TCP probe every 1 s: CPU, polls",
            f"{per_minute['probed']:.2f} s/min, {polls['probed']} polls, {checks} HTTP checks",
            ratio=f"{per_minute['probed'] / per_minute['plain']:.2f}x CPU, "
                  f"{polls['probed'] / max(1, polls['plain']):.2f}x polls"),
        Row("health probes", "RSS without / with [health]", f"{rss['plain']:.1f} / {rss['probed']:.1f} MB",
            ratio=f"+{rss['probed'] - rss['plain']:.1f} MB"),
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row.figure:<58} {row.value:<48} {row.ratio}")
