"""Leader election: a thread that keeps (or tries to take) the lease, and the catch-up rule.

Every ``lease_duration / 5`` seconds the leader renews its lease and a standby tries to take it
(blobs.Lease). Each time this instance takes the lease a new *term* begins: it reads the last
sequence number of every partition at that moment (``hub.partition_ends``) and may act only once
its fold has read that far (``caught_up``), so it decides nothing before it knows every decision
the previous leader published. ``Term`` is what the rest of the service checks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import one_line
from .blobs import Holder, Lease
from .hub import Position

log = logging.getLogger("se_forwarder.coordinator.leader")


@dataclass(frozen=True)
class Term:
    number: int
    ends: dict[str, int] | None  # partition -> last sequence number when the lease was taken
    began: float  # monotonic


class Leadership:
    """Runs the lease; ``term`` is the current term while this instance holds the lease, else None."""

    def __init__(self, lease: Lease, ends: Callable[[], dict[str, int]],
                 on_change: Callable[[str], None] | None = None) -> None:
        self.lease = lease
        self.ends = ends
        self.on_change = on_change or (lambda _text: None)
        self.interval = max(1.0, lease.duration / 5)
        self.term: Term | None = None
        self.holder: Holder | None = None  # who leads, as a standby last read it
        self.stepped = False  # the lease was asked at least once
        self.numbers = 0
        self.last_error = ""
        self.failing_since: float | None = None  # monotonic, while the storage account fails
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="coordinator-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, release: bool) -> None:
        self._stop.set()
        self._thread.join(self.interval + 30)
        self.term = None
        self.lease.give_up(release)

    def may_act(self, number: int) -> bool:
        """``number`` is the current term and the lease is comfortably held."""
        term = self.term
        return term is not None and term.number == number and self.lease.acting()

    def caught_up(self, positions: dict[str, Position]) -> bool:
        term = self.term
        if term is None or term.ends is None:
            return False
        return all(end < 0 or (pid in positions and positions[pid].sequence >= end)
                   for pid, end in term.ends.items())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
                self.failing_since = None
            except Exception as exc:  # noqa: BLE001 - storage trouble: keep trying, say it
                self.last_error = f"{type(exc).__name__}: {one_line(str(exc))}"
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                log.warning("leader lease: %s", self.last_error)
                if self.term is not None and not self.lease.acting():
                    self._lost("the lease could not be renewed in time")
            self.stepped = True
            self._stop.wait(self.interval)

    def _step(self) -> None:
        if self.lease.held:
            if not self.lease.renew():
                self._lost("another instance holds the lease")
            elif self.term is not None and self.term.ends is None:
                self._read_ends()
            return
        if self.lease.try_acquire():
            self.numbers += 1
            self.term = Term(self.numbers, None, time.monotonic())
            log.info("this instance leads now (term %d); reading the hub up to its end before acting",
                     self.numbers)
            self.on_change("leader")
            self._read_ends()
        else:
            self.holder = self.lease.holder()

    def _read_ends(self) -> None:
        term = self.term
        assert term is not None
        ends = self.ends()
        if self.term is term:
            self.term = Term(term.number, ends, term.began)

    def _lost(self, why: str) -> None:
        if self.term is not None:
            log.warning("this instance stopped leading: %s", why)
            self.term = None
            self.on_change("standby")
        if self.lease.held and not self.lease.acting():
            self.lease.give_up(release=False)
