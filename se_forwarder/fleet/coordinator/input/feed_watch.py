"""Whether the Azure feed's events are read, or every one of them refused at the edge.

A feed hub that answers but whose every event the edge refuses (edge/azure_facts.py: a type
spelling it does not take, a subscription ``[azure] subscriptions`` leaves out, a schema Azure
changed) leaves the coordinator on the agents' word alone as surely as a feed hub that does not
answer. So it is said as loudly: ``FeedWatch`` is a part of reach.py's (``feed-events``) that
fails, in its own words, while no feed event of the last ``WINDOW`` seconds was folded and at least
one was refused, and answers again with the next event folded (or once ``WINDOW`` has passed
without a refusal). ``/healthz`` (degraded, then 503 after a minute), ``status``, ``/metrics``
and the page show it as they show an unreachable part; the pager alert ``feed-refused`` is raised
from it (view/alerts.py).

What counts: every refusal but ``unread`` (an event of a kind Azure's feed carries that no box
reads yet: no sign of a broken feed), and a message that is not a CloudEvent. Runs on the
service's loop (input/azure.py); reads off the loop go through Reach's lock.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from ..azure.reach import Reach

PART = "feed-events"
WINDOW = 600.0  # s: every feed event of this long refused, and none folded, is a failing feed
NOT_COUNTED = ("unread",)


@dataclass
class FeedWatch(Reach):
    """The ``feed-events`` part (module docstring)."""

    STATE: ClassVar[str] = "all refused"
    LOST: ClassVar[str] = "%s are all refused at the edge: %s"
    STILL: ClassVar[str] = "%s are still all refused after %.0f s: %s"
    BACK: ClassVar[str] = "%s are read again after %.0f s of refusals%s"

    name: str = PART
    window: float = WINDOW
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _folded_at: float | None = field(default=None, repr=False)
    _refusals: deque[tuple[float, str]] = field(default_factory=deque, repr=False)

    def folded(self) -> None:
        """A feed event was folded: the feed is read."""
        self._folded_at = self.clock()
        self._refusals.clear()
        self.succeeded("a feed event was folded")

    def refused(self, code: str) -> None:
        """A feed event was refused with ``code`` (edge/azure_facts.py's reasons, or not-cloudevent)."""
        if code in NOT_COUNTED:
            return
        now = self.clock()
        self._refusals.append((now, code))
        self._expire(now)
        if self._folded_at is None or self._folded_at < now - self.window:
            codes = Counter(c for _, c in self._refusals)
            said = ", ".join(f"{c} {n}" for c, n in codes.most_common())
            self.failed(f"every feed event of the last {self.window / 60:.0f} min was refused ({said}): "
                        "the log says why (refused feed event), docs/azure-feed.md what Azure sends")

    def look(self) -> None:
        """Answer again once the window holds no refusal (called every turn of the loop)."""
        self._expire(self.clock())
        if not self.reachable and not self._refusals:
            self.succeeded(f"no feed event refused in {self.window / 60:.0f} min")

    def _expire(self, now: float) -> None:
        while self._refusals and self._refusals[0][0] < now - self.window:
            self._refusals.popleft()
