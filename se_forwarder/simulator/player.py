"""The scenario player: which step of the playing scenario is due, and what it does to the store.

A scenario's clock starts at the first scheduled-events poll of any VM (``start="first-poll"``,
the default), so a client started after the simulator still sees the whole story; ``start=
"immediately"`` starts it at once. Offsets are simulated seconds (divided by the time scale). The
player holds no events itself: each step is applied to the engine's store (``engine.py``) through
its ``EventStore`` and the two operations of ``Engine``, under the engine's lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from se_forwarder.simulator.scenarios import Scenario, Step
from se_forwarder.simulator.store import EventStore
from se_forwarder.timestamps import rfc3339

log = logging.getLogger("se_forwarder.simulator")

SCENARIO_STARTS = ("first-poll", "immediately")
ScenarioListener = Callable[[dict[str, Any]], None]


class Engine(Protocol):
    """What a scenario step may do besides changing events (see ``engine.Simulator``)."""

    def arm_fault(self, spec: Mapping[str, Any], now: float) -> None: ...

    def reset_incarnation(self, value: int, changes: list[str]) -> None: ...


@dataclass
class Run:
    """A scenario being played."""

    scenario: Scenario
    steps: list[Step]
    started: float | None  # None: waiting for the first scheduled-events poll
    params: dict[str, Any]
    start: str = "immediately"
    trigger: str = ""  # what started it, for people
    index: int = 0
    refs: dict[str, str] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)
    new_ids: bool = False  # its events get a new EventId once Started (Microsoft's mock server)


class ScenarioPlayer:
    """Plays one scenario at a time; every method is called under the engine's lock."""

    def __init__(self, clock: Callable[[], float], real_seconds: Callable[[float], float]) -> None:
        self._clock = clock
        self._real_seconds = real_seconds
        self.run: Run | None = None
        self.first_poll: str | None = None  # "vm0 from 127.0.0.1" once a VM has been polled
        self._listeners: list[ScenarioListener] = []

    def on_start(self, listener: ScenarioListener) -> None:
        self._listeners.append(listener)

    def load(self, scenario: Scenario, steps: list[Step], params: Mapping[str, Any],
             start: str, *, new_ids: bool = False) -> None:
        """Replace the playing scenario (its events stay) and start it as ``start`` says."""
        if start not in SCENARIO_STARTS:
            raise ValueError(f"start must be one of {', '.join(SCENARIO_STARTS)}, got {start!r}")
        self.run = Run(scenario, steps, None, dict(params), start=start, new_ids=new_ids)
        if start == "immediately":
            self._begin(self.run, "asked to start immediately")
        elif self.first_poll is not None:
            self._begin(self.run, f"a client polls already ({self.first_poll})")
        else:
            log.info("scenario %s waits for the first scheduled-events poll (%d steps)",
                     scenario.name, len(steps))

    def note_poll(self, vm: str, client: str) -> bool:
        """A document is about to be served; True when this started a waiting scenario."""
        if self.first_poll is None:
            self.first_poll = f"{vm} from {client}"
        run = self.run
        if run is not None and run.started is None:
            self._begin(run, f"first scheduled-events poll: {vm} from {client}")
            return True
        return False

    def clear(self) -> None:
        self.run = None

    def _begin(self, run: Run, trigger: str) -> None:
        run.started = self._clock()
        run.trigger = trigger
        log.info("scenario %s started (%s; %d steps)", run.scenario.name, trigger, len(run.steps))
        status = self.status(set())
        for listener in self._listeners:
            try:
                listener(dict(status))
            except Exception:
                log.exception("simulator scenario listener failed")

    def advance(self, store: EventStore, engine: Engine, now: float, changes: list[str]) -> None:
        """Apply every step due by ``now``, in order, recording what changed in ``changes``."""
        run = self.run
        while run is not None and run.started is not None and run.index < len(run.steps):
            step = run.steps[run.index]
            due = run.started + self._real_seconds(step.at)
            if due > now:
                break
            run.index += 1
            self._apply(store, engine, run, step, due, changes)

    def _apply(self, store: EventStore, engine: Engine, run: Run, step: Step, due: float,
               changes: list[str]) -> None:
        ref = run.refs.get(step.ref or "", "")
        present = ref in store.events
        if step.action == "add":
            try:
                event = store.add_from_scenario(step.fields, due, f"scenario:{run.scenario.name}",
                                                new_id_per_state=run.new_ids)
            except ValueError as exc:
                log.warning("scenario %s: step at %gs skipped: %s", run.scenario.name, step.at, exc)
                return
            run.refs[step.ref or event.event_id] = event.event_id
            run.created.add(event.event_id)
            changes.append(event.added_line())
        elif step.action in ("patch", "start") and present:
            fields = step.fields if step.action == "patch" else {"EventStatus": "Started"}
            line = store.patch_from_scenario(ref, fields, due, only_if_scheduled=step.action == "start")
            if line:
                changes.append(line)
        elif step.action in ("delete", "cancel") and present:
            line = store.remove_from_scenario(ref, only_if_scheduled=step.action == "cancel")
            if line:
                changes.append(line)
        elif step.action == "reset":
            store.events.clear()
            changes.append("all events removed (scenario reset)")
        elif step.action == "fault":
            engine.arm_fault(step.fields, due)
        elif step.action == "incarnation_reset":
            engine.reset_incarnation(int(step.fields["to"]), changes)

    def done(self, current: set[str]) -> bool:
        """Every step played and the scenario's events all gone (or no scenario at all)."""
        run = self.run
        return run is None or (run.index >= len(run.steps) and not (run.created & current))

    def status(self, current: set[str]) -> dict[str, Any]:
        """Name, progress and whether the playing scenario is done."""
        run = self.run
        if run is None:
            return {"name": None, "done": True}
        return {
            "name": run.scenario.name,
            "params": run.params,
            "start": run.start,
            "new_event_id_per_state": run.new_ids,
            "started": None if run.started is None else rfc3339(run.started, milliseconds=True),
            "started_by": run.trigger or None,
            "waiting_for_first_poll": run.started is None,
            "steps_done": run.index,
            "steps_total": len(run.steps),
            "events_remaining": sorted(run.created & current),
            "done": self.done(current),
        }


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` s pass; whether it held."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
