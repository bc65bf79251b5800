"""Reachability of what the coordinator depends on, and calls that end at a deadline.

Four parts, each a ``Reach``: ``storage`` (the lease and the snapshots), ``queues`` (approval
messages), ``hub-read`` (the reader) and ``hub-publish`` (decisions); with ``[azure]`` also
``azure-feed`` (the Azure feed hub's reader) and ``arm`` (Resource Graph's catch-up and
``acknowledge``, azure_graph.arm_call). Every call to one of them
records its outcome: when it last succeeded, since when it fails, the last error, how many calls
failed and how many of those got no answer in time. ``/healthz``, ``status`` and ``/metrics`` show
it. A part logs once when it becomes unreachable ("cannot reach ..."), once a minute while it stays
so, and once when it answers again ("reached ... again after N s"), so an outage is a handful of
lines, not one per call.

``begin(func)`` runs ``func`` on a thread of its own and returns its ``Future``; ``Reach.call``
waits for it at most ``timeout`` seconds. A call that has not returned by then is a failure
(``Overdue``), counted and logged like any other, and the caller goes on; the call itself runs
until the SDK's own timeout ends it. Whether a request that got no answer still takes effect is
unknown, so callers whose requests are not idempotent (approval messages) do not send the same
thing again while the earlier call may still land: they keep its future (output/queue_sender.py).

Times: ``time.time()`` for what people read, ``time.monotonic()`` for durations.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from ....errors import one_line
from ....sinks.azure_common import scrub
from ....timestamps import rfc3339_or_none

log = logging.getLogger("se_forwarder.coordinator.reach")

T = TypeVar("T")
REMIND_EVERY = 60.0  # s between "still unreachable" lines
ANSWERS = (404, 409, 412)  # HTTP refusals that are answers the callers expect, not failures to reach
PARTS = {
    "storage": "the storage account (leader lease, snapshots)",
    "queues": "the approval queues",
    "hub-read": "the Event Hub (reading)",
    "hub-publish": "the Event Hub (publishing decisions)",
    "azure-feed": "the Azure feed hub (reading)",
    "arm": "Azure Resource Manager (Resource Graph, acknowledge)",
    "feed-events": "the Azure feed's events",
}
ALWAYS = ("storage", "queues", "hub-read", "hub-publish")  # the others only with [azure]


class Overdue(TimeoutError):
    """A call got no answer within its deadline; it may still complete later."""


def begin(func: Callable[[], T], name: str) -> Future[T]:
    """``func()`` on a daemon thread of its own; its future."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(func())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def describe_error(exc: BaseException, limit: int | None = None) -> str:
    """One line for people: the exception's type and first words, secrets scrubbed (cut at
    ``limit`` characters, when given: ARM's errors, which are long)."""
    text = str(exc) if isinstance(exc, Overdue) else scrub(f"{type(exc).__name__}: {one_line(exc)}")
    return text[:limit] if limit is not None else text


@dataclass
class Reach:
    """One part's record (module docstring); thread-safe. A part that answers but whose answers
    are all refused (input/feed_watch.py) says so in its own words (``STATE``, ``LOST``, ...)."""

    STATE: ClassVar[str] = "unreachable"
    LOST: ClassVar[str] = "cannot reach %s: %s"
    STILL: ClassVar[str] = "still cannot reach %s after %.0f s: %s"
    BACK: ClassVar[str] = "reached %s again after %.0f s%s"

    name: str
    last_success: float | None = None  # wall clock
    failing_since: float | None = None  # monotonic
    failing_since_wall: float | None = None
    last_error: str = ""
    failures: int = 0
    overdue: int = 0
    _reminded: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def what(self) -> str:
        return PARTS.get(self.name, self.name)

    @property
    def reachable(self) -> bool:
        return self.failing_since is None

    def failing_for(self, now: float | None = None) -> float:
        """Seconds it has been failing (0 while reachable)."""
        since = self.failing_since
        return 0.0 if since is None else (now if now is not None else time.monotonic()) - since

    def succeeded(self, detail: str = "") -> None:
        """A call succeeded; ``detail`` is added to the line said when it failed before."""
        with self._lock:
            self.last_success = time.time()
            since, self.failing_since, self.failing_since_wall = self.failing_since, None, None
        if since is not None:
            log.info(self.BACK, self.what, time.monotonic() - since,
                     f"; {detail}" if detail else "", extra={"part": self.name})

    def failed(self, error: str, overdue: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            self.failures += 1
            self.overdue += overdue
            self.last_error = error
            first = self.failing_since is None
            if first:
                self.failing_since, self.failing_since_wall = now, time.time()
                self._reminded = now
            remind = not first and now - self._reminded >= REMIND_EVERY
            if remind:
                self._reminded = now
        if first:
            log.warning(self.LOST, self.what, error, extra={"part": self.name})
        elif remind:
            log.warning(self.STILL, self.what,
                        now - (self.failing_since or now), error, extra={"part": self.name})
        else:
            log.debug("%s: %s", self.what, error, extra={"part": self.name})

    def call(self, func: Callable[[], T], timeout: float, what: str) -> T:
        """``func()`` with a deadline: its result, or the exception it raised (recorded as a
        failure), or ``Overdue`` when it did not return within ``timeout`` seconds."""
        return self.wait(begin(func, f"coordinator-{self.name}"), timeout, what)

    def wait(self, future: Future[T], timeout: float, what: str,
             answered: Callable[[int | None], bool] | None = None) -> T:
        """``call`` for a call begun already (``begin``): the caller keeps its future.

        Whether the part answered: by default a call that returned, or raised an expected refusal
        (``ANSWERS``); with ``answered``, what it says of the HTTP status of the error raised, or of
        the response returned (a ``status_code``), for calls whose client does not raise on one."""
        try:
            result = future.result(timeout)
        except FutureTimeout:
            error = Overdue(f"{what}: no answer within {timeout:.0f} s")
            self.failed(str(error), overdue=True)
            raise error from None
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            if (answered or _expected)(status):
                self.succeeded()
            else:
                self.failed(f"{what}: {describe_error(exc)}")
            raise
        status = getattr(result, "status_code", None)
        if answered is not None and status is not None and not answered(status):
            self.failed(f"{what}: answered {status}")
        else:
            self.succeeded()
        return result

    def as_data(self, now_wall: float | None = None) -> dict[str, Any]:
        """For ``status`` and ``/v1/state``: reachable, last success, failing since, last error."""
        with self._lock:
            return {
                "reachable": self.failing_since is None, "state": self.STATE,
                "lastSuccess": rfc3339_or_none(self.last_success, whole=True),
                "failingSince": rfc3339_or_none(self.failing_since_wall, whole=True),
                "lastError": self.last_error or None,
                "failures": self.failures, "timeouts": self.overdue,
            }

    def line(self) -> str:
        """``storage unreachable for 12 s (last success 2026-...Z): <error>`` (for /healthz)."""
        last = rfc3339_or_none(self.last_success, whole=True) or "never"
        return (f"{self.what} {self.STATE} for {self.failing_for():.0f} s (last success {last}): "
                f"{self.last_error}")


def _expected(status: int | None) -> bool:
    """An expected refusal (not found, lease taken, precondition): the service answered."""
    return status in ANSWERS


def parts(*more: str) -> dict[str, Reach]:
    """A fresh record for every part there always is and for ``more`` (Azure's), in the order
    people read them."""
    return {name: Reach(name) for name in (*ALWAYS, *more)}
