"""`se-forwarder demo`: the simulator and the agent in one process, ending with a summary."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from . import config as cfg
from .agent import Agent
from .outbox import Outbox
from .telemetry import setup_logging

STATES = ("scheduled", "approved", "started", "completed", "canceled")


def run_demo(extra_sinks: list[str], timeout: float = 55.0, out: TextIO | None = None) -> int:
    """Run the built-in `demo` scenario; 0 when every kind of CloudEvent was delivered."""
    from .simulator import SimulatorServer

    out = out or sys.stdout
    setup_logging("text", "warning")
    sinks = [{"type": "stdout", "format": "pretty", "name": "demo-stdout"}]
    sinks += [cfg.parse_sink_spec(s, f"--sink {s!r}") for s in extra_sinks]
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="se-forwarder-demo-") as tmp, SimulatorServer(
        time_scale=60.0, scenario="demo"
    ) as sim:
        settings = cfg.from_dict({
            "imds": {"url": sim.url, "poll_interval": 0.25},
            "state": {"dir": tmp},
            "sinks": sinks,
        })
        out.write(
            f"se-forwarder demo: simulated IMDS at {sim.url} (time x60), agent polling every "
            "0.25 s, default approval policy (the documented sample's)\n\n"
        )
        out.flush()
        agent = Agent(settings, stdout=out)
        result: list[int] = []
        thread = threading.Thread(target=lambda: result.append(agent.run()), daemon=True)
        thread.start()
        try:
            finished = _wait_until_done(sim, Path(tmp), [s.name for s in settings.sinks],
                                        began + timeout, thread)
        finally:
            agent.stop.set()
            thread.join(5.0)
        counts = _counts(Path(tmp))
    elapsed = time.monotonic() - began
    out.write("\nsummary: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in STATES))
    out.write(f"  ({sum(counts.values())} CloudEvents in {elapsed:.1f} s)\n")
    if not finished:
        out.write("demo did not finish in time\n")
        return 1
    missing = [s for s in STATES if not counts.get(s)]
    if missing:
        out.write(f"missing CloudEvent types: {', '.join(missing)}\n")
        return 1
    return 0


def _wait_until_done(sim: object, state_dir: Path, sinks: list[str], deadline: float,
                     agent_thread: threading.Thread) -> bool:
    quiet_since: float | None = None
    while time.monotonic() < deadline and agent_thread.is_alive():
        time.sleep(0.25)
        if not (sim.sim.scenario_done() and not sim.sim.document()["Events"]):  # type: ignore[attr-defined]
            quiet_since = None
            continue
        with Outbox(state_dir) as box:
            backlog = sum(box.sink_status(n).backlog for n in sinks)
            seen_empty = (box.previous_document() or None) is not None and not (
                box.previous_document().events  # type: ignore[union-attr]
            )
        if backlog == 0 and seen_empty:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.5:
                return True
    return False


def _counts(state_dir: Path) -> Counter[str]:
    with Outbox(state_dir) as box:
        return Counter(e.state for e in box.all_events())
