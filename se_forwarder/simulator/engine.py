"""The simulated Scheduled Events service: one shared event list, its clock, approvals and faults.

The engine knows nothing about HTTP; ``server.py`` puts it on the wire. Every change of the event
list happens under one lock and raises ``DocumentIncarnation`` by exactly one, so the same
incarnation always carries the same information (until an ``incarnation_reset`` fault).
Simulated seconds (NotBeforeInSeconds, StartedSeconds, scenario offsets) are divided by
``time_scale``; NotBefore on the wire is the real wall-clock time the event will start.

A scenario's clock starts at the first scheduled-events poll of any VM (``start="first-poll"``,
the default), so a client started after the simulator still sees the whole story; the HTTP layer
reports polls with ``note_poll``. ``start="immediately"`` starts it at once.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from se_forwarder.simulator.faults import Fault, parse_fault
from se_forwarder.simulator.scenarios import Scenario, Step, load_scenario, scenario_from_mapping
from se_forwarder.simulator.topology import Topology
from se_forwarder.simulator.wire import (
    DEFAULT_DESCRIPTIONS,
    DEFAULT_STARTED_SECONDS,
    LATEST_VERSION,
    MIN_NOTICE_SECONDS,
    check_event_fields,
    format_rfc1123,
    parse_rfc1123,
    render_document,
    render_event,
)

log = logging.getLogger("se_forwarder.simulator")

ChangeListener = Callable[[int, list[str]], None]
ScenarioListener = Callable[[dict[str, Any]], None]
SCENARIO_STARTS = ("first-poll", "immediately")


class ApprovalError(ValueError):
    """A StartRequests body that IMDS answers with 400 (malformed, or an unknown EventId)."""


def utc_now_iso(epoch: float) -> str:
    """RFC 3339 UTC with milliseconds, for logs and approval records."""
    stamp = dt.datetime.fromtimestamp(epoch, dt.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_start_requests(body: bytes) -> list[str]:
    """The EventIds of a POST body ``{"StartRequests": [{"EventId": ...}, ...]}``.

    ApprovalError (-> 400) when the body is not exactly that shape.
    """
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApprovalError(f"Bad request. The body is not JSON: {exc}") from None
    requests_ = data.get("StartRequests") if isinstance(data, dict) else None
    if not isinstance(requests_, list):
        raise ApprovalError("Bad request. The body needs a StartRequests list.")
    ids: list[str] = []
    for item in requests_:
        event_id = item.get("EventId") if isinstance(item, dict) else None
        if not isinstance(event_id, str) or not event_id:
            raise ApprovalError("Bad request. Every StartRequests entry needs an EventId string.")
        ids.append(event_id)
    return ids


@dataclass
class _Event:
    """One event and the simulator's bookkeeping about it."""

    event_id: str
    event_type: str
    resource_type: str
    resources: list[str]
    status: str
    description: str
    source: str
    duration: int
    not_before: float | None  # wall time it starts by itself, while Scheduled
    started_seconds: float  # simulated seconds it stays Started
    started_at: float | None = None
    approved_by: set[str] = field(default_factory=set)
    origin: str = "control"

    def wire(self) -> dict[str, Any]:
        """All fields, as the newest api-version shows them."""
        return {
            "EventId": self.event_id,
            "EventType": self.event_type,
            "ResourceType": self.resource_type,
            "Resources": list(self.resources),
            "EventStatus": self.status,
            "NotBefore": "" if self.not_before is None else format_rfc1123(self.not_before),
            "Description": self.description,
            "EventSource": self.source,
            "DurationInSeconds": self.duration,
        }

    def label(self) -> str:
        return f"{self.event_type} {self.event_id}"


