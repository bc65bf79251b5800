"""The fold's snapshot saved and loaded off the service's loop, with deadlines.

The service's loop folds, decides and serves the API; it never waits for the storage account.
``Keeper`` runs the snapshot's I/O (snapshot_blob.SnapshotBlob) on threads of its own and the loop looks at
the outcome when it comes by (``poll``):

- ``save(packed)``: the snapshot (``SnapshotBlob.pack``: the fold as it was, taken on the loop:
  its large parts copied, not encoded) is written, compressed, sealed, signed and uploaded in the
  background. At most one upload at a
  time: a save that is due while one is under way (or during the backoff after a failure: 5 s
  doubling to 60 s) is skipped. An upload that has not finished after ``SNAPSHOT_DEADLINE``
  counts as failed (logged and counted by reach.py); the next one waits for it to end. A snapshot
  that is not saved costs nothing but a longer read of the hub at the next start. A signing key
  that cannot be read is the service's problem, not the storage account's: logged as an error,
  tried again after the longest backoff.
- ``load()``: the last snapshot is downloaded and restored in the background (creating the
  container first, at the first load), with its digest made (view/digest.py) and what the service
  makes of it (``made``: a decision pass whose decisions it drops, which makes the scope index and
  what a pass keeps for the next, as the first pass on a new fold would); ``poll`` hands over the
  result once. A container that
  cannot be made (no such account, a bad name) is logged as an error at each attempt.
  While the storage account does not answer, it is tried again (5 s doubling to 30 s): until
  then the service knows nothing it could act on, and it cannot hold the lease anyway. A
  snapshot that is damaged, of another hub or not signed by a trusted key (trust.snapshot) is
  logged in one line and the hub read from the start.
- The garbage collector: after each save's pack and each load, every object then alive is frozen
  (``gc.freeze``): 100,000 VMs' records are millions of objects, and a full collection that walks
  them all costs whatever pass it falls in hundreds of milliseconds; the fold's records hold no
  cycles, so what is frozen and later let go is freed as ever, by its count of references. A full
  collection runs first (``freeze``), so no cycle already let go is frozen, never to be freed: it
  walks only what was made since the last freeze, the frozen being left out of every collection.
- Generations (snapshot_blob.py): each save is one more than the highest generation known (the
  last loaded or saved, or recorded on the leader blob when this instance took the lease), and is
  recorded on the leader blob once uploaded. A snapshot older than the generation recorded there
  was put back (rolled back): it is refused, said as an error, and the load says so (``blocked``):
  the service reads the hub from the start but does not act until it is restarted without that
  snapshot (docs/coordinator.md).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from ....backoff import Backoff
from ....errors import SeForwarderError, StateError
from ..azure.reach import Reach, begin, describe_error
from ..fold.state import FleetState
from ..input.hub_reader import Position
from ..view.digest import Digest
from .snapshot_blob import SNAPSHOT_DEADLINE, Packed, Snapshot, SnapshotBlob

log = logging.getLogger("se_forwarder.coordinator")

SAVE_BACKOFF = Backoff(steps=(5.0, 10.0, 20.0, 40.0, 60.0))
LOAD_BACKOFF = Backoff(steps=(5.0, 10.0, 20.0, 30.0))


@dataclass
class Loaded:
    state: FleetState
    positions: dict[str, Position]
    found: Snapshot | None  # None: no usable snapshot, the hub is read from the start
    refused: bool = False  # there was one, not usable (said in one line)
    blocked: str = ""  # why the instance must not act on this fold (a rolled-back snapshot)


def digested(loaded: Loaded, made: Callable[[FleetState], object] | None = None) -> Loaded:
    """``loaded`` with its fold's digest made (view/digest.py), and whatever else ``made`` makes of
    it (the service: a decision pass's caches, the scope index first), on the load's thread: the
    first look at 100,000 VMs hashes each record and places each VM (seconds), which the service's
    loop then need not."""
    Digest().of(loaded.state)
    if made is not None:
        made(loaded.state)
    freeze()
    return loaded


def freeze() -> None:
    """Every object alive now out of the garbage collector's passes, after a collection (module
    docstring)."""
    gc.collect()
    gc.freeze()


class Generations(Protocol):
    """Where the generation of the last snapshot saved is recorded (ha/lease.py's Lease)."""

    generation: int  # the highest known recorded

    def recorded_generation(self) -> int: ...

    def record_generation(self, number: int) -> None: ...


class Keeper:
    def __init__(self, snapshots: SnapshotBlob, storage: Reach, instance: str,
                 prepare: Callable[[], None] | None = None, generations: Generations | None = None,
                 made: Callable[[FleetState], object] | None = None) -> None:
        self.snapshots, self.storage, self.instance = snapshots, storage, instance
        self.made = made  # run on each loaded fold before it is handed over (``digested``)
        self.prepare = prepare  # run once before the first load (creating the container)
        self.generations = generations
        self.generation = 0  # the highest snapshot generation loaded or saved
        self.last_snapshot: tuple[float, int] | None = None  # (wall time, bytes)
        self.save_failures = 0
        self._saving: Future[int] | None = None
        self._save_started = 0.0
        self._save_overdue = False
        self._save_after = 0.0
        self._loading: Future[Loaded] | None = None
        self._load_after = 0.0
        self._load_failures = 0
        self._load_before: Callable[[], None] | None = None

    # -- saving ------------------------------------------------------------------------------------

    def can_save(self) -> bool:
        """No upload under way, and not in the backoff after a failed one (ask before making one)."""
        return self._saving is None and time.monotonic() >= self._save_after

    def pack(self, state: FleetState, positions: dict[str, Position]) -> Packed:
        """The fold as it is now, ready to save (on the loop: SnapshotBlob.pack); then every object
        so far is frozen out of the garbage collector's passes (module docstring)."""
        packed = self.snapshots.pack(state, positions, self.instance)
        freeze()
        return packed

    def save(self, packed: Packed) -> bool:
        """Start uploading ``packed`` (``pack``) unless one is under way or the last failed too
        recently; whether it started."""
        if not self.can_save():
            return False
        self._saving = begin(lambda: self._upload(packed), "coordinator-snapshot")
        self._save_started, self._save_overdue = time.monotonic(), False
        return True

    def save_now(self, packed: Packed, timeout: float) -> None:
        """At a clean stop: save and wait at most ``timeout`` seconds in all. A save under way is
        waited for first (the process ending would cut its upload short), then ``packed`` saved."""
        deadline = time.monotonic() + timeout
        if self._saving is not None:
            with contextlib.suppress(Exception):  # its outcome is recorded as a poll records it
                self._saving.result(timeout)
            if not self._saving.done():
                return
            self._poll_save()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            size = self.storage.call(lambda: self._upload(packed), left, "saving the snapshot")
        except Exception:  # noqa: BLE001 - recorded by reach; the hub still has everything
            return
        self.last_snapshot = (time.time(), size)

    def _upload(self, packed: Packed) -> int:
        """Upload the next generation and record it on the leader blob; the size uploaded."""
        known = self.generations.generation if self.generations is not None else 0
        number = max(self.generation, known) + 1
        size = self.snapshots.save(packed, number)
        self.generation = number
        if self.generations is not None:
            try:
                self.generations.record_generation(number)
            except Exception as exc:  # noqa: BLE001 - the next save records a later one
                log.warning("snapshot generation %d saved but not recorded on the leader blob: %s", number,
                            describe_error(exc))
        return size

    def _poll_save(self) -> None:
        future = self._saving
        if future is None:
            return
        now = time.monotonic()
        if not future.done():
            if not self._save_overdue and now - self._save_started >= SNAPSHOT_DEADLINE:
                self._save_overdue = True
                self._save_failed(f"saving the snapshot: no answer within {SNAPSHOT_DEADLINE:.0f} s",
                                  overdue=True)
            return
        self._saving = None
        try:
            size = future.result()
        except SeForwarderError as exc:  # the signing key cannot be read: not the storage account's fault
            self._save_after = time.monotonic() + SAVE_BACKOFF.steps[-1]
            log.error("snapshot not saved: %s", exc)
            return
        except Exception as exc:  # noqa: BLE001 - the next one may work; the hub still has everything
            if not self._save_overdue:
                self._save_failed(f"saving the snapshot: {describe_error(exc)}")
            return
        self.save_failures = 0
        self._save_after = 0.0
        self.storage.succeeded()
        self.last_snapshot = (time.time(), size)
        log.debug("snapshot saved (%d bytes)", size)

    def _save_failed(self, error: str, overdue: bool = False) -> None:
        self.save_failures += 1
        self._save_after = time.monotonic() + SAVE_BACKOFF.delay(self.save_failures)
        self.storage.failed(error, overdue=overdue)

    # -- loading -----------------------------------------------------------------------------------

    def load(self, before: Callable[[], None] | None = None) -> None:
        """Load the last snapshot in the background (``before`` runs first, on that thread)."""
        self._load_before = before
        self._load_failures, self._load_after = 0, 0.0
        self._start_load()

    def loading(self) -> bool:
        return self._loading is not None

    def _start_load(self) -> None:
        before, self._load_before = self._load_before, None
        self._loading = begin(lambda: digested(self._load(before), self.made), "coordinator-load")

    def _load(self, before: Callable[[], None] | None) -> Loaded:
        if before is not None:
            before()
        if self.prepare is not None:
            self.storage.call(self.prepare, SNAPSHOT_DEADLINE, "creating the container")
            self.prepare = None
        found = self.storage.call(self._fetch, SNAPSHOT_DEADLINE, "loading the snapshot")
        if isinstance(found, StateError):
            log.error("%s; reading the hub from the start of its retention instead", found)
            return Loaded(FleetState(), {}, None, refused=True)
        if found is None:
            return Loaded(FleetState(), {}, None)
        recorded = self.generations.recorded_generation() if self.generations is not None else 0
        if found.generation < recorded:
            why = (f"the snapshot blob holds generation {found.generation}, older than generation {recorded} "
                   "recorded on the leader blob: an older snapshot was put back, and is refused")
            log.error("%s; reading the hub from the start of its retention, and not acting until this "
                      "instance is restarted without that snapshot (docs/coordinator.md#a-gap-in-the-fold)",
                      why)
            return Loaded(FleetState(), {}, None, refused=True, blocked=why)
        self.generation = max(self.generation, found.generation, recorded)
        return Loaded(found.state, dict(found.positions), found)

    def _fetch(self) -> Snapshot | StateError | None:
        """The snapshot, or the StateError saying why it is not usable (not a storage failure)."""
        try:
            return self.snapshots.load()
        except StateError as exc:
            return exc

    def poll(self) -> Loaded | None:
        """What a load brought, once; None while there is nothing new. Also looks at a save."""
        self._poll_save()
        future = self._loading
        if future is None:
            if self._load_after and time.monotonic() >= self._load_after:
                self._load_after = 0.0
                self._start_load()
            return None
        if not future.done():
            return None
        self._loading = None
        try:
            return future.result()
        except Exception as exc:  # noqa: BLE001 - storage unreachable: recorded by reach; tried again
            self._load_failures += 1
            delay = LOAD_BACKOFF.delay(self._load_failures)
            self._load_after = time.monotonic() + delay
            said = log.error if isinstance(exc, SeForwarderError) else log.debug  # a configuration problem
            said("the fold cannot be loaded: %s; trying again in %.0f s",
                 exc if isinstance(exc, SeForwarderError) else describe_error(exc), delay)
            return None
