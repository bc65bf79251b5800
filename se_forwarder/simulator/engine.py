"""The simulated Scheduled Events service: one shared event list, its clock, approvals and faults.

The engine knows nothing about HTTP; ``server.py`` puts it on the wire. Every change of the event
list happens under one lock and raises ``DocumentIncarnation`` by exactly one, so the same
incarnation always carries the same information (until an ``incarnation_reset`` fault).
Simulated seconds (NotBeforeInSeconds, StartedSeconds, scenario offsets) are divided by
``time_scale``; NotBefore on the wire is the real wall-clock time the event will start.

Scenarios are played by ``player.py`` against this store; the HTTP layer reports polls with
``note_poll`` (a scenario's clock may start at the first one).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from se_forwarder.errors import ConfigError
from se_forwarder.simulator.faults import ArmedFaults, Fault, parse_fault
from se_forwarder.simulator.player import SCENARIO_STARTS, ScenarioListener, ScenarioPlayer, wait_until
from se_forwarder.simulator.scenarios import Scenario, load_scenario, scenario_from_mapping
from se_forwarder.simulator.store import EventStore
from se_forwarder.simulator.topology import Placement, Topology
from se_forwarder.simulator.wire import (
    LATEST_VERSION,
    ApprovalError,
    check_event_fields,
    not_before_format_setting,
    render_document,
)

log = logging.getLogger("se_forwarder.simulator")

ChangeListener = Callable[[int, list[str]], None]
__all__ = ["SCENARIO_STARTS", "ApprovalError", "ChangeListener", "ScenarioListener", "SettingError",
           "Simulator"]


class SettingError(ConfigError, ValueError):
    """A setting of the simulator (time scale, port, ...) that cannot be used; the message names it."""


class Simulator:
    """The in-process engine behind the HTTP server (``SimulatorServer.sim``)."""

    def __init__(
        self,
        vm_names: Sequence[str] = ("vm0",),
        time_scale: float = 1.0,
        *,
        multi_tenant: bool = False,
        clock: Callable[[], float] = time.time,
        tick_interval: float = 0.05,
        request_log_size: int = 10_000,
        topology: Topology | None = None,
        not_before_format: str = "rfc1123",
    ) -> None:
        if not (time_scale > 0):
            raise SettingError(f"time_scale must be > 0, got {time_scale!r}")
        self.not_before_format = not_before_format_setting(not_before_format)
        self._placement = Placement(vm_names, topology)  # which VM sees what (topology.py)
        self.vm_names, self.topology = self._placement.vm_names, topology
        self.time_scale = float(time_scale)
        self.multi_tenant = multi_tenant
        self._clock = clock
        self._tick_interval = tick_interval
        self._lock = threading.RLock()
        self._store = EventStore(self.vm_names, self.real_seconds)
        self._events = self._store.events
        self._incarnation = 1
        self._faults = ArmedFaults()
        self._requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=request_log_size)
        self._player = ScenarioPlayer(clock, self.real_seconds)
        self._listeners: list[ChangeListener] = []
        self._reset_hooks: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- life cycle ----------------------------------------------------------------------------

    def start(self) -> Simulator:
        """Start the background tick (every ``tick_interval`` s) that moves time forward."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._tick_loop, name="imds-sim-tick", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop the background tick."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _tick_loop(self) -> None:
        while not self._stop.wait(self._tick_interval):
            try:
                self.tick()
            except Exception:  # the tick must survive a bad scenario step
                log.exception("simulator tick failed")

    def tick(self) -> None:
        """Apply everything that is due now: scenario steps, NotBefore, end of Started."""
        with self._lock:
            self._advance()

    def subscribe(self, listener: ChangeListener) -> None:
        """Call ``listener(incarnation, changes)`` after every change (under the lock: be quick)."""
        self._listeners.append(listener)

    def on_scenario_start(self, listener: ScenarioListener) -> None:
        """Call ``listener(scenario_status)`` when a scenario's clock starts (under the lock)."""
        self._player.on_start(listener)

    def on_reset(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` on every reset (the HTTP layer clears its throttling windows)."""
        self._reset_hooks.append(hook)

    # --- time ----------------------------------------------------------------------------------

    def real_seconds(self, simulated: float) -> float:
        """How long ``simulated`` seconds last in real time under the time scale."""
        return simulated / self.time_scale

    @property
    def incarnation(self) -> int:
        """The current DocumentIncarnation."""
        with self._lock:
            self._advance()
            return self._incarnation

    def _commit(self, changes: list[str]) -> None:
        if not changes:
            return
        self._incarnation += 1
        for line in changes:
            log.info("incarnation %d: %s", self._incarnation, line)
        for listener in self._listeners:
            try:
                listener(self._incarnation, list(changes))
            except Exception:
                log.exception("simulator change listener failed")

    def _advance(self) -> None:
        now = self._clock()
        changes: list[str] = []
        self._player.advance(self._store, self, now, changes)
        for fault in self._faults.due_resets(now):
            self._commit(changes)
            changes = []
            self._set_incarnation(fault.reset_to)
        changes += self._store.due(now)
        self._commit(changes)

    def _set_incarnation(self, value: int) -> None:
        log.info("incarnation reset from %d to %d", self._incarnation, value)
        self._incarnation = value
        for listener in self._listeners:
            try:
                listener(value, [f"DocumentIncarnation reset to {value}"])
            except Exception:
                log.exception("simulator change listener failed")

    # --- events --------------------------------------------------------------------------------

    def add_event(self, fields: Mapping[str, Any], *, vm: str | None = None) -> dict[str, Any]:
        """Add an event (all fields optional) and return it as IMDS shows it.

        Defaults: a new GUID, Freeze, Scheduled, Platform, the minimum notice of its type,
        DurationInSeconds -1, StartedSeconds 600, Resources = ``[vm]`` or all simulated VMs.
        ValueError naming the field when a value is bad.
        """
        with self._lock:
            self._advance()
            self._placement.check(vm)
            event = self._store.new(fields, base=self._clock(), resources=[vm] if vm else None)
            self._events[event.event_id] = event
            self._commit([event.added_line()])
            return event.wire(self.not_before_format)

    def patch_event(self, event_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Change fields of an event (e.g. ``{"EventStatus": "Started"}``); KeyError if unknown."""
        with self._lock:
            self._advance()
            event = self._store.get(event_id)
            f = check_event_fields(fields)
            if f.get("EventId", event_id) != event_id:
                raise ValueError("EventId cannot be changed; delete the event and add another")
            before = event.wire(self.not_before_format)
            self._store.patch(event, f, self._clock())
            after = event.wire(self.not_before_format)
            if after != before:
                changed = sorted(k for k in after if after[k] != before[k])
                self._commit([f"{event.label()} changed: {', '.join(changed)}"])
            return after

    def delete_event(self, event_id: str) -> None:
        """Remove an event (the agent sees it complete, or cancel if it was Scheduled)."""
        with self._lock:
            self._advance()
            event = self._store.get(event_id)
            del self._events[event.event_id]
            how = "completed" if event.status == "Started" else "canceled"
            self._commit([f"{event.label()} removed ({how}, deleted)"])

    def snapshot(self) -> list[dict[str, Any]]:
        """The events as they are, for a change listener (it runs under the lock: no time moves)."""
        with self._lock:
            return [e.wire() for e in self._events.values()]

    def now(self) -> float:
        """The engine's clock (wall time, or a test's clock)."""
        return self._clock()

    def events(self) -> list[dict[str, Any]]:
        """The current events with every field (newest api-version)."""
        with self._lock:
            self._advance()
            return [e.wire(self.not_before_format) for e in self._events.values()]

    def event(self, event_id: str) -> dict[str, Any]:
        """One current event with every field; KeyError when it is not in the document."""
        with self._lock:
            self._advance()
            return self._store.get(event_id).wire(self.not_before_format)

    def document(self, vm: str | None = None, api_version: str = LATEST_VERSION) -> dict[str, Any]:
        """The document ``vm`` gets for ``api_version`` (the shared list, or its group's part)."""
        with self._lock:
            self._advance()
            self._placement.check(vm)
            events, incarnation = self._placement.view(
                vm, [e.wire(self.not_before_format) for e in self._events.values()], self._incarnation)
            return render_document(incarnation, events, api_version)

    # --- approvals -----------------------------------------------------------------------------

    def approve(
        self,
        event_ids: Sequence[str],
        *,
        vm: str | None = None,
        client: str = "in-process",
        api_version: str = LATEST_VERSION,
        via: str = "imds",
    ) -> list[dict[str, Any]]:
        """Handle StartRequests from ``vm``: all-or-nothing, ApprovalError for an unknown EventId.

        An approval starts a Scheduled event for every VM in its Resources; in multi-tenant mode
        only once every listed VM approved it (or at NotBefore). Every EventId is recorded, with
        ``via``: ``imds`` (a StartRequests POST) or ``arm`` (the Maintenance ``acknowledge``,
        which starts the event exactly as a StartRequests from ``vm`` would).
        """
        with self._lock:
            self._advance()
            voter = vm or self.vm_names[0]
            self._placement.check(voter)
            records, changes = self._store.approve(
                event_ids, voter=voter, client=client, now=self._clock(),
                multi_tenant=self.multi_tenant, api_version=api_version,
                sees=self._placement.sees, via=via)
            self._commit(changes)
            unknown = [r["EventId"] for r in records if r["reason"] == "unknown EventId"]
            if unknown:
                raise ApprovalError(f"Bad request. Unknown EventId {unknown[0]}.")
            return records

    def approvals(self) -> list[dict[str, Any]]:
        """Every StartRequests EventId received: EventId, time, accepted, vm, client, via, ..."""
        with self._lock:
            return [dict(a) for a in self._store.approvals]

    # --- scenarios (played by player.py) -----------------------------------------------------

    def start_scenario(
        self,
        name_or_path: str | Path | Scenario | Mapping[str, Any],
        params: Mapping[str, Any] | None = None,
        *,
        start: str = "first-poll",
        new_event_id_per_state: bool | None = None,
    ) -> dict[str, Any]:
        """Play a scenario (built-in name, file path, parsed Scenario or inline mapping).

        ``start="first-poll"`` (default): its clock starts at the first scheduled-events poll of
        any VM, or now if a VM has been polled already; ``"immediately"``: now. Replaces a
        scenario already playing (its events stay). ``new_event_id_per_state`` (None: as the
        scenario says) shows each of its events under a new EventId once Started, as Microsoft's
        mock server does. ScenarioError if it is bad.
        """
        if start not in SCENARIO_STARTS:
            raise ValueError(f"start must be one of {', '.join(SCENARIO_STARTS)}, got {start!r}")
        if isinstance(name_or_path, Scenario):
            scenario = name_or_path
        elif isinstance(name_or_path, Mapping):
            scenario = scenario_from_mapping(dict(name_or_path), "inline", "control API")
        else:
            scenario = load_scenario(name_or_path)
        steps = scenario.compile(self.vm_names, params)
        with self._lock:
            self._advance()
            new_ids = scenario.new_event_id_per_state if new_event_id_per_state is None \
                else new_event_id_per_state
            self._player.load(scenario, steps, params or {}, start, new_ids=new_ids)
            self._advance()
            return self._player.status(set(self._events))

    def note_poll(self, vm: str, client: str = "in-process") -> None:
        """A scheduled-events document is about to be served to ``vm``: starts a waiting scenario."""
        with self._lock:
            if self._player.note_poll(vm, client):
                self._advance()

    def scenario_done(self) -> bool:
        """True when the scenario played every step and its events are all gone (or none runs)."""
        with self._lock:
            self._advance()
            return self._player.done(set(self._events))

    def scenario_status(self) -> dict[str, Any]:
        """Name, progress and whether the playing scenario is done."""
        with self._lock:
            self._advance()
            return self._player.status(set(self._events))

    # --- what a scenario step does besides events (player.Engine; under the lock) ------------

    def arm_fault(self, spec: Mapping[str, Any], now: float) -> None:
        self._faults.arm(parse_fault(dict(spec), vm_names=self.vm_names, now=now))

    def reset_incarnation(self, value: int, changes: list[str]) -> None:
        self._commit(changes)
        changes.clear()
        self._set_incarnation(value)

    wait_until = staticmethod(wait_until)  # for tests and callers holding only the engine

    def wait_scenario_done(self, timeout: float) -> bool:
        """Block until ``scenario_done()`` or ``timeout`` real seconds; whether it finished."""
        return self.wait_until(self.scenario_done, timeout)

    # --- faults --------------------------------------------------------------------------------

    def add_fault(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Arm a fault (see ``faults.py``); an incarnation reset without delay applies at once."""
        fault = parse_fault(dict(spec), vm_names=self.vm_names, now=self._clock())
        with self._lock:
            self._faults.arm(fault)
            self._advance()
            return fault.describe()

    def faults(self) -> list[dict[str, Any]]:
        """The faults still armed."""
        with self._lock:
            return self._faults.describe(self._clock())

    def clear_faults(self) -> None:
        """Disarm every fault."""
        with self._lock:
            self._faults.clear()

    def take_fault(self, route: str, vm: str, method: str) -> Fault | None:
        """The fault hitting this request, if any (its count goes down by one)."""
        with self._lock:
            return self._faults.take(route, vm, method, self._clock())

    # --- request log, reset ----------------------------------------------------------------------

    def record_request(self, entry: dict[str, Any]) -> None:
        """Append one IMDS request to the log (bounded; oldest dropped first)."""
        with self._lock:
            self._requests.append(entry)

    def requests(self, vm: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """The IMDS requests received, oldest first, optionally of one VM / the last ``limit``."""
        with self._lock:
            entries = [dict(r) for r in self._requests if vm is None or r.get("vm") == vm]
        return entries[-limit:] if limit else entries

    def reset(self) -> int:
        """Empty document (incarnation still goes up), no scenario, faults, approvals or log."""
        with self._lock:
            self._events.clear()
            self._player.clear()
            self._faults.clear()
            self._store.approvals.clear()
            self._requests.clear()
            for hook in self._reset_hooks:  # first: what listens to changes starts afresh
                hook()
            self._commit(["reset: all events removed"])
            return self._incarnation
