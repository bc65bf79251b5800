"""Leader election: a thread that keeps (or tries to take) the lease, and the catch-up rule.

Every ``lease_duration / 5`` seconds (sooner when its last renewal would not be renewed in time
otherwise) the leader renews its lease and a standby tries to take it (lease.Lease). Each call
has a deadline (``lease.LEASE_DEADLINE``, through reach.py): a renewal that hangs fails at its
deadline like one that was refused, so this thread never waits on the storage account for longer
than that. The leader may act only while its last renewal is recent
enough (``Lease.acting``: a clock, not a call), so it stops acting before its lease could have
expired, whether renewals fail or hang; once the lease has run out it lets the lease go and tries
to take it again like a standby.

Each time this instance takes the lease a new *term* begins: it reads the last sequence number of
every partition at that moment (``hub_reader.partition_ends``) and may act only once its fold has read
that far (``caught_up``), so it decides nothing before it knows every decision the previous leader
published. ``Term`` is what the rest of the service checks; ``why_not`` says in words why this
instance does not act (the service logs it once when acting stops, and answers control requests
with it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ....errors import SeForwarderError
from ..azure.reach import Reach
from ..input.hub_reader import Position
from .lease import LEASE_DEADLINE, Holder, Lease

log = logging.getLogger("se_forwarder.coordinator.leader")

ENDS_DEADLINE = 10.0  # s for reading where every partition ends


class NotLeading(SeForwarderError):
    """This instance does not lead (or has not caught up): the leader's API address, if known."""

    def __init__(self, message: str, leader: str = "") -> None:
        super().__init__(message)
        self.leader = leader


@dataclass(frozen=True)
class Term:
    number: int
    ends: dict[str, int] | None  # partition -> last sequence number when the lease was taken
    began: float  # monotonic


class LeaderElection:
    """Runs the lease; ``term`` is the current term while this instance holds the lease, else None."""

    def __init__(self, lease: Lease, ends: Callable[[], dict[str, int]], storage: Reach | None = None,
                 hub: Reach | None = None) -> None:
        self.storage = storage or Reach("storage")
        self.hub = hub or Reach("hub-read")
        self.lease = lease
        lease.run = self._storage_call
        self.ends = ends
        self.interval = max(1.0, lease.duration / 5)
        self.term: Term | None = None
        self.holder: Holder | None = None  # who leads, as a standby last read it
        self.stepped = False  # the lease was asked at least once
        self.numbers = 0
        self.lost_why = ""  # why the last term ended
        self.calling: tuple[str, float] | None = None  # the lease call under way, since (monotonic)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="coordinator-lease", daemon=True)

    def _storage_call(self, func: Callable[[], Any], what: str) -> Any:
        self.calling = (what, time.monotonic())
        try:
            return self.storage.call(func, LEASE_DEADLINE, what)
        finally:
            self.calling = None

    @property
    def last_error(self) -> str:
        return self.storage.last_error

    @property
    def failing_since(self) -> float | None:
        return self.storage.failing_since

    def start(self) -> None:
        self._thread.start()

    def stop(self, release: bool) -> None:
        self._stop.set()
        self._thread.join(self.interval + LEASE_DEADLINE + 5)
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

    def role(self, acting: bool) -> str:
        """What this instance is now, in a few words (``acting``: it leads and has caught up)."""
        if self.term is not None:
            if acting:
                return "leader"
            return "leader (not acting)" if not self.lease.acting() else "leader (catching up)"
        return "standby" if self.stepped else "starting"

    def leader(self, instance: str) -> dict[str, str] | None:
        """Who leads (this ``instance``, or the holder a standby last read), when known."""
        if self.term is not None:
            return {"instance": instance, "api": self.lease.api}
        holder = self.holder
        return {"instance": holder.instance, "api": holder.api} if holder else None

    def why_not(self, positions: dict[str, Position]) -> str:
        """Why this instance does not act now, in words ("" when it may)."""
        term = self.term
        if term is None:
            holder = self.holder
            if holder is not None and holder.instance:
                return f"instance {holder.instance} holds the leader lease"
            if not self.storage.reachable:
                return f"the leader lease cannot be taken: {self.storage.last_error}"
            return self.lost_why or "it does not hold the leader lease"
        if not self.lease.acting():
            renewed, calling = self.lease.renewed_at, self.calling
            ago = f"{time.monotonic() - renewed:.0f} s ago" if renewed is not None else "never"
            problem = (f": {self.storage.last_error}" if not self.storage.reachable
                       else f": {calling[0]}: no answer for {time.monotonic() - calling[1]:.0f} s" if calling
                       else "")
            return f"its leader lease was last renewed {ago} and could not be renewed since{problem}"
        if term.ends is None:
            problem = f" ({self.hub.last_error})" if not self.hub.reachable else ""
            return f"it leads but has not yet read where the Event Hub ends{problem}"
        if not self.caught_up(positions):
            return "it leads but is still reading the Event Hub up to its end"
        return ""

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:  # noqa: BLE001 - recorded and logged by reach; tried again
                log.debug("leader lease step failed: %s", exc)
                if self.term is not None and not self.lease.acting():
                    self._lost("its lease could not be renewed in time")
            self.stepped = True
            self._stop.wait(self._next_step())

    def _next_step(self) -> float:
        """Seconds to the next step: ``interval``, or sooner when a renewal must start now to land
        before the lease stops being usable (after a call that took long, e.g. storage back from
        an outage answering its queued requests late)."""
        if not self.lease.held:
            return self.interval
        left = self.lease.valid_until - time.monotonic() - LEASE_DEADLINE
        return min(self.interval, max(0.5, left))

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
            self.holder = None
            log.info("this instance took the leader lease (term %d); reading the Event Hub up to its end "
                     "before acting", self.numbers)
            self._read_ends()
        else:
            self.holder = self.lease.holder()

    def _read_ends(self) -> None:
        term = self.term
        assert term is not None
        ends = self.hub.call(self.ends, ENDS_DEADLINE, "reading where the Event Hub ends")
        if self.term is term:
            self.term = Term(term.number, ends, term.began)

    def _lost(self, why: str) -> None:
        """The term ends (the service logs that this instance stopped acting, and why)."""
        if self.term is not None:
            self.lost_why = why
            log.debug("this instance no longer holds the leader lease: %s", why)
            self.term = None
        if self.lease.held and not self.lease.acting():
            self.lease.give_up(release=False)