@dataclass
class _Run:
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
    ) -> None:
        names = tuple(vm_names)
        if not names:
            raise ValueError("at least one VM name is needed")
        if len(set(names)) != len(names):
            raise ValueError(f"VM names must be unique, got {', '.join(names)}")
        if not (time_scale > 0):
            raise ValueError(f"time_scale must be > 0, got {time_scale!r}")
        self.vm_names = names
        self.topology = topology  # None: every VM sees the one shared list (topology.py)
        self.time_scale = float(time_scale)
        self.multi_tenant = multi_tenant
        self._clock = clock
        self._tick_interval = tick_interval
        self._lock = threading.RLock()
        self._events: dict[str, _Event] = {}
        self._incarnation = 1
        self._approvals: list[dict[str, Any]] = []
        self._faults: list[Fault] = []
        self._requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=request_log_size)
        self._run: _Run | None = None
        self._listeners: list[ChangeListener] = []
        self._scenario_listeners: list[ScenarioListener] = []
        self._first_poll: str | None = None  # "vm0 from 127.0.0.1" once a VM has been polled
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
        self._scenario_listeners.append(listener)

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
        run = self._run
        while run is not None and run.started is not None and run.index < len(run.steps):
            step = run.steps[run.index]
            due = run.started + self.real_seconds(step.at)
            if due > now:
                break
            run.index += 1
            self._apply_step(run, step, due, changes)
        for fault in [f for f in self._faults if f.kind == "incarnation_reset"]:
            if fault.armed_at <= now:
                self._faults.remove(fault)
                self._commit(changes)
                changes = []
                self._set_incarnation(fault.reset_to)
        for event in list(self._events.values()):
            if event.not_before is not None and event.not_before <= now:
                self._start(event, event.not_before)
                changes.append(f"{event.label()} Started (NotBefore passed)")
            ends = self._ends_at(event)
            if ends is not None and ends <= now:
                del self._events[event.event_id]
                changes.append(f"{event.label()} removed (completed)")
        self._commit(changes)

    def _ends_at(self, event: _Event) -> float | None:
        if event.started_at is None:
            return None
        return event.started_at + self.real_seconds(event.started_seconds)

    def _start(self, event: _Event, when: float) -> None:
        event.status = "Started"
        event.not_before = None
        event.started_at = when

    def _set_incarnation(self, value: int) -> None:
        log.info("incarnation reset from %d to %d", self._incarnation, value)
        self._incarnation = value
        for listener in self._listeners:
            try:
                listener(value, [f"DocumentIncarnation reset to {value}"])
            except Exception:
                log.exception("simulator change listener failed")

    # --- events --------------------------------------------------------------------------------

    def _new_event(
        self,
        fields: Mapping[str, Any],
        *,
        base: float,
        resources: Sequence[str] | None = None,
        origin: str = "control",
    ) -> _Event:
        f = check_event_fields(fields)
        event_id = f.get("EventId") or str(uuid.uuid4()).upper()
        if event_id in self._events:
            raise ValueError(f"EventId {event_id} already exists")
        event_type = f.get("EventType", "Freeze")
        status = f.get("EventStatus", "Scheduled")
        event = _Event(
            event_id=event_id,
            event_type=event_type,
            resource_type=f.get("ResourceType", "VirtualMachine"),
            resources=list(f.get("Resources") or resources or self.vm_names),
            status=status,
            description=f.get("Description", DEFAULT_DESCRIPTIONS[event_type]),
            source=f.get("EventSource", "Platform"),
            duration=f.get("DurationInSeconds", -1),
            not_before=None,
            started_seconds=f.get("StartedSeconds", DEFAULT_STARTED_SECONDS),
            origin=origin,
        )
        if status == "Started":
            if f.get("NotBefore") or "NotBeforeInSeconds" in f:
                raise ValueError('a Started event has no NotBefore (it is "" once Started)')
            event.started_at = base
        else:
            event.not_before = self._not_before(f, event_type, base)
        return event

    def _not_before(self, f: Mapping[str, Any], event_type: str, base: float) -> float:
        if "NotBefore" in f:
            if not f["NotBefore"]:
                raise ValueError('a Scheduled event needs a NotBefore; "" is for Started events')
            return parse_rfc1123(f["NotBefore"])
        notice = f.get("NotBeforeInSeconds", MIN_NOTICE_SECONDS[event_type])
        return base + self.real_seconds(notice)

    def add_event(self, fields: Mapping[str, Any], *, vm: str | None = None) -> dict[str, Any]:
        """Add an event (all fields optional) and return it as IMDS shows it.

        Defaults: a new GUID, Freeze, Scheduled, Platform, the minimum notice of its type,
        DurationInSeconds -1, StartedSeconds 600, Resources = ``[vm]`` or all simulated VMs.
        ValueError naming the field when a value is bad.
        """
        with self._lock:
            self._advance()
            self._check_vm(vm)
            event = self._new_event(fields, base=self._clock(), resources=[vm] if vm else None)
            self._events[event.event_id] = event
            self._commit([self._added_line(event)])
            return event.wire()

    def _added_line(self, event: _Event) -> str:
        when = "" if event.not_before is None else f", NotBefore {format_rfc1123(event.not_before)}"
        return (
            f"{event.label()} added ({event.status}{when}, {event.source}, "
            f"Resources {','.join(event.resources)})"
        )

    def patch_event(self, event_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Change fields of an event (e.g. ``{"EventStatus": "Started"}``); KeyError if unknown."""
        with self._lock:
            self._advance()
            event = self._get(event_id)
            f = check_event_fields(fields)
            if f.get("EventId", event_id) != event_id:
                raise ValueError("EventId cannot be changed; delete the event and add another")
            before = event.wire()
            self._patch(event, f, self._clock())
            after = event.wire()
            if after != before:
                changed = sorted(k for k in after if after[k] != before[k])
                self._commit([f"{event.label()} changed: {', '.join(changed)}"])
            return after

    def _patch(self, event: _Event, f: Mapping[str, Any], now: float) -> None:
        simple = {
            "EventType": "event_type",
            "ResourceType": "resource_type",
            "Resources": "resources",
            "Description": "description",
            "EventSource": "source",
            "DurationInSeconds": "duration",
            "StartedSeconds": "started_seconds",
        }
        for key, attr in simple.items():
            if key in f:
                setattr(event, attr, f[key])
        status = f.get("EventStatus", event.status)
        reschedule = "NotBefore" in f or "NotBeforeInSeconds" in f
        if status == "Started" and event.status == "Scheduled":
            self._start(event, now)
        elif status == "Scheduled" and (event.status == "Started" or reschedule):
            event.status = "Scheduled"
            event.started_at = None
            event.not_before = self._not_before(f, event.event_type, now)
        elif reschedule:
            raise ValueError("NotBefore only applies to a Scheduled event")

    def delete_event(self, event_id: str) -> None:
        """Remove an event (the agent sees it complete, or cancel if it was Scheduled)."""
        with self._lock:
            self._advance()
            event = self._get(event_id)
            del self._events[event_id]
            how = "completed" if event.status == "Started" else "canceled"
            self._commit([f"{event.label()} removed ({how}, deleted)"])

    def _get(self, event_id: str) -> _Event:
        try:
            return self._events[event_id]
        except KeyError:
            raise KeyError(f"no event {event_id} in the document") from None

    def _check_vm(self, vm: str | None) -> None:
        if vm is not None and vm not in self.vm_names:
            raise KeyError(f"no VM named {vm!r} here (VMs: {', '.join(self.vm_names)})")

    def events(self) -> list[dict[str, Any]]:
        """The current events with every field (newest api-version)."""
        with self._lock:
            self._advance()
            return [e.wire() for e in self._events.values()]

    def event(self, event_id: str) -> dict[str, Any]:
        """One current event with every field; KeyError when it is not in the document."""
        with self._lock:
            self._advance()
            return self._get(event_id).wire()

    def document(self, vm: str | None = None, api_version: str = LATEST_VERSION) -> dict[str, Any]:
        """The document ``vm`` gets for ``api_version`` (the shared list, or its group's part)."""
        with self._lock:
            self._advance()
            self._check_vm(vm)
            events, incarnation = [e.wire() for e in self._events.values()], self._incarnation
            if self.topology is not None:
                events, incarnation = self.topology.view(vm or self.vm_names[0], events)
            return render_document(incarnation, events, api_version)

    # --- approvals -----------------------------------------------------------------------------

    def approve(
        self,
        event_ids: Sequence[str],
        *,
        vm: str | None = None,
        client: str = "in-process",
        api_version: str = LATEST_VERSION,
    ) -> list[dict[str, Any]]:
        """Handle StartRequests from ``vm``: all-or-nothing, ApprovalError for an unknown EventId.

        An approval starts a Scheduled event for every VM in its Resources; in multi-tenant mode
        only once every listed VM approved it (or at NotBefore). Every EventId is recorded.
        """
        with self._lock:
            self._advance()
            voter = vm or self.vm_names[0]
            self._check_vm(voter)
            now = self._clock()
            visible = {
                e.event_id for e in self._events.values() if render_event(e.wire(), api_version) is not None
                and (self.topology is None or self.topology.sees(voter, e.resources))
            }
            unknown = [i for i in event_ids if i not in visible]
            records: list[dict[str, Any]] = []
            changes: list[str] = []
            for event_id in event_ids:
                record: dict[str, Any] = {
                    "EventId": event_id,
                    "time": utc_now_iso(now),
                    "accepted": not unknown,
                    "vm": voter,
                    "client": client,
                    "started": False,
                    "reason": None,
                }
                if unknown:
                    record["reason"] = (
                        "unknown EventId"
                        if event_id in unknown
                        else f"request also named unknown EventId {unknown[0]}"
                    )
                else:
                    event = self._events[event_id]
                    event.approved_by.add(voter)
                    waiting = set(event.resources) - event.approved_by
                    if event.status == "Scheduled" and not (self.multi_tenant and waiting):
                        self._start(event, now)
                        record["started"] = True
                        changes.append(f"{event.label()} Started (approved by {voter})")
                    elif event.status == "Scheduled":
                        record["reason"] = f"waiting for approval by {', '.join(sorted(waiting))}"
                    else:
                        record["reason"] = "already Started"
                records.append(record)
            self._approvals.extend(records)
            self._commit(changes)
            if unknown:
                raise ApprovalError(f"Bad request. Unknown EventId {unknown[0]}.")
            return records

    def approvals(self) -> list[dict[str, Any]]:
        """Every StartRequests EventId received: EventId, time, accepted, vm, client, ..."""
        with self._lock:
            return [dict(a) for a in self._approvals]

    # --- scenarios -----------------------------------------------------------------------------

    def start_scenario(
        self,
        name_or_path: str | Path | Scenario | Mapping[str, Any],
        params: Mapping[str, Any] | None = None,
        *,
        start: str = "first-poll",
    ) -> dict[str, Any]:
        """Play a scenario (built-in name, file path, parsed Scenario or inline mapping).

        ``start="first-poll"`` (default): its clock starts at the first scheduled-events poll of
        any VM, or now if a VM has been polled already; ``"immediately"``: now. Replaces a
        scenario already playing (its events stay). ScenarioError if it is bad.
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
            self._run = _Run(scenario, steps, None, dict(params or {}), start=start)
            if start == "immediately":
                self._begin(self._run, "asked to start immediately")
            elif self._first_poll is not None:
                self._begin(self._run, f"a client polls already ({self._first_poll})")
            else:
                log.info("scenario %s waits for the first scheduled-events poll (%d steps)",
                         scenario.name, len(steps))
            self._advance()
            return self._scenario_status()

    def note_poll(self, vm: str, client: str = "in-process") -> None:
        """A scheduled-events document is about to be served to ``vm``: starts a waiting scenario."""
        with self._lock:
            if self._first_poll is None:
                self._first_poll = f"{vm} from {client}"
            run = self._run
            if run is not None and run.started is None:
                self._begin(run, f"first scheduled-events poll: {vm} from {client}")
                self._advance()

    def _begin(self, run: _Run, trigger: str) -> None:
        run.started = self._clock()
        run.trigger = trigger
        log.info("scenario %s started (%s; %d steps)", run.scenario.name, trigger, len(run.steps))
        status = self._scenario_status()
        for listener in self._scenario_listeners:
            try:
                listener(dict(status))
            except Exception:
                log.exception("simulator scenario listener failed")

    def _apply_step(self, run: _Run, step: Step, due: float, changes: list[str]) -> None:
        event = self._events.get(run.refs.get(step.ref or "", ""))
        if step.action == "add":
            try:
                new = self._new_event(step.fields, base=due, origin=f"scenario:{run.scenario.name}")
            except ValueError as exc:
                log.warning("scenario %s: step at %gs skipped: %s", run.scenario.name, step.at, exc)
                return
            self._events[new.event_id] = new
            run.refs[step.ref or new.event_id] = new.event_id
            run.created.add(new.event_id)
            changes.append(self._added_line(new))
        elif step.action in ("patch", "start") and event is not None:
            before = event.wire()
            fields = step.fields if step.action == "patch" else {"EventStatus": "Started"}
            if step.action == "patch" or event.status == "Scheduled":
                self._patch(event, fields, due)
            if event.wire() != before:
                changes.append(f"{event.label()} changed by scenario ({step.action})")
        elif step.action in ("delete", "cancel") and event is not None:
            if step.action == "delete" or event.status == "Scheduled":
                del self._events[event.event_id]
                how = "canceled" if event.status == "Scheduled" else "completed"
                changes.append(f"{event.label()} removed ({how})")
        elif step.action == "reset":
            if self._events:
                self._events.clear()
            changes.append("all events removed (scenario reset)")
        elif step.action == "fault":
            self._faults.append(parse_fault(step.fields, vm_names=self.vm_names, now=due))
        elif step.action == "incarnation_reset":
            self._commit(changes)
            changes.clear()
            self._set_incarnation(int(step.fields["to"]))

    def scenario_done(self) -> bool:
        """True when the scenario played every step and its events are all gone (or none runs)."""
        with self._lock:
            self._advance()
            run = self._run
            if run is None:
                return True
            return run.index >= len(run.steps) and not (run.created & set(self._events))

    def scenario_status(self) -> dict[str, Any]:
        """Name, progress and whether the playing scenario is done."""
        with self._lock:
            self._advance()
            return self._scenario_status()

    def _scenario_status(self) -> dict[str, Any]:
        run = self._run
        if run is None:
            return {"name": None, "done": True}
        done = run.index >= len(run.steps) and not (run.created & set(self._events))
        return {
            "name": run.scenario.name,
            "params": run.params,
            "start": run.start,
            "started": None if run.started is None else utc_now_iso(run.started),
            "started_by": run.trigger or None,
            "waiting_for_first_poll": run.started is None,
            "steps_done": run.index,
            "steps_total": len(run.steps),
            "events_remaining": sorted(run.created & set(self._events)),
            "done": done,
        }

    def wait_until(self, predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
        """Poll ``predicate`` until it holds or ``timeout`` s pass; whether it held."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)

    def wait_scenario_done(self, timeout: float) -> bool:
        """Block until ``scenario_done()`` or ``timeout`` real seconds; whether it finished."""
        return self.wait_until(self.scenario_done, timeout)

    # --- faults --------------------------------------------------------------------------------

    def add_fault(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Arm a fault (see ``faults.py``); an incarnation reset without delay applies at once."""
        fault = parse_fault(dict(spec), vm_names=self.vm_names, now=self._clock())
        with self._lock:
            self._faults.append(fault)
            self._advance()
            return fault.describe()

    def faults(self) -> list[dict[str, Any]]:
        """The faults still armed."""
        with self._lock:
            return [f.describe() for f in self._faults]

    def clear_faults(self) -> None:
        """Disarm every fault."""
        with self._lock:
            self._faults.clear()

    def take_fault(self, route: str, vm: str, method: str) -> Fault | None:
        """The fault hitting this request, if any (its count goes down by one)."""
        with self._lock:
            now = self._clock()
            self._faults = [f for f in self._faults if f.kind == "incarnation_reset"
                            or not f.expired(now)]  # a fault limited by seconds ran out
            for fault in self._faults:
                if fault.matches(route, vm, method, now):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
            return None

    # --- request log ---------------------------------------------------------------------------

    def record_request(self, entry: dict[str, Any]) -> None:
        """Append one IMDS request to the log (bounded; oldest dropped first)."""
        with self._lock:
            self._requests.append(entry)

    def requests(self, vm: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """The IMDS requests received, oldest first, optionally of one VM / the last ``limit``."""
        with self._lock:
            entries = [dict(r) for r in self._requests if vm is None or r.get("vm") == vm]
        return entries[-limit:] if limit else entries

    # --- reset ---------------------------------------------------------------------------------

    def reset(self) -> int:
        """Empty document (incarnation still goes up), no scenario, faults, approvals or log."""
        with self._lock:
            self._events.clear()
            self._run = None
            self._faults.clear()
            self._approvals.clear()
            self._requests.clear()
            self._commit(["reset: all events removed"])
            for hook in self._reset_hooks:
                hook()
            return self._incarnation
