"""A burst: one document of 1,000 events -> all persisted and delivered, in seconds."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from bench.common import Row, agent, wait_for
from se_forwarder.outbox import Outbox
from se_forwarder.simulator import SimulatorServer

EVENTS = 1000
POLL = 0.1


def lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except FileNotFoundError:
        return 0


def run_one(sink_args: list[str], delivered, label: str) -> Row:
    with tempfile.TemporaryDirectory() as tmp, SimulatorServer(etag=False) as sim:
        proc = agent(["--imds-url", sim.url, "--state-dir", f"{tmp}/s", *sink_args(tmp),
                      "--poll-interval", str(POLL), "--dry-run"])
        try:
            wait_for(lambda: (Path(tmp) / "s" / "outbox.sqlite3").exists())
            time.sleep(1.0)
            # All 1,000 events must appear in ONE document: hold the engine's (re-entrant) lock
            # while adding them, so no request sees a partial list.
            with sim.sim._lock:  # noqa: SLF001 - benchmark-only shortcut
                for _ in range(EVENTS):
                    sim.sim.add_event({"EventType": "Reboot", "NotBeforeInSeconds": 86400})
                began = time.perf_counter()
            wait_for(lambda: delivered(tmp) >= EVENTS, timeout=60, interval=0.01)
            total = time.perf_counter() - began
            with Outbox(Path(tmp) / "s") as box:
                recorded = [e.observed_at for e in box.all_events()]
        finally:
            proc.terminate()
            proc.wait(10)
    return Row("burst", f"1,000-event document -> delivered ({label})", f"{total:.2f} s",
               "<= 1 s", f"poll interval {POLL} s included; {len(recorded)} recorded")


def run() -> list[Row]:
    from tests.support.receiver import Receiver

    rows = [run_one(lambda tmp: ["--sink", f"file:{tmp}/o.jsonl"],
                    lambda tmp: lines(Path(tmp) / "o.jsonl"), "file sink")]
    with Receiver() as receiver:
        def webhook_config(tmp: str) -> list[str]:
            path = Path(tmp) / "w.toml"
            path.write_text(f'[[sinks]]\ntype = "webhook"\nurl = "{receiver.url}"\n'
                            'mode = "batch"\nbatch_max_events = 500\n')
            return ["--config", str(path)]

        rows.append(run_one(webhook_config, lambda tmp: len(set(receiver.accepted_ids())),
                            "batch webhook"))
    return rows


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row.__dict__))
