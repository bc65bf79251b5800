"""The agent: ties the poller, the outbox, the sinks, the approver, enrichment, the identity
(its key and registration, ``identity/``) and the application's probes (``health/``) together.

Polling (``poller.py``) runs on the agent's thread; each sink, the approver, the enrichment and the
probes have their own thread, so a slow or dead sink, a slow approval POST, a missing instance
metadata endpoint or a hanging probe never delays the next poll.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from . import telemetry
from .approvals.approver import Approver
from .approvals.recovery import Recovery
from .config import Settings
from .delivery import DeliveryWorker
from .enrichment import FIRST_ATTEMPT_TIMEOUT, Enricher, initial_identity
from .errors import StateError
from .imds import ImdsClient, already_enabled, resolve_base_url
from .model import Document, HealthVerdict, VmIdentity
from .outbox import Outbox
from .poller import Poller
from .sinks import SinkContext, create
from .sinks.base import StoredEvent
from .telemetry import fields

if TYPE_CHECKING:  # loaded only with a sink that signs, with [health]
    from .health.checker import HealthChecker
    from .identity.key import AgentKey
    from .identity.registration import Registration

__all__ = ["Agent", "Transport", "lock_state_dir"]

log = logging.getLogger("se_forwarder.agent")

SHUTDOWN_GRACE = 4.0  # seconds; SIGTERM must end the process within 5
STOP_CHECK = 5.0  # seconds; only a safety net, ``stop`` wakes the waiting thread at once
HOUSEKEEPING_SECONDS = 3600.0  # pruning and space reclaimed this often while running
LOCK_NAME = "agent.lock"
SIGNED_SINKS = ("eventhubs",)  # the sinks the coordinator reads: they sign and announce the identity


@dataclass(frozen=True)
class Transport:
    """Stand-ins for the Azure clients the agent talks through, handed in by code only (the fleet
    demo's in-process hub and queues, ``se_forwarder/demo/transport/``); no configuration key selects
    them. ``eventhubs_producer`` makes the Event Hubs sink's producer client; ``approval_queue``
    makes the ``QueueClient`` of a queue name for ``[approvals.queue]``. None: the SDK's."""

    eventhubs_producer: Callable[[], Any] | None = None
    approval_queue: Callable[[str], Any] | None = None


def lock_state_dir(state_dir: Path) -> int:
    """Take the state directory for this agent alone; the fd holding the lock.

    Two agents on one state directory (a service plus a manual `run --once`) would share the
    delivery cursors and hand every event to the sinks twice. The lock goes with the process
    (SIGKILL included), so a restart never finds it stale.
    """
    path = Path(state_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StateError(f"cannot create {path}: {exc.strerror or exc}") from exc
    try:
        if sys.platform == "win32":  # os.name == "nt"; the spelling mypy narrows on
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        try:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
        except OSError:
            holder = ""
        os.close(fd)
        raise StateError(
            f"another agent{f' (pid {holder})' if holder.isdigit() else ''} is running with "
            f"state directory {state_dir}; stop it or give this one its own --state-dir"
        ) from exc
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


class Agent:
    def __init__(
        self,
        settings: Settings,
        *,
        once: bool = False,
        dry_run: bool = False,
        stdout: TextIO | None = None,
        on_document: Callable[[Document], None] | None = None,
        stop: threading.Event | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.settings = settings
        self.transport = transport or Transport()
        telemetry.protect(settings)  # before any sink reads its secrets and might log
        self.once = once
        self.dry_run = dry_run or settings.approvals.dry_run
        self.stop = stop or threading.Event()
        self.state_dir = settings.state.dir
        self.imds_url = resolve_base_url(settings.imds.url, settings.imds.lease_files)
        self.imds = self._client(settings.imds.first_call_timeout)
        self.key: AgentKey | None = None  # the identity key, read (or made) once the lock is held
        self.registration: Registration | None = None
        ctx = SinkContext(self.state_dir, sign=self._sign,
                          eventhubs_producer=self.transport.eventhubs_producer,
                          **({"stdout": stdout} if stdout else {}))
        self.outbox = Outbox(self.state_dir)
        self.health: HealthChecker | None = None
        if settings.health is not None:
            from .health.checker import HealthChecker  # only with [health]

            self.health = HealthChecker(settings.health, state_dir=self.state_dir,
                                        secret_env=telemetry.secret_env_names(settings),
                                        on_change=self._health_changed)
        heartbeat = None
        if any(s.heartbeat_interval for s in settings.sinks):
            from .heartbeat import HeartbeatSource  # only where a sink wants heartbeats

            heartbeat = HeartbeatSource(self.identity, self.last_document,
                                        [s.name for s in settings.sinks],
                                        health=self.health.current if self.health else None).event
        self.workers = [
            DeliveryWorker(create(s.type, s.name, s.options, ctx), self.state_dir, self.stop,
                           heartbeat_interval=s.heartbeat_interval, heartbeat=heartbeat,
                           announcement=self._announcement if s.type in SIGNED_SINKS else None)
            for s in settings.sinks
        ]
        self.outbox.register_sinks([w.sink.name for w in self.workers])
        self.on_document = on_document
        self.enricher: Enricher | None = None
        self.approver: Approver | None = None
        self.poller: Poller | None = None
        self._lock_fd: int | None = None
        self._threads: list[threading.Thread] = []

    def _client(self, first_call_timeout: float) -> ImdsClient:
        imds = self.settings.imds
        return ImdsClient(self.imds_url, imds.api_version, timeout=imds.timeout,
                          first_call_timeout=first_call_timeout)

    @property
    def vm(self) -> VmIdentity | None:
        """The identity events are recorded with now (None before the agent started)."""
        return self.enricher.current() if self.enricher is not None else None

    def identity(self) -> VmIdentity:
        assert self.enricher is not None
        return self.enricher.current()

    def _sign(self, event: dict[str, Any]) -> dict[str, Any]:
        assert self.key is not None, "sinks deliver only after the identity key is loaded"
        return self.key.sign(event)

    def _announcement(self) -> StoredEvent | None:
        """The identity event the signed sinks announce (None before the first registration)."""
        return self.registration.current() if self.registration is not None else None

    def last_document(self) -> Document | None:
        """The last document the poller handed on (None before the first one)."""
        return self.poller.last() if self.poller is not None else None

    # -- lifecycle ------------------------------------------------------------------------
    def run(self) -> int:
        """Run until ``stop`` is set (or one cycle with ``once``); the process exit code.

        The work happens on a daemon thread so that a stop request is honoured within seconds even
        while a request to IMDS is blocked (the first one may take two minutes): whatever is cut
        short is the same as a crash, which the outbox is built to survive. Running hooks get
        SIGTERM at once and their stop grace before SIGKILL (the shutdown runs meanwhile).
        """
        outcome: list[BaseException | int] = []

        def work() -> None:
            try:
                outcome.append(self._run())
            except BaseException as exc:  # handed to the caller's thread below
                outcome.append(exc)

        thread = threading.Thread(target=work, name="agent", daemon=True)
        thread.start()
        # ``_run`` sets ``stop`` when it ends, and a signal handler when asked to stop: this
        # thread sleeps until then rather than waking five times a second on an idle agent.
        while not self.stop.wait(STOP_CHECK) and thread.is_alive():
            pass
        self.stop.set()
        hooks = self.approver.hooks if self.approver is not None else None
        hooks_end = time.monotonic() + (hooks.stop_grace if hooks is not None else 0.0)
        if hooks is not None and hooks.terminate():
            log.info("stopping: SIGTERM sent to the running hooks; they have %g s (stop_grace)",
                     hooks.stop_grace)
        thread.join(SHUTDOWN_GRACE)
        if hooks is not None and (killed := hooks.kill_after(hooks_end)):
            log.warning("hook processes %s did not exit within the %g s stop grace; killed",
                        ", ".join(map(str, killed)), hooks.stop_grace)
        if not outcome:
            log.warning("stopped while IMDS had not answered yet")
            return 0
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _unpark_sinks(self) -> None:
        """A restart retries a parked sink (as `sink resume` does); only the lock holder may."""
        for worker in self.workers:
            reason = self.outbox.parked(worker.sink.name)
            if reason and self.outbox.resume(worker.sink.name):
                log.warning("sink was parked (%s); retrying its backlog after the restart", reason,
                            extra=fields(sink=worker.sink.name))

    def _run(self) -> int:
        try:
            self._lock_fd = lock_state_dir(self.state_dir)
            self._skip_first_call_wait_if_enabled()
            self._unpark_sinks()
            telemetry.start(self.settings)
            self._load_key()
            if self.settings.imds.max_backoff is not None:
                log.warning("imds.max_backoff is ignored: IMDS is retried at the poll interval "
                            "(after a 429: its Retry-After, or about a second); remove the key")
            self._start_enrichment()
            assert self.enricher is not None
            known = self.enricher.answered
            recovery = Recovery(self.identity, self.health.current if self.health else None,
                                on_recorded=self._wake_sinks)
            recovery.begin(self.outbox)  # before the first poll records a completion
            if self.health is None:
                self.outbox.set_meta({"health": None})  # `status`: no verdict of an earlier run
            self.approver = Approver(
                # made on first use; the poller has waited out the first call by then
                lambda: self._client(self.settings.imds.timeout),
                self.state_dir, self.identity, self.settings.approvals,
                dry_run=self.dry_run, on_recorded=self._wake_sinks,
                secret_env=telemetry.secret_env_names(self.settings), identity_known=known,
                document=self.last_document, queue_clients=self.transport.approval_queue,
                recovery=recovery,
            )
            self.poller = Poller(self.settings, self.imds, self.outbox, self.identity,
                                 offer=self.approver.offer,
                                 on_recorded=self._wake_sinks, on_document=self.on_document,
                                 stop=self.stop)
            self._housekeep(self.outbox)
            if self.once:
                return self._run_once()
            for worker in self.workers:
                worker.start()
            self._threads.append(threading.Thread(target=self._housekeeping, name="housekeeping",
                                                  daemon=True))
            self._threads[-1].start()
            self.approver.start(self.stop)
            if self.health is not None:
                self.health.start(self.stop)
            self._start_registration()
            if not self.enricher.answered.is_set():
                self.enricher.start(self.stop)  # retries in the background
            self.poller.run()
            return 0
        finally:
            self.stop.set()
            self._shutdown()

    def _skip_first_call_wait_if_enabled(self) -> None:
        """No long first-call wait when the state directory shows a successful poll within the
        last 24 h: IMDS has the service on, and a hanging IMDS must not blind a restarted agent."""
        _, last_ok = self.outbox.last_poll()
        if already_enabled(last_ok, time.time()):
            assert last_ok is not None
            self.imds.assume_enabled()
            log.info("IMDS answered a poll %.0f s ago (state directory): every request times out "
                     "after %g s from the first one", time.time() - last_ok, self.imds.timeout)

    def _start_enrichment(self) -> None:
        """The identity to forward with from the first poll on (see ``enrichment.py``): one quick
        read of the instance metadata now, the retries in the background."""
        vm = initial_identity(self.outbox, self.settings.vm.tags)
        self.enricher = Enricher(lambda: self._client(self.settings.imds.timeout), self.state_dir,
                                 self.settings.vm.tags, vm)
        self.outbox.set_meta({"vm": vm.as_data()})
        # The poller's client, before it polls: no other thread uses it yet.
        if not self.enricher.attempt(self.imds, self.outbox, FIRST_ATTEMPT_TIMEOUT):
            log.warning("instance metadata unavailable (%s); %s until it answers",
                        self.enricher.last_error, self.enricher.describe_failure())

    def _load_key(self) -> None:
        """The identity key, read or made, for the sinks that sign (none: not loaded, and
        ``cryptography`` not imported: an agent without them keeps its footprint)."""
        if not any(s.type in SIGNED_SINKS for s in self.settings.sinks):
            return
        from .identity.key import load_or_create

        self.key = load_or_create(self.state_dir)
        log.info("identity key %s %s (%s)", self.key.keyid, "made" if self.key.created else "read",
                 self.key.path)

    def _start_registration(self) -> None:
        """Register this agent's key with attested documents, for the sinks that sign (never
        waited for: ``identity/registration.py``)."""
        if self.key is None:
            return
        from .identity.registration import Registration

        self.registration = Registration(self.key, lambda: self._client(self.settings.imds.timeout),
                                         self.identity, on_new=self._wake_sinks)
        self.registration.start(self.stop)

    def _housekeep(self, outbox: Outbox) -> None:
        """Prune what only history needs and reclaim its space (``outbox/housekeeping.py``)."""
        pruned = outbox.housekeep([w.sink.name for w in self.workers],
                                  time.time() - self.settings.state.retention)
        if pruned.rows:
            log.info("state pruned: %d delivered events, %d dead letters, %d hook runs, %d "
                     "approval message ids; %d pages reclaimed", pruned.events,
                     pruned.dead_letters, pruned.hook_runs, pruned.approval_messages,
                     pruned.pages_freed)

    def _housekeeping(self) -> None:
        """Every ``HOUSEKEEPING_SECONDS`` while running (not only at start); never stops the agent."""
        outbox: Outbox | None = None
        while not self.stop.wait(HOUSEKEEPING_SECONDS):
            try:
                outbox = outbox or Outbox(self.state_dir)
                self._housekeep(outbox)
            except Exception as exc:  # noqa: BLE001 - a full disk or a locked file: next time
                log.warning("state housekeeping failed (retried in %.0f s): %s",
                            HOUSEKEEPING_SECONDS, exc)
        if outbox is not None:
            outbox.close()

    def _shutdown(self) -> None:
        deadline = time.monotonic() + SHUTDOWN_GRACE - 1.0
        if self.health is not None:
            self.health.close()  # a running command probe gets SIGTERM now
        for worker in self.workers:
            worker.wakeup.set()
            worker.join(max(0.0, deadline - time.monotonic()))
        if self.approver is not None:
            self.approver.join(max(0.0, deadline - time.monotonic()))
            self.approver.close()
        if self.enricher is not None:
            self.enricher.join(max(0.0, deadline - time.monotonic()))
        if self.registration is not None:
            self.registration.join(max(0.0, deadline - time.monotonic()))
        if self.health is not None:
            self.health.join(max(0.0, deadline - time.monotonic()))
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.imds.close()
        self.outbox.close()
        telemetry.shutdown()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _run_once(self) -> int:
        assert self.approver is not None and self.poller is not None
        ok = self.poller.poll()
        self.approver.consider(self.outbox)
        for worker in self.workers:
            while True:
                delay = worker.deliver_once(self.outbox)
                if delay is None or delay > 0:
                    break
        return 0 if ok else 1

    def _wake_sinks(self) -> None:
        for worker in self.workers:
            worker.wakeup.set()

    def _health_changed(self, _verdict: HealthVerdict) -> None:
        """The verdict changed: heartbeats say so now, the recovery step looks again."""
        for worker in self.workers:
            worker.heartbeat_soon()
        if self.approver is not None:
            self.approver.wake()
