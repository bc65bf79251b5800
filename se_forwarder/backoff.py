"""How long to wait after a failure before trying again: one schedule type for every retry loop.

A ``Backoff`` is either a fixed list of ``steps`` (the nth failure in a row waits ``steps[n-1]``,
the last step after that: the coordinator's publishing, sending and snapshot, the queue consumer)
or exponential from ``base`` to ``cap`` with full jitter (the sinks' delivery, the chat hooks). A
server's ``Retry-After`` is a floor, at most ``MAX_RETRY_AFTER``. ``next_delay`` counts the
failures itself (``attempt``, ``reset`` after a success); ``delay(n)`` is for a caller that counts
them per item.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

MAX_RETRY_AFTER = 300.0  # s: a longer Retry-After is taken as this


@dataclass
class Backoff:
    base: float = 0.5
    cap: float = 30.0
    steps: tuple[float, ...] = ()
    attempt: int = 0  # failures in a row so far (next_delay, reset)

    def delay(self, failures: int, retry_after: float | None = None) -> float:
        """The wait after the ``failures``-th failure in a row (1 for the first)."""
        if self.steps:
            delay = self.steps[min(max(failures, 1), len(self.steps)) - 1]
        else:
            ceiling = min(self.cap, self.base * (2 ** min(failures, 16)))
            delay = random.uniform(self.base, max(self.base, ceiling))
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER))
        return delay

    def next_delay(self, retry_after: float | None = None) -> float:
        """One more failure: the wait before the next attempt."""
        self.attempt += 1
        return self.delay(self.attempt, retry_after)

    def reset(self) -> None:
        self.attempt = 0
