"""The probes' thread: a round of every probe each ``interval``, and the verdict it leads to.

Probes never run on the poller's thread, nor on the approver's or a sink's: ``HealthChecker`` has
its own thread, which starts a round every ``interval`` seconds (counted from the start of the
last; a round that ran long is followed at once by the next), runs the round's probes side by side
on a small pool of threads, each bounded by its timeout, and folds their results into the verdict
(``verdict.py``). Readers (heartbeats, the recovery step, ``status``) take ``current()``, which
never waits for a probe.

A change of verdict is logged once, counted (``metrics.app_health``), stored in the state directory
for ``status`` (the meta key ``health``) and announced through ``on_change`` (the agent sends its
next heartbeat early and wakes the approver's recovery step). When the agent stops, a running
command probe gets SIGTERM at once (``close``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import cloudevents as ce
from .. import metrics
from ..approvals import hook_process
from ..errors import StateError
from ..model import HEALTHY, UNKNOWN, HealthVerdict
from ..outbox import Outbox
from ..telemetry import fields
from .probes import Probe
from .settings import HealthSettings
from .verdict import ProbeState, combine, step

log = logging.getLogger("se_forwarder.health")

META_KEY = "health"  # the last verdict, for `status`


class HealthChecker:
    """Runs ``[health]``'s probes in rounds on its own thread (module docstring)."""

    def __init__(self, settings: HealthSettings, *, state_dir: Path | None = None,
                 secret_env: Iterable[str] = (),
                 on_change: Callable[[HealthVerdict], None] = lambda verdict: None) -> None:
        self.settings = settings
        self.state_dir = state_dir
        self.on_change = on_change
        self.processes = hook_process.Processes()
        self.probes = [Probe(p, env_names=settings.env, secret_env=secret_env, processes=self.processes)
                       for p in settings.probes]
        self._states = [ProbeState(p.name) for p in self.probes]
        self._verdict = combine(self._states, healthy_threshold=settings.healthy_threshold,
                                since=time.time(), checked_at=None)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._outbox: Outbox | None = None

    def current(self) -> HealthVerdict:
        """The verdict now (never waits for a probe)."""
        with self._lock:
            return self._verdict

    # -- the thread -------------------------------------------------------------------------
    def start(self, stop: threading.Event) -> None:
        self._pool = ThreadPoolExecutor(max_workers=len(self.probes), thread_name_prefix="health-probe")
        metrics.app_health(self._verdict.verdict)
        self._store(self._verdict)
        self._thread = threading.Thread(target=self._run, args=(stop,), name="health", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """The agent stops: no new command probe starts, SIGTERM to a running one's group."""
        self.processes.terminate()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        if self._outbox is not None and (self._thread is None or not self._thread.is_alive()):
            self._outbox.close()
            self._outbox = None

    def _run(self, stop: threading.Event) -> None:
        next_start = time.monotonic()
        while not stop.is_set():
            wait = next_start - time.monotonic()
            if wait > 0 and stop.wait(wait):
                return
            next_start = time.monotonic() + self.settings.interval
            try:
                self.round()
            except Exception:  # noqa: BLE001 - the next round tries again; the verdict stays
                if stop.is_set():
                    return  # the pool was shut down under a round: the agent is stopping
                log.exception("health probes: a round failed")

    def round(self) -> HealthVerdict:
        """Run every probe once (side by side), fold the results in; the new verdict."""
        started = time.time()
        if self._pool is None:
            results = [probe.run() for probe in self.probes]
        else:
            results = [f.result() for f in [self._pool.submit(p.run) for p in self.probes]]
        if self.processes.stopping:
            return self.current()
        s = self.settings
        for i, (passed, reason) in enumerate(results):
            metrics.probe_result(self.probes[i].name, passed)
            self._states[i] = step(self._states[i], passed, reason, healthy_threshold=s.healthy_threshold,
                                   unhealthy_threshold=s.unhealthy_threshold)
        with self._lock:
            before = self._verdict
            self._verdict = combine(self._states, healthy_threshold=s.healthy_threshold, since=started,
                                    checked_at=started, previous=before)
            after = self._verdict
        if (after.verdict, after.probe, after.reason) != (before.verdict, before.probe, before.reason):
            self._changed(before, after)
        return after

    def _changed(self, before: HealthVerdict, after: HealthVerdict) -> None:
        if after.verdict != before.verdict:
            level = logging.INFO if after.verdict in (HEALTHY, UNKNOWN) else logging.WARNING
            why = f" (probe {after.probe}: {after.reason})" if after.probe else ""
            log.log(level, "application health: %s%s", after.verdict, why,
                    extra=fields(reason=after.verdict))
        metrics.app_health(after.verdict)
        self._store(after)
        try:
            self.on_change(after)
        except Exception:  # noqa: BLE001 - a listener's bug must not stop the probes
            log.exception("health: a listener of verdict changes failed")

    def _store(self, verdict: HealthVerdict) -> None:
        """The verdict into the state directory, for `status` (never fatal)."""
        if self.state_dir is None:
            return
        try:
            self._outbox = self._outbox or Outbox(self.state_dir)
            self._outbox.set_meta({META_KEY: ce.health_data(verdict)})
        except StateError as exc:
            log.warning("cannot store the health verdict for `status` (used anyway): %s", exc)
