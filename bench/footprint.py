"""Agent RSS, idle after start-up, with a file sink and with a webhook sink, next to the documented
sample's loop (all in the same run, IMDS without ETag as documented)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, Row, agent, rss_mb, verdict, wait_for
from se_forwarder.simulator import SimulatorServer
from tests.support.receiver import Receiver

SETTLE = 4.0


def measure(args: list[str], tmp: str, sim: SimulatorServer) -> float:
    proc = agent(["--imds-url", sim.url, "--state-dir", f"{tmp}/s-{len(args)}",
                  "--poll-interval", "0.2", "--dry-run", *args])
    try:
        wait_for(lambda: (Path(tmp) / f"s-{len(args)}" / "outbox.sqlite3").exists())
        time.sleep(SETTLE)
        return rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def sample_rss(sim: SimulatorServer) -> float:
    proc = subprocess.Popen([sys.executable, "-m", "bench.sample_loop", sim.url, "0.2"], cwd=ROOT,
                            stdout=subprocess.DEVNULL)
    try:
        time.sleep(SETTLE)
        return rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def run() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp, SimulatorServer(etag=False) as sim, \
            Receiver() as receiver:
        sim.sim.add_event({"EventType": "Reboot", "NotBeforeInSeconds": 86400})
        sample = sample_rss(sim)
        file_only = measure(["--sink", f"file:{tmp}/o.jsonl"], tmp, sim)
        config = Path(tmp) / "w.toml"
        config.write_text(f'[[sinks]]\ntype = "webhook"\nurl = "{receiver.url}"\nmode = "batch"\n')
        webhook = measure(["--config", str(config)], tmp, sim)
    return [
        Row("RSS", "sample loop", f"{sample:.1f} MB", ratio="baseline"),
        Row("RSS", "agent, file sink only", f"{file_only:.1f} MB", "<= 32 MB",
            verdict(file_only <= 32), f"{file_only / sample:.2f}x the sample"),
        Row("RSS", "agent, webhook sink", f"{webhook:.1f} MB", "<= 32 MB", verdict(webhook <= 32),
            f"{webhook / sample:.2f}x the sample"),
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row.figure:<30} {row.value:<10} {row.ratio:<18} {row.target} {row.note}")
