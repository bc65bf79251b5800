"""The fold's inbox: batches from the hub readers (input/hubs.py) on their way to the service's loop.

It is bounded twice over:

- **In memory.** At most ``BATCHES`` decoded batches wait. ``put``, called on a partition's
  thread, raises ``queue.Full`` after ``PUT_WAIT`` s without room, and the reader tries again
  unless it is closing (hub_reader.py). So a backlog that is read faster than the fold verifies it (a
  new leader, a rebuild) waits on the hub, not decoded in memory: 10,000 VMs' backlog took about
  300 MB that way.
- **In time.** ``turn`` hands the loop ``CHUNK`` events at a time. A turn ends after
  ``TURN_SECONDS`` of folding or ``TURN_EVENTS`` events. Then the loop answers the API, decides
  and looks at the clock, so that it answers within a second whatever the events cost (a
  registration's attested document costs milliseconds to verify, a forged one as much). What is
  left of a batch comes first in the next turn, so each partition's order is kept.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

from .hub_reader import Batch

BATCHES = 20
PUT_WAIT = 0.5  # s
CHUNK = 50  # events folded between two looks at the clock
TURN_SECONDS = 0.25
TURN_EVENTS = 5_000


class Inbox:
    def __init__(self, batches: int = BATCHES) -> None:
        self._queue: queue.Queue[Batch] = queue.Queue(maxsize=batches)
        self._rest: Batch | None = None  # what the last turn left of a batch

    def put(self, batch: Batch) -> None:
        """From a reader's thread; raises ``queue.Full`` when there is no room within ``PUT_WAIT``."""
        self._queue.put(batch, timeout=PUT_WAIT)

    def turn(self, wait: float) -> Iterator[Batch]:
        """This turn's chunks, in order; waits up to ``wait`` s for the first when none is left."""
        if self._rest is None:
            try:
                self._rest = self._queue.get(timeout=wait)
            except queue.Empty:
                return
        began, taken = time.monotonic(), 0
        while self._rest is not None:
            batch = self._rest
            chunk = batch.part(0, CHUNK)
            self._rest = batch.part(CHUNK) if len(batch.events) > CHUNK else self._next()
            yield chunk
            taken += len(chunk.events)
            if taken >= TURN_EVENTS or time.monotonic() - began >= TURN_SECONDS:
                return

    def waiting(self) -> int:
        """Batches waiting (one partly folded counts as one)."""
        return self._queue.qsize() + (self._rest is not None)

    def clear(self) -> None:
        """Forget what waits (its readers were closed: the next ones read from the fold's positions)."""
        self._rest = None
        while self._next() is not None:
            pass

    def _next(self) -> Batch | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None
