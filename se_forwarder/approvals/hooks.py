"""Prepare and recover hooks: commands run when an event appears and when it is gone.

``prepare`` runs once for every event that affects this VM (and that no rule ignores) when it is
first seen, Scheduled or (for events never seen Scheduled, e.g. hardware failures) Started; with
``prepare_lead`` (seconds), a Scheduled event's prepare waits until its NotBefore is at most that
far away (drain late for routine maintenance; leave it unset to drain at once). ``recover`` runs
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
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .. import cloudevents as ce
from ..model import SCHEDULED, STARTED, ScheduledEvent, VmIdentity, parse_event
from ..telemetry import fields
from . import hook_process

log = logging.getLogger("se_forwarder.approvals.hooks")

PREPARE, RECOVER = "prepare", "recover"
RUNNING, SUCCEEDED, FAILED, TIMED_OUT, INTERRUPTED = (
    "running", "succeeded", "failed", "timed-out", "interrupted",
)
NONE = "none"  # no command configured: the row only tracks the event (for recover)
OUTPUT_LINES = 50
THREAD_START_TRIES = 5  # a hook's thread may fail to start while the unit is at TasksMax
RETENTION_SECONDS = 30 * 86400

SCHEMA = """
CREATE TABLE IF NOT EXISTS approval_hook_runs (
    event_id TEXT NOT NULL,
    hook TEXT NOT NULL,
    state TEXT NOT NULL,
    event TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    exit_code INTEGER,
    detail TEXT,
    PRIMARY KEY (event_id, hook)
);
"""


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


def ensure_schema(db: sqlite3.Connection) -> None:
    db.executescript(SCHEMA)


def _stored(event: ScheduledEvent, incarnation: int) -> str:
    return json.dumps({"event": dict(event.raw), "incarnation": incarnation}, sort_keys=True)


def _load(text: str) -> tuple[ScheduledEvent, int]:
    value = json.loads(text)
    return parse_event(value["event"]), int(value["incarnation"])


class HookRunner:
    """Starts hook commands when due, and collects their results for the approver thread.

    All database access happens on the caller's thread (the approver's); the commands' own threads
    only wait for the process and hand the result back through a queue.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        vm: VmIdentity | Callable[[], VmIdentity],
        *,
        secret_env: Iterable[str] = (),
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.commands: dict[str, list[str] | None] = {
            PREPARE: config.get("prepare"), RECOVER: config.get("recover"),
        }
        self.timeouts = {
            PREPARE: float(config.get("prepare_timeout", 300)),
            RECOVER: float(config.get("recover_timeout", 300)),
        }
        self.approve_after_prepare = bool(config.get("approve_after_prepare", True))
        lead = config.get("prepare_lead")
        self.prepare_lead: float | None = None if lead is None else float(lead)
        self._vm = vm if callable(vm) else (lambda: vm)
        self.secret_env = {name for name in secret_env if name}
        self.env_names: list[str] = list(config.get("env", ()))
        self.stop_grace = float(config.get("stop_grace", hook_process.DEFAULT_STOP_GRACE))
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

    # -- state ----------------------------------------------------------------------------
    def prepare_state(self, db: sqlite3.Connection, event_id: str) -> str | None:
        """The prepare run's state for ``event_id`` (None: not started)."""
        row = db.execute(
            "SELECT state FROM approval_hook_runs WHERE event_id = ? AND hook = ?", (event_id, PREPARE)
        ).fetchone()
        return None if row is None else row[0]

    def interrupted(self, db: sqlite3.Connection) -> list[HookResult]:
        """Runs left ``running`` by a previous agent process: marked interrupted, never re-run."""
        now = time.time()
        db.execute(
            "DELETE FROM approval_hook_runs WHERE started_at < ? AND state != ? AND event_id IN "
            "(SELECT event_id FROM approval_hook_runs WHERE hook = ?)",
            (now - RETENTION_SECONDS, RUNNING, RECOVER),
        )
        rows = db.execute(
            "SELECT event_id, hook, event, started_at FROM approval_hook_runs WHERE state = ?",
            (RUNNING,),
        ).fetchall()
        out = []
        for event_id, hook, stored, started_at in rows:
            if (event_id, hook) in self._threads:
                continue
            detail = "interrupted: the agent stopped while the hook ran; it is not run again"
            db.execute(
                "UPDATE approval_hook_runs SET state = ?, ended_at = ?, detail = ? "
                "WHERE event_id = ? AND hook = ?",
                (INTERRUPTED, now, detail, event_id, hook),
            )
            event, incarnation = _load(stored)
            out.append(HookResult(event_id, hook, INTERRUPTED, None, now - started_at, detail,
                                  event, incarnation))
        return out

    def collect(self, db: sqlite3.Connection) -> list[HookResult]:
        """Results of the runs finished since the last call, now recorded in the database."""
        out = []
        while True:
            try:
                result = self._done.get_nowait()
            except queue.Empty:
                return out
            self._threads.pop((result.event_id, result.hook), None)
            db.execute(
                "UPDATE approval_hook_runs SET state = ?, ended_at = ?, exit_code = ?, detail = ? "
                "WHERE event_id = ? AND hook = ?",
                (result.state, time.time(), result.exit_code, result.detail, result.event_id,
                 result.hook),
            )
            out.append(result)

    def sync(
        self,
        db: sqlite3.Connection,
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
        rows = {
            (event_id, hook): (state, stored)
            for event_id, hook, state, stored in db.execute(
                "SELECT event_id, hook, state, event FROM approval_hook_runs"
            )
        }
        present = set()
        for event in events:
            present.add(event.event_id)
            if (event.event_id, PREPARE) in rows:
                self._remember(db, event, incarnation)
            elif eligible(event) and self.prepare_due(event, now):
                self._begin(db, PREPARE, event, incarnation, outcome=None)
        self._known = {k: v for k, v in self._known.items() if k in present}
        for (event_id, hook), (state, stored) in rows.items():
            if hook != PREPARE or event_id in present or state == RUNNING:
                continue
            if (event_id, RECOVER) in rows:
                continue
            event, last_incarnation = _load(stored)
            outcome = "completed" if event.status == STARTED or ran(event) else "canceled"
            self._begin(db, RECOVER, event, last_incarnation, outcome=outcome)

    def _remember(self, db: sqlite3.Connection, event: ScheduledEvent, incarnation: int) -> None:
        """Keep the latest version of a tracked event (recover gets the last status seen)."""
        seen = json.dumps(dict(event.raw), sort_keys=True)
        if self._known.get(event.event_id) == seen:
            return
        self._known[event.event_id] = seen
        db.execute("UPDATE approval_hook_runs SET event = ? WHERE event_id = ? AND hook = ?",
                   (_stored(event, incarnation), event.event_id, PREPARE))

    # -- running --------------------------------------------------------------------------
    def _begin(self, db: sqlite3.Connection, hook: str, event: ScheduledEvent, incarnation: int,
               outcome: str | None) -> None:
        command = self.commands[hook]
        if self.processes.stopping:
            return  # the agent is stopping: the next start runs it
        state = RUNNING if command else NONE
        # Recorded (and committed: autocommit) before the command starts: at most once.
        db.execute(
            "INSERT OR IGNORE INTO approval_hook_runs (event_id, hook, state, event, started_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (event.event_id, hook, state, _stored(event, incarnation), time.time()),
        )
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
            "SE_NOT_BEFORE": ce.rfc3339(event.not_before) if event.not_before else "",
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
