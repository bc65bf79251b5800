"""The agent loop: poll IMDS, diff, record in the outbox, wake the sinks and the approver.

Polling runs on the main thread; each sink and the approver have their own thread, so a slow or
dead sink (or a slow approval POST) never delays the next poll.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from . import cloudevents as ce
from . import metrics, telemetry, tracing
from .approvals.approver import Approver
from .config import Settings
from .delivery import DeliveryWorker
from .differ import diff
from .errors import SeForwarderError, StateError
from .imds import Backoff, ImdsClient, ImdsError
from .model import Document, MalformedDocument, Transition, VmIdentity
from .outbox import NewEvent, Outbox
from .sinks import SinkContext, create
from .telemetry import countdown, fields

log = logging.getLogger("se_forwarder.agent")

POLL_STATUS_EVERY = 10.0  # seconds between persisted poll heartbeats when nothing changes
RETENTION_SECONDS = 30 * 86400
SHUTDOWN_GRACE = 4.0  # seconds; SIGTERM must end the process within 5
LOCK_NAME = "agent.lock"


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
        if os.name == "nt":
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


def new_events(transitions: list[Transition], vm: VmIdentity, observed: datetime) -> list[NewEvent]:
    out = []
    for t in transitions:
        cloud = ce.from_transition(t, vm, observed)
        out.append(
            NewEvent(
                ce_id=ce.ce_id(t.event_id, t.state),
                event_id=t.event_id,
                state=t.state,
                ce_type=ce.ce_type(t.state),
                payload=ce.to_json(cloud),
                observed_at=observed.timestamp(),
            )
        )
    return out


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
    ) -> None:
        self.settings = settings
        telemetry.protect(settings)  # before any sink reads its secrets and might log
        self.once = once
        self.dry_run = dry_run or settings.approvals.dry_run
        self.stop = stop or threading.Event()
        self.state_dir = settings.state.dir
        self.imds = ImdsClient(
            settings.imds.url,
            settings.imds.api_version,
            timeout=settings.imds.timeout,
            first_call_timeout=settings.imds.first_call_timeout,
        )
        ctx = SinkContext(self.state_dir, **({"stdout": stdout} if stdout else {}))
        self.outbox = Outbox(self.state_dir)
        self.workers = [
            DeliveryWorker(create(s.type, s.name, s.options, ctx), self.state_dir, self.stop)
            for s in settings.sinks
        ]
        self.outbox.register_sinks([w.sink.name for w in self.workers])
        self.on_document = on_document
        self.vm: VmIdentity | None = None
        self.approver: Approver | None = None
        self._last_status_write = 0.0
        self._last_status: tuple[bool, str] | None = None
        self._lock_fd: int | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def run(self) -> int:
        """Run until ``stop`` is set (or one cycle with ``once``); the process exit code.

        The work happens on a daemon thread so that a stop request is honoured within seconds even
        while a request to IMDS is blocked (the first one may take two minutes): whatever is cut
        short is the same as a crash, which the outbox is built to survive.
        """
        outcome: list[BaseException | int] = []

        def work() -> None:
            try:
                outcome.append(self._run())
            except BaseException as exc:  # handed to the caller's thread below
                outcome.append(exc)

        thread = threading.Thread(target=work, name="agent", daemon=True)
        thread.start()
        while thread.is_alive() and not self.stop.is_set():
            thread.join(0.2)
        self.stop.set()
        thread.join(SHUTDOWN_GRACE)
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
            self._unpark_sinks()
            telemetry.start(self.settings)
            self.vm = self._identity()
            if self.vm is None:
                return 0  # stopped while waiting
            self.approver = Approver(
                ImdsClient(self.settings.imds.url, self.settings.imds.api_version,
                           timeout=self.settings.imds.timeout,
                           first_call_timeout=self.settings.imds.timeout),  # IMDS answered already
                self.state_dir, self.vm, self.settings.approvals,
                dry_run=self.dry_run, on_recorded=self._wake_sinks,
                secret_env=telemetry.secret_env_names(self.settings),
            )
            self.outbox.prune([w.sink.name for w in self.workers], time.time() - RETENTION_SECONDS)
            if self.once:
                return self._run_once()
            for worker in self.workers:
                worker.start()
            self.approver.start(self.stop)
            self._poll_loop()
            return 0
        finally:
            self.stop.set()
            self._shutdown()

    def _shutdown(self) -> None:
        deadline = time.monotonic() + SHUTDOWN_GRACE - 1.0
        for worker in self.workers:
            worker.wakeup.set()
            worker.join(max(0.0, deadline - time.monotonic()))
        if self.approver is not None:
            self.approver.join(max(0.0, deadline - time.monotonic()))
        self.imds.close()
        self.outbox.close()
        telemetry.shutdown()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _run_once(self) -> int:
        assert self.approver is not None
        ok = self.poll()
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

    # -- identity -------------------------------------------------------------------------
    def _identity(self) -> VmIdentity | None:
        backoff = Backoff(base=1.0, cap=30.0)
        if self.imds.first_call_pending:
            log.info(
                "waiting for IMDS at %s (the first answer may take up to %.0f s)",
                self.settings.imds.url, self.imds.first_call_timeout,
            )
        while not self.stop.is_set():
            try:
                with countdown(log, "still waiting for the first IMDS answer",
                               self.imds.first_call_timeout if self.imds.first_call_pending else 0):
                    compute = self.imds.get_compute()
                vm = VmIdentity.from_compute(compute)
                log.info("this VM is %s (vmId %s)", vm.name, vm.vm_id)
                self.outbox.set_meta({"vm": vm.as_data()})
                return vm
            except (ImdsError, MalformedDocument) as exc:
                if self.once:
                    raise SeForwarderError(f"instance metadata unavailable: {exc}") from exc
                delay = backoff.next_delay(getattr(exc, "retry_after", None))
                log.warning("instance metadata unavailable (retry in %.1f s): %s", delay, exc)
                self.stop.wait(delay)
        return None

    # -- polling --------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        backoff = Backoff(base=min(0.5, self.settings.imds.max_backoff),
                          cap=self.settings.imds.max_backoff)
        interval = self.settings.imds.poll_interval
        failures = 0
        last_reason = None
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self._poll_or_raise()
                if failures:
                    log.info("IMDS answers again after %d failed poll(s)", failures)
                failures, last_reason = 0, None
                backoff.reset()
                delay = interval - (time.monotonic() - started)
            except StateError as exc:
                # Disk full, database locked...: nothing was recorded, so the next poll diffs the
                # same change again. Keep polling rather than crash-looping.
                delay = max(backoff.next_delay(), interval)
                metrics.poll_failed("state")
                log.error("cannot record the document, retry in %.1f s: %s", delay, exc)
            except ImdsError as exc:
                if exc.reason in ("malformed", "client"):
                    delay = interval  # IMDS answered, just not with a document: keep the pace
                else:
                    delay = max(backoff.next_delay(exc.retry_after), interval)
                failures += 1
                metrics.poll_failed(exc.reason, time.monotonic() - started)
                # One line per change of reason, then one every 60 failures: never a log flood.
                loud = exc.reason != last_reason or failures % 60 == 0
                last_reason = exc.reason
                log.log(logging.WARNING if loud else logging.DEBUG,
                        "poll failed (%s), retry in %.1f s: %s", exc.reason, delay, exc,
                        extra=fields(reason=exc.reason))
                self._note_poll(False, f"{exc.reason}: {exc}")
            if delay > 0:
                self.stop.wait(delay)

    def poll(self) -> bool:
        """One poll; False (logged) when IMDS failed or answered garbage."""
        try:
            self._poll_or_raise()
            return True
        except ImdsError as exc:
            log.warning("poll failed (%s): %s", exc.reason, exc, extra=fields(reason=exc.reason))
            metrics.poll_failed(exc.reason)
            self._note_poll(False, f"{exc.reason}: {exc}")
            return False

    def _poll_or_raise(self) -> None:
        assert self.vm is not None and self.approver is not None
        started = time.monotonic()
        document = self.imds.get_document()
        metrics.poll_succeeded(document.incarnation, time.monotonic() - started)
        observed = datetime.now(UTC)
        previous = self.approver.current() or self.outbox.previous_document()
        if previous is not None and previous.incarnation == document.incarnation:
            if document is previous or document.events == previous.events:
                if self.approver.current() is None:
                    self.approver.offer(document, [])
                self._note_poll(True, "ok", document.incarnation)
                return
            # Only after an incarnation reset (or while the agent was down across one) can the
            # same number carry other events; diff them rather than miss a transition.
            log.warning("DocumentIncarnation %d reused with different events; diffing",
                        document.incarnation, extra=fields(incarnation=document.incarnation))
            previous = Document(previous.incarnation - 1, previous.events)
        if previous is not None and document.incarnation < previous.incarnation:
            log.warning(
                "DocumentIncarnation went back from %d to %d; diffing normally",
                previous.incarnation, document.incarnation,
                extra=fields(incarnation=document.incarnation),
            )
        transitions = diff(previous, document)
        stored = self.outbox.record(document, new_events(transitions, self.vm, observed))
        metrics.transitions(stored)
        tracing.recorded(stored)
        for event in stored:
            log.info("transition %s", event.state,
                     extra=fields(event_id=event.event_id, state=event.state,
                                  incarnation=document.incarnation))
        self._wake_sinks()
        self.approver.offer(document, transitions)
        if self.on_document is not None:
            self.on_document(document)
        self._note_poll(True, "ok", document.incarnation, force=True)

    def _note_poll(self, ok: bool, result: str, incarnation: int | None = None,
                   force: bool = False) -> None:
        """Persist the poll heartbeat for `status`, at most every few seconds unless it changed."""
        now = time.time()
        changed = self._last_status != (ok, result)
        if not (force or changed or now - self._last_status_write >= POLL_STATUS_EVERY):
            return
        items: dict[str, object] = {"last_poll_at": str(now), "last_poll_ok": str(int(ok)),
                                    "last_poll_result": result}
        if ok:
            items["last_ok_poll_at"] = str(now)
        if incarnation is not None:
            items["incarnation"] = str(incarnation)
        self.outbox.set_meta(items)
        self._last_status_write = now
        self._last_status = (ok, result)
