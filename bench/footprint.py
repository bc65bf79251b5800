"""Agent RSS, idle after start-up, with stdout only and with a webhook sink (same run)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.common import Row, agent, rss_mb, wait_for
from se_forwarder.simulator import SimulatorServer
from tests.webhook.receiver import Receiver

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


def run() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp, SimulatorServer() as sim, Receiver() as receiver:
        sim.sim.add_event({"EventType": "Reboot", "NotBeforeInSeconds": 86400})
        stdout_only = measure(["--sink", f"file:{tmp}/o.jsonl"], tmp, sim)
        config = Path(tmp) / "w.toml"
        config.write_text(f'[[sinks]]\ntype = "webhook"\nurl = "{receiver.url}"\nmode = "batch"\n')
        webhook = measure(["--config", str(config)], tmp, sim)
    return [
        Row("RSS", "agent, file sink only", f"{stdout_only:.1f} MB"),
        Row("RSS", "agent, webhook sink", f"{webhook:.1f} MB", "<= 45 MB"),
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row.figure:<30} {row.value:<10} {row.target}")
