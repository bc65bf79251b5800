"""Prepare and recover hooks: commands run when an event appears and when it is gone.

``prepare`` runs once for every event that affects this VM (and that no rule ignores) when it is
first seen, Scheduled or (for events never seen Scheduled, e.g. hardware failures) Started; with
``prepare_lead`` (seconds), a Scheduled event's prepare waits until its NotBefore is at most that
far away (drain late for routine maintenance; leave it unset to drain at once); an event whose
NotBefore could not be read is prepared at once (it might be seconds away). An event whose
Resources could not be read counts as affecting this VM. ``recover`` runs
once when such an event has left the document (completed or canceled), after its prepare
finished. A successful prepare is reported by a ``prepared`` CloudEvent (see ``audit.py``).

Each command gets the event JSON on stdin (the CloudEvent ``data`` shape: the IMDS event plus
``NotBeforeUtc``, ``DocumentIncarnation``, ``AffectsThisVm``, ``Vm``) and ``SE_HOOK``,
``SE_EVENT_ID``, ``SE_EVENT_TYPE``, ``SE_EVENT_STATUS`` (the last status seen),
``SE_NOT_BEFORE`` (RFC 3339, empty once Started), ``SE_VM_NAME`` and, for recover,
``SE_EVENT_OUTCOME`` (``completed`` or ``canceled``: ``completed`` also when the agent inferred
that a vanished Scheduled event ran, see ``differ.py``) in its environment, which is an allow-list
(see ``hook_process.py``): never the agent's secrets.

At most once per event and hook, even across restarts: the run is recorded as ``running`` in the
state database before the command starts. A run found ``running`` at start-up was interrupted by an
agent stop or crash; it is marked ``interrupted`` and not run again (a half-drained node is better
handled by a person than by a second drain). Hooks run on their own threads, in their own process
group (so a timeout kills the command's children too), and never delay polling. A stopping agent
gives them their grace (``terminate``, then ``kill_after``). Their output goes to the log (the last
``OUTPUT_LINES`` lines of a bounded spool).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from .. import cloudevents as ce
from ..model import SCHEDULED, STARTED, ScheduledEvent, VmIdentity, parse_event
from ..outbox.hook_runs import (
    FAILED,
    INTERRUPTED,
    NONE,
    PREPARE,
    RECOVER,
    RUNNING,
    SUCCEEDED,
    TIMED_OUT,
    HookRuns,
)
from ..telemetry import fields
from ..timestamps import rfc3339
from . import hook_process
from .settings import HookSettings

log = logging.getLogger("se_forwarder.approvals.hooks")

__all__ = ["FAILED", "INTERRUPTED", "NONE", "PREPARE", "RECOVER", "RUNNING", "SUCCEEDED", "TIMED_OUT",
           "HookResult", "HookRunner"]
OUTPUT_LINES = 50
THREAD_START_TRIES = 5  # a hook's thread may fail to start while the unit is at TasksMax
RETENTION_SECONDS = 30 * 86400

@dataclass(frozen=True)
class HookResult:
    """A finished (or interrupted) hook run."""

    event_id: str
    hook: str
    state: str
    exit_code: int | None
    seconds: float | None
    detail: str
    event: ScheduledEvent
    incarnation: int

    @property
    def ok(self) -> bool:
        return self.state in (SUCCEEDED, NONE)


def _stored(event: ScheduledEvent, incarnation: int) -> str:
    return json.dumps({"event": dict(event.raw), "incarnation": incarnation}, sort_keys=True)


def _load(text: str) -> tuple[ScheduledEvent, int]:
    value = json.loads(text)
    return parse_event(value["event"]), int(value["incarnation"])


class HookRunner:
    """Starts hook commands when due, and collects their results for the approver thread.

    All database access (the outbox's ``hook_runs``) happens on the caller's thread (the
    approver's); the commands' own threads only wait for the process and hand the result back
    through a queue.
    """

    def __init__(
        self,
        config: HookSettings,
        vm: VmIdentity | Callable[[], VmIdentity],
        *,
        secret_env: Iterable[str] = (),
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.commands: dict[str, tuple[str, ...] | None] = {
            PREPARE: config.prepare, RECOVER: config.recover,
        }
        self.timeouts = {PREPARE: config.prepare_timeout, RECOVER: config.recover_timeout}
        self.approve_after_prepare = config.approve_after_prepare
        self.prepare_lead = config.prepare_lead
        self._vm = vm if callable(vm) else (lambda: vm)
        self.secret_env = {name for name in secret_env if name}
        self.env_names: list[str] = list(config.env)
        self.stop_grace = config.stop_grace
        self.processes = hook_process.Processes()
        self.wake = wake
        self._done: queue.SimpleQueue[HookResult] = queue.SimpleQueue()
        self._threads: dict[tuple[str, str], threading.Thread] = {}
        self._known: dict[str, str] = {}  # event_id -> stored JSON, to notice changes

    @property
    def vm(self) -> VmIdentity:
        """The identity in use now (the host name until the instance metadata answered)."""
        return self._vm()

    def prepare_due(self, event: ScheduledEvent, now: datetime) -> bool:
        """Whether prepare may start now: at once, or with ``prepare_lead`` once a Scheduled
        event's NotBefore is at most that many seconds away."""
        if self.prepare_lead is None or event.status != SCHEDULED or event.not_before is None:
            return True
        return (event.not_before - now).total_seconds() <= self.prepare_lead

    @property
    def configured(self) -> bool:
        return bool(self.commands[PREPARE] or self.commands[RECOVER])

    @property
    def prepares(self) -> bool:
        return bool(self.commands[PREPARE])

    @property
    def timed(self) -> bool:
        """Whether a Scheduled event's prepare may fall due with time alone (``prepare_lead``)."""
        return self.prepares and self.prepare_lead is not None

    # -- state ----------------------------------------------------------------------------
    def prepare_state(self, runs: HookRuns, event_id: str) -> str | None:
        """The prepare run's state for ``event_id`` (None: not started)."""
        return runs.state(event_id, PREPARE)

    def interrupted(self, runs: HookRuns) -> list[HookResult]:
        """Runs left ``running`` by a previous agent process: marked interrupted, never re-run."""
        now = time.time()
        runs.forget_finished(now - RETENTION_SECONDS)
        out = []
        for run in runs.all(RUNNING):
            if (run.event_id, run.hook) in self._threads:
                continue
            detail = "interrupted: the agent stopped while the hook ran; it is not run again"
            runs.finish(run.event_id, run.hook, INTERRUPTED, detail, ended_at=now)
            event, incarnation = _load(run.event)
            out.append(HookResult(run.event_id, run.hook, INTERRUPTED, None, now - run.started_at,
                                  detail, event, incarnation))
        return out

    def collect(self, runs: HookRuns) -> list[HookResult]:
        """Results of the runs finished since the last call, now recorded in the database."""
        out: list[HookResult] = []
        while True:
            try:
                result = self._done.get_nowait()
            except queue.Empty:
                return out
            self._threads.pop((result.event_id, result.hook), None)
            runs.finish(result.event_id, result.hook, result.state, result.detail, result.exit_code)
            out.append(result)

    def sync(
        self,
        runs: HookRuns,
        events: Iterable[ScheduledEvent],
        incarnation: int,
        eligible: Callable[[ScheduledEvent], bool],
        *,
        ran: Callable[[ScheduledEvent], bool] = lambda event: event.status == STARTED,
        now: datetime | None = None,
    ) -> None:
        """Start prepare for new eligible events (when due) and recover for tracked events now
        gone; ``ran`` says whether a gone event completed (else it was canceled)."""
        now = now or datetime.now(UTC)
        rows = {(run.event_id, run.hook): (run.state, run.event) for run in runs.all()}
        present = set()
        for event in events:
            present.add(event.event_id)
            if (event.event_id, PREPARE) in rows:
                self._remember(runs, event, incarnation)
            elif eligible(event) and self.prepare_due(event, now):
                self._begin(runs, PREPARE, event, incarnation, outcome=None)
        self._known = {k: v for k, v in self._known.items() if k in present}
        for (event_id, hook), (state, stored) in rows.items():
            if hook != PREPARE or event_id in present or state == RUNNING:
                continue
            if (event_id, RECOVER) in rows:
                continue
            event, last_incarnation = _load(stored)
            outcome = "completed" if event.status == STARTED or ran(event) else "canceled"
            self._begin(runs, RECOVER, event, last_incarnation, outcome=outcome)

    def _remember(self, runs: HookRuns, event: ScheduledEvent, incarnation: int) -> None:
        """Keep the latest version of a tracked event (recover gets the last status seen)."""
        seen = json.dumps(dict(event.raw), sort_keys=True)
        if self._known.get(event.event_id) == seen:
            return
        self._known[event.event_id] = seen
        runs.update_event(event.event_id, PREPARE, _stored(event, incarnation))

    # -- running --------------------------------------------------------------------------
    def _begin(self, runs: HookRuns, hook: str, event: ScheduledEvent, incarnation: int,
               outcome: str | None) -> None:
        command = self.commands[hook]
        if self.processes.stopping:
            return  # the agent is stopping: the next start runs it
        state = RUNNING if command else NONE
        # Recorded (and committed: autocommit) before the command starts: at most once.
        runs.begin(event.event_id, hook, state, _stored(event, incarnation))
        self._known[event.event_id] = json.dumps(dict(event.raw), sort_keys=True)
        if not command:
            return
        log.info("running %s hook", hook, extra=fields(event_id=event.event_id, origin=hook))
        payload = json.dumps(ce.event_data(event, incarnation, self.vm)).encode("utf-8")
        env = self._environment(hook, event, outcome)
        thread = threading.Thread(
            target=self._execute, args=(hook, list(command), payload, env, event, incarnation),
            name=f"hook-{hook}-{event.event_id[:8]}", daemon=True,
        )
        self._threads[(event.event_id, hook)] = thread
        self._start(thread, hook, event, incarnation)

    def _start(self, thread: threading.Thread, hook: str, event: ScheduledEvent,
               incarnation: int) -> None:
        """Start the hook's thread; if none can be had, the run fails (recorded, never stuck
        ``running``): its command has not started."""
        for attempt in range(THREAD_START_TRIES):
            try:
                thread.start()
                return
            except RuntimeError as exc:  # "can't start new thread"
                if attempt + 1 == THREAD_START_TRIES:
                    self._done.put(HookResult(event.event_id, hook, FAILED, None, 0.0,
                                              f"could not start: {exc} (too many threads)", event,
                                              incarnation))
                    self.wake()
                    return
                time.sleep(0.2 * (attempt + 1))

    def terminate(self) -> int:
        """The agent stops: no new hook starts, SIGTERM to the running ones' process groups."""
        return self.processes.terminate()

    def kill_after(self, deadline: float) -> list[int]:
        """After ``terminate``: wait for the hooks until ``deadline`` (monotonic), then SIGKILL."""
        return self.processes.kill_after(deadline)

    def _environment(self, hook: str, event: ScheduledEvent, outcome: str | None) -> dict[str, str]:
        own = {
            "SE_HOOK": hook,
            "SE_EVENT_ID": event.event_id,
            "SE_EVENT_TYPE": event.event_type,
            "SE_EVENT_STATUS": event.status,
            "SE_NOT_BEFORE": rfc3339(event.not_before) if event.not_before else "",
            "SE_VM_NAME": self.vm.name,
        }
        if outcome:
            own["SE_EVENT_OUTCOME"] = outcome
        return hook_process.environment(os.environ, self.env_names, self.secret_env, own)

    def _execute(self, hook: str, command: list[str], payload: bytes, env: dict[str, str],
                 event: ScheduledEvent, incarnation: int) -> None:
        started = time.monotonic()
        try:
            state, code, detail = self._run_command(hook, command, payload, env, event.event_id)
        except Exception as exc:  # the result must always come back, or the run stays "running"
            state, code, detail = FAILED, None, f"could not run the hook: {exc}"
        self._done.put(HookResult(event.event_id, hook, state, code, time.monotonic() - started,
                                  detail, event, incarnation))
        self.wake()

    def _run_command(self, hook: str, command: list[str], payload: bytes, env: dict[str, str],
                     event_id: str) -> tuple[str, int | None, str]:
        with tempfile.TemporaryFile() as stdin:
            stdin.write(payload)
            stdin.seek(0)
            outcome = hook_process.run(self.processes, command, stdin, env, self.timeouts[hook])
        self._log_output(outcome.spool, hook, event_id, outcome.state)
        return outcome.state, outcome.exit_code, outcome.detail + outcome.spool.note()

    def _log_output(self, spool: hook_process.Spool, hook: str, event_id: str, state: str) -> None:
        level = logging.INFO if state == SUCCEEDED else logging.WARNING
        if spool.dropped:
            log.warning("%s hook: output over %d bytes; the first %d bytes were dropped", hook,
                        spool.limit, spool.dropped, extra=fields(event_id=event_id, origin=hook))
        for line in spool.text().splitlines()[-OUTPUT_LINES:]:
            log.log(level, "%s hook: %s", hook, line[:500],
                    extra=fields(event_id=event_id, origin=hook))
