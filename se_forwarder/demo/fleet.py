"""``se-forwarder demo --fleet``: a rollout of maintenance through a simulated fleet, live on the
fleet page, with no Azure, no Node and no configuration.

In this process (fleet_parts.py): the simulator with an availability set, a scale set and a
standalone VM; one agent per VM; the coordinator with its control API and fleet page on 127.0.0.1;
the demo's transport (transport/) between them. It prints the page's URL first, then what happens
(terminal.py: a line per decision and per VM state change), plays the rollout (rollout.py), and
ends with a summary from the simulator's own record (summary.py). With ``keep`` everything keeps
running after the summary until ``stop`` is set (Ctrl-C), so the page can be explored.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from ..errors import ConfigError
from ..sinks.pretty import WIDTH
from ..telemetry import setup_logging
from . import record
from .application import BACK_AFTER, SLOW
from .fleet_parts import MIN_HEALTHY, TIME_SCALE, FleetParts
from .rollout import DB, FAILING, NOTICE, Rollout
from .summary import summary
from .terminal import FleetLines, Tail

READY_WITHIN = 60.0  # s for every agent to register and be watched
SETTLE = 1.0  # s after the last event went, for its last reports to reach the coordinator and the page
COUNTED_WITHIN = 10.0  # s for the coordinator to count the failed VM down before the rollout


NEEDED = ("azure.eventhub", "azure.storage.queue", "azure.storage.blob", "starlette", "uvicorn")


def needs() -> None:
    """ConfigError (one line) when a package of the ``fleet`` extra cannot be imported."""
    import importlib

    missing = []
    for name in NEEDED:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ConfigError(f"demo --fleet needs {', '.join(missing)}: pip install 'se-forwarder[fleet]' "
                          "(./scripts/demo --fleet installs it)")


def run_fleet_demo(keep: bool = False, timeout: float = 150.0, out: TextIO | None = None,
                   stop: threading.Event | None = None) -> int:
    """Run the fleet demo; 0 when the rollout ran to its end (or ``stop`` was set), else 1."""
    out = out or sys.stdout
    stop = stop or threading.Event()
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            out.write(text + "\n")
            out.flush()

    setup_logging("text", "error")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="se-forwarder-fleet-demo-") as tmp:
        parts = FleetParts(Path(tmp))
        try:
            return _run(parts, say, keep, began, began + timeout, stop)
        finally:
            parts.close()


def _run(parts: FleetParts, say: Callable[[str], None], keep: bool, began: float, deadline: float,
         stop: threading.Event) -> int:
    parts.start_simulator()
    url = parts.start_coordinator()
    say(f"Fleet page: {url}  (open it now: the rollout shows there as it happens)")
    say(f"Simulator: {parts.sim.url}  (Azure's side: /control/history, /control/approvals)")
    say("\n" + _header(parts))
    parts.start_agents()
    lines = FleetLines(MIN_HEALTHY)
    tail = Tail(parts.transport.hub.read_all, lines, say)
    vms = len(parts.vm_names)
    say(f"Starting {vms} agents: each registers its key with an attested document and sends heartbeats.")
    if not _wait(lambda: parts.watched() == vms, min(deadline, time.monotonic() + READY_WITHIN), stop):
        if stop.is_set():
            say("Stopped (Ctrl-C) before the rollout began.")
            return 0
        say(f"The coordinator did not see all {vms} agents within {READY_WITHIN:g} s (a busy machine?); "
            "exit status 1.")
        return 1
    say(f"All {vms} VMs registered their keys and are watched by the coordinator.\n")
    tail.start()
    rollout = Rollout(parts.sim.sim, parts.sim.history.lives)
    try:
        rollout.fail()
        _wait(lambda: FAILING in parts.down(), time.monotonic() + COUNTED_WITHIN, stop)
        stop.wait(1.0 - time.time() % 1.0)  # on a whole second: NotBefore on the wire has no fraction
        announced = rollout.announce()
        parts.app.event_id = announced.web[SLOW]  # its application goes down with its Reboot
        # An alert that closes a gate for a while (the gates' part of the story) starts here too.
        finished = _wait(rollout.done, deadline, stop)
        if finished:
            _wait(lambda: False, time.monotonic() + SETTLE, stop)
    finally:
        tail.stop()
    verified = parts.verified()
    lives = rollout.lives_of_rollout()
    spans = record.spans(lives, time.time())
    say(summary(lives, spans, record.scopes(parts.topology), announced, rollout.failure, lines.decisions,
                lines.defers, lines.echoes, verified, time.monotonic() - began, TIME_SCALE,
                slow=(SLOW, parts.app.back_at)))
    if stop.is_set():
        say("Stopped (Ctrl-C) before the rollout ended.")
        return 0
    if not finished:
        say(f"The rollout did not end within {deadline - began:g} s (a busy machine?); exit status 1.")
        return 1
    if keep:
        say(f"\nStill running (--keep): explore the fleet page at {url}\nCtrl-C stops everything.")
        stop.wait()
    return 0


def _wait(done: Callable[[], bool], deadline: float, stop: threading.Event) -> bool:
    while time.monotonic() < deadline and not stop.is_set():
        if done():
            return True
        stop.wait(0.2)
    return False


def _header(parts: FleetParts) -> str:
    first = (f"se-forwarder demo --fleet: {len(parts.vm_names)} simulated Azure VMs (an availability set "
             "web of 6 VMs over 3 fault and 5 update domains, a scale set api of 4 VMs in zones 1 and "
             f"2, and a standalone VM {DB}), at {TIME_SCALE:g}x speed (1 min = 1 s). An agent on each VM "
             "forwards its Scheduled Events, signed, to an event hub; the fleet coordinator reads them "
             "and approves maintenance early, within budgets of 1 VM down per group and per zone, "
             f"with min_healthy {MIN_HEALTHY:g} s, and frees a VM's slot only once its agent reports it "
             f"recovered. No Azure: the hub, the approval queues and the "
             "coordinator's blobs are the demo's own, in this process; the rest is the real code.")
    second = (f"First a hardware failure of {FAILING}, with no notice; then the rollout: a platform Reboot "
              f"of every web VM and a Redeploy of every api VM, all due in {NOTICE // 60} min "
              f"({NOTICE / TIME_SCALE:g} s), and a Freeze of {DB}, left to Azure. {SLOW}'s application "
              f"comes back {BACK_AFTER:g} s after its Reboot: its probe fails until then. Then a summary "
              "(after about 55 s).")
    return "\n".join([*textwrap.wrap(first, WIDTH), *textwrap.wrap(second, WIDTH)])
