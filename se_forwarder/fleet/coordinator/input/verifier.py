"""The verifier: report signatures and registrations checked in worker processes, off the fold thread.

Between the hub readers and the inbox. A batch of the agents' hub is handed to ``Verifier.put`` on
its reader's thread, which sends the costly part of each event's verdict to the workers
(edge/offload.py) and queues the batch; one collector thread waits for the workers' answers in the
order the batches came, puts them beside the events (``Batch.checked``) and hands the batch to
the inbox. The fold thread then judges each event with what the workers found (gate.py,
trust.check): every report is still verified with the key registered when it folds, a change of
binding in between making the fold thread verify it again itself. Nothing is folded unverified.

- **Reports.** Each signed report goes with the keys it may verify with: the key bound to its vmid
  now, and the keys the last ``SEEN_KEYS`` identity events for that vmid carried (a registration
  read in the same batch binds only once it folds). Chunks of ``CHUNK`` reports go to a worker as
  their JSON texts, which the worker parses, puts in canonical form and verifies (libsodium).
- **Registrations.** Counted against ``[limits] registrations_per_vm`` and
  ``registrations_per_minute`` in hub time (``identity-rate`` beyond), unless the gate knows the
  document already (an agent announcing it again: nothing to verify); they then go to a worker
  as their JSON texts (the worker reads them as the reader did), ``REGISTRATIONS`` at a time with
  the anchors and the intermediates fetched so far, and come back as their verdicts, in plain
  values (offload.Answer).
- **Bounds.** At most ``DEPTH`` batches are in the stage; ``put`` raises ``queue.Full`` after
  ``PUT_WAIT`` s without room, and the reader tries again (hub_reader.py), so a backlog waits on
  the hub. The workers are ``[trust] verify_workers`` processes: registrations and reports cost
  them, not the fold thread, whose turn stays bounded by the inbox (inbox.py).
- **Faults.** A worker that dies (killed, out of memory) breaks its pool: the pool is made again
  (``restarts``) and the chunk sent again, up to ``TRIES`` times; after that its events go on
  without checks and the fold thread verifies them itself. No event is lost or folded unverified.
- **Lag.** ``backlog`` says how many events are in the stage and when the oldest was enqueued on
  the hub: the lag guard (input/lag.py) counts it, so no early approval is made while verification
  is behind.
- Events marked already when they come (another shard's, input/admission.py) are not sent to the
  workers.
- ``clear`` forgets what is in the stage (the readers were closed: the next ones read from the
  fold's positions); ``close`` stops the collector and the workers.

The Azure feed hub's batches pass through untouched: no VM can write there, and its events carry
no VM's key (input/azure.py checks them).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from ..config.limits import Limits
from ..edge import offload, trust
from ..edge.gate import RATE_VERDICT, Quota
from ..fold.state import Identity
from ..schema import IDENTITY_TYPE, REPORT_TYPES
from .hub_reader import Batch
from .hubs import FEED

log = logging.getLogger("se_forwarder.coordinator.verifier")

DEPTH = 16  # batches in the stage at most
PUT_WAIT = 0.5  # s
CHUNK = 256  # reports sent to a worker at once
REGISTRATIONS = 32  # registrations sent to a worker at once (with the anchors once)
SEEN_KEYS = 2  # keys remembered per vmid from the identity events read
SEEN_VMS = 250_000  # vmids remembered so (about 100 bytes each)
TRIES = 3


_Work = tuple[list[int], Callable[..., Any], tuple[Any, ...], "Future[Any]"]  # indices, what, with, answer


@dataclass
class _Item:
    batch: Batch
    generation: int
    checked: list[trust.Checked | None]
    work: list[_Work] = field(default_factory=list)
    keys: dict[int, tuple[bytes, ...]] = field(default_factory=dict)  # a report's index -> keys tried


class Verifier:
    """The stage (module docstring). ``bound``: the identity bound to a VM key now (the fold's);
    ``known``: whether the gate knows a registration already; ``job``: the anchors, subscriptions
    and fetched intermediates registrations are judged by."""

    def __init__(self, deliver: Callable[[Batch], None], workers: int, limits: Limits,
                 bound: Callable[[str], Identity | None], known: Callable[[Mapping[str, Any]], bool],
                 job: Callable[[], offload.Job]) -> None:
        self.deliver, self.workers, self.limits = deliver, max(1, workers), limits
        self.bound, self.known, self.job = bound, known, job
        self.quota = Quota()
        self.restarts = self.reports = self.registrations = 0
        self._room = threading.BoundedSemaphore(DEPTH)
        self._pending: queue.Queue[_Item | None] = queue.Queue()
        self._seen: OrderedDict[str, tuple[bytes, ...]] = OrderedDict()  # read without the lock: one get
        self._raws: dict[str, bytes] = {}  # a bound key's base64 -> its raw bytes
        self._lock = threading.Lock()  # the pool, the seen keys, the quota
        self._handing = threading.Lock()  # a hand-over to the inbox against clear()
        self._generation = 0
        self._staged: dict[int, tuple[int, float | None]] = {}  # id(item) -> its events, the first's enqueued
        self._pool: ProcessPoolExecutor | None = None
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._collect, name="coordinator-verifier", daemon=True)
        self._thread.start()
        threading.Thread(target=self._warm, name="coordinator-verifier-start", daemon=True).start()

    def _warm(self) -> None:
        """Start the workers now, while the service loads its fold and opens the hub: each imports
        the verdicts' code (seconds on a busy machine), which would otherwise delay the first batch."""
        try:
            for future in [self._send(offload.ready, ()) for _ in range(self.workers)]:
                future.result()
        except Exception as exc:  # noqa: BLE001 - the first batch starts them again and says what failed
            log.debug("starting the verification workers early failed: %s", exc)

    # -- the readers' side --------------------------------------------------------------------------

    def put(self, batch: Batch) -> None:
        """From a reader's thread: send the batch's work to the workers and queue it; ``queue.Full``
        when the stage has no room within PUT_WAIT."""
        if batch.partition.startswith(FEED):
            self.deliver(batch)
            return
        if not self._room.acquire(timeout=PUT_WAIT):
            raise queue.Full
        try:
            item = self._submit(batch)
        except BaseException:
            self._room.release()
            raise
        first = next((p.enqueued for _, p in batch.events if p.enqueued is not None), None)
        with self._lock:
            self._staged[id(item)] = (len(batch.events), first)
        self._pending.put(item)

    def _submit(self, batch: Batch) -> _Item:
        checked: list[trust.Checked | None] = list(batch.checked) if batch.checked is not None \
            else [None] * len(batch.events)  # what is marked already (another shard's) is not sent
        item = _Item(batch, self._generation, checked)
        texts = batch.texts or [None] * len(batch.events)
        reports: list[tuple[int, Any, tuple[bytes, ...]]] = []
        registrations: list[tuple[int, tuple[Any, float | None, Identity | None]]] = []
        for i, (event, position) in enumerate(batch.events):
            if event is None or checked[i] is not None:
                continue
            kind, vm = event.get("type"), _vm(event)
            if kind == IDENTITY_TYPE:
                if vm is not None:
                    self._note(vm, event)
                if self.known(event):
                    continue
                with self._lock:
                    taken = self.quota.take(self.limits, event, position.enqueued)
                if not taken:
                    checked[i] = trust.Checked(verdict=RATE_VERDICT)
                    continue
                bound = self.bound(vm) if vm is not None else None
                sent = texts[i] if texts[i] is not None else event  # its text pickles in a fifth of the time
                registrations.append((i, (sent, position.enqueued, bound)))
            elif kind in REPORT_TYPES and vm is not None and "signature" in event:
                keys = self._keys(vm)
                if keys:
                    reports.append((i, texts[i] if texts[i] is not None else event, keys))
        job = self.job() if registrations else None
        for start in range(0, len(registrations), REGISTRATIONS):
            some = registrations[start:start + REGISTRATIONS]
            given = (job, [one for _, one in some])
            item.work.append(([i for i, _ in some], offload.registrations, given,
                              self._send(offload.registrations, given)))
            self.registrations += len(some)
        for start in range(0, len(reports), CHUNK):
            chunk = reports[start:start + CHUNK]
            args = ([(text, keys) for _, text, keys in chunk],)
            indices = [i for i, _, _ in chunk]
            item.work.append((indices, offload.reports, args, self._send(offload.reports, args)))
            item.keys.update((i, keys) for i, _, keys in chunk)
            self.reports += len(chunk)
        return item

    def _keys(self, vm: str) -> tuple[bytes, ...]:
        bound = self.bound(vm)
        seen = self._seen.get(vm, ())
        if bound is None:
            return seen
        raw = self._raws.get(bound.public_key)
        if raw is None:
            if len(self._raws) >= SEEN_VMS:
                self._raws.clear()
            raw = self._raws[bound.public_key] = _raw(bound.public_key)
        return (raw, *[k for k in seen if k != raw]) if seen else (raw,)

    def _note(self, vm: str, event: Mapping[str, Any]) -> None:
        data = event.get("data")
        raw = _raw(data.get("PublicKey")) if isinstance(data, Mapping) else b""
        if not raw:
            return
        with self._lock:
            keys = self._seen.pop(vm, ())
            self._seen[vm] = (raw, *[k for k in keys if k != raw])[:SEEN_KEYS]
            while len(self._seen) > SEEN_VMS:
                self._seen.popitem(last=False)

    def _send(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Future[Any]:
        with self._lock:
            if self._pool is None:
                if self._closing.is_set():
                    raise RuntimeError("the verifier is closed")
                spawn = multiprocessing.get_context("spawn")  # the service has threads: no fork
                self._pool = ProcessPoolExecutor(self.workers, mp_context=spawn, initializer=exit_with_parent,
                                                 initargs=(os.getpid(),))
            return self._pool.submit(fn, *args)

    # -- the collector ------------------------------------------------------------------------------

    def _collect(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            try:
                for indices, fn, args, future in item.work:
                    results = self._result(fn, args, future, len(indices))
                    for i, result in zip(indices, results, strict=True):
                        item.checked[i] = offload.checked(result, item.keys[i]) if isinstance(result, int) \
                            else offload.answered(result) if isinstance(result, tuple) else result
                item.batch.checked = item.checked
                self._unstage(item)
                self._hand_over(item)
            finally:
                self._unstage(item)
                self._room.release()

    def _unstage(self, item: _Item) -> None:
        with self._lock:
            self._staged.pop(id(item), None)

    def _result(self, fn: Callable[..., Any], args: tuple[Any, ...], future: Future[Any],
                n: int) -> list[Any]:
        """The workers' answers for one chunk; sent again to a new pool when a worker died."""
        for _ in range(TRIES):
            try:
                got = future.result()
                return got if isinstance(got, list) else [got]
            except BrokenProcessPool:
                if self._closing.is_set():
                    break
                self._respawn()
                future = self._send(fn, args)
            except Exception as exc:  # noqa: BLE001 - the fold thread verifies these itself then
                log.warning("a verification worker failed (%s: %s); the fold verifies those events itself",
                            type(exc).__name__, str(exc)[:200])
                break
        return [offload.NOT_READ if fn is offload.reports else None] * n

    def _respawn(self) -> None:
        with self._lock:
            pool = self._pool
            if pool is None or not getattr(pool, "_broken", False):
                return  # made again already, after another chunk found it broken
            self._pool = None
            self.restarts += 1
        log.warning("a verification worker died; its pool is made again and its work sent again")
        pool.shutdown(wait=False, cancel_futures=True)

    def _hand_over(self, item: _Item) -> None:
        while not self._closing.is_set():
            with self._handing:
                if item.generation != self._generation:
                    return
                try:
                    self.deliver(item.batch)
                    return
                except queue.Full:
                    continue

    # -- the service's side -------------------------------------------------------------------------

    def backlog(self) -> tuple[int, float | None]:
        """The events waiting in the stage, and the hub's enqueued time of the oldest (None: none)."""
        with self._lock:
            staged = list(self._staged.values())
        times = [t for _, t in staged if t is not None]
        return sum(n for n, _ in staged), min(times) if times else None

    def clear(self) -> None:
        """Forget the batches in the stage (their readers were closed)."""
        with self._handing:
            self._generation += 1
        with self._lock:
            self._staged.clear()

    def close(self) -> None:
        self._closing.set()
        self._pending.put(None)
        self._thread.join(5)
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _vm(event: Mapping[str, Any]) -> str | None:
    value = event.get("vmid")
    return value.lower() if isinstance(value, str) and 0 < len(value) <= 100 else None


def _raw(public_key: Any) -> bytes:
    import base64
    import binascii

    if not isinstance(public_key, str) or len(public_key) > 100:
        return b""
    try:
        raw = base64.b64decode(public_key, validate=True)
    except (binascii.Error, ValueError):
        return b""
    return raw if len(raw) == 32 else b""


def exit_with_parent(parent: int) -> None:
    """A worker's initializer: it exits within a second of its service's end. A service killed
    (SIGKILL, OOM) cannot shut its pool down, and each worker holds its own end of the pool's queue,
    so nothing else would end it."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
