"""Which alerts are open, looked at once a second and handed to every pager (output/pager.py).

Three sources, merged (view/alerts.py): the fold's (``derive``, on the service thread, from the
fold and the last decision pass), those parts of the service raised (``Service.alerts``,
output/alert_book.py), and the service's own, which this thread sees from outside the loop:

- ``fold-stalled``: the loop has not answered a look for ``STALLED_AFTER`` seconds (it is stuck,
  so nothing is folded or decided), or the agents' hub has not been read for ``HUB_STALLED_AFTER``
  seconds (reach.py's ``hub-read``);
- ``feed-refused``: every Azure feed event of the last 10 minutes was refused (``feed-events``,
  input/feed_watch.py).

Only an instance that acts sends (a standby's fold may lag; the leader's words are the ones that
count), with one exception: an instance that holds the lease but does not act because its fold has
a gap (``blocked``, input/lag.py) sends its ``fold-gap`` alert, since no other instance acts then.
When an instance starts acting, every alert is sent in its current state once: the open
ones triggered, the resolved ones the fold knows of and the fixed ones resolved (the pagers' dedup
keys make the repeats harmless), so a takeover or a restart leaves nothing open that is not.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from ..azure.reach import Reach
from ..view.alerts import Alert, Derived, derive, merged
from .alert_book import AlertBook
from .pager import PagerHook

log = logging.getLogger("se_forwarder.coordinator.notify")

LOOK_EVERY = 1.0  # s
STALLED_AFTER = 60.0  # s the loop may leave a look unanswered
HUB_STALLED_AFTER = 300.0  # s the agents' hub may be unreachable
NOTHING = Derived({}, frozenset())


class Alerting:
    """The pagers, fed from the service (module docstring)."""

    def __init__(self, hooks: list[PagerHook], submit: Callable[[Callable[[], Any]], Future[Any]],
                 derive_now: Callable[[], Derived], acting: Callable[[], bool], book: AlertBook,
                 reach: dict[str, Reach], blocked: Callable[[], bool] = lambda: False) -> None:
        self.hooks, self._submit, self._derive, self._acting = hooks, submit, derive_now, acting
        self._blocked = blocked
        self.book, self.reach = book, reach
        self._asked: tuple[float, Future[Any]] | None = None  # a look the loop has not answered yet
        self._last: Derived = NOTHING
        self._open: set[str] = set()  # ids open at the last look
        self._acted = False  # this instance acted at the last look
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="notify-alerts", daemon=True)

    @classmethod
    def from_settings(cls, settings: Any, service: Any) -> Alerting:
        from ..config.notify import pager_key

        hooks = [PagerHook(s, pager_key(s), settings.unit) for s in settings.notify if s.pager]

        def derive_now() -> Derived:  # on the service thread: the fold and its last pass are its own
            evaluation = service.evaluation
            return NOTHING if evaluation is None else derive(service.state, evaluation)

        return cls(hooks, service.submit, derive_now, service.acting, service.alerts, service.reach,
                   service.blocked)

    def start(self) -> Alerting:
        for hook in self.hooks:
            hook.start()
            log.info("alerts to %s (%s)", hook.label, ", ".join(hook.settings.alerts))
        self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        if self.thread.ident is not None:
            self.thread.join(LOOK_EVERY + 2)
        deadline = time.monotonic() + timeout
        for hook in self.hooks:
            hook.close(max(0.1, deadline - time.monotonic()))

    def look(self) -> Derived | None:
        """One look: the alerts' state handed to every pager; None when this instance does not act."""
        if not self._acting():
            self._open, self._acted = set(), False
            return self._gap() if self._blocked() else None
        if not self._acted:  # a start or a takeover: every alert once in its current state
            self._acted = True
            for hook in self.hooks:
                hook.forget()
        state = merged(self._fold(), self.book.open(), self._service())
        cleared = self._open - set(state.open)  # raised, then cleared from the book
        state = Derived(state.open, state.resolved | cleared)
        self._open = set(state.open)
        for hook in self.hooks:
            hook.offer(state)
        return state

    def _gap(self) -> Derived:
        """The ``fold-gap`` alert of an instance that holds the lease and may not act (module docstring)."""
        state = Derived({a.id: a for a in self.book.open() if a.kind == "fold-gap"}, frozenset())
        for hook in self.hooks:
            hook.offer(state)
        return state

    def _fold(self) -> Derived:
        """The fold's alerts: asked of the loop, the last answer while it has not answered."""
        if self._asked is None:
            self._asked = (time.monotonic(), self._submit(self._derive))
        began, future = self._asked
        try:
            self._last = future.result(timeout=LOOK_EVERY)
        except Exception as exc:  # noqa: BLE001 - a busy loop (timeout) or a derivation that failed
            if future.done():
                log.warning("the fold's alerts could not be derived this time: %s", exc)
            else:
                return self._last
        self._asked = None
        return self._last

    def _service(self) -> Iterable[Alert]:
        """The service's own alerts (module docstring)."""
        if self._asked is not None and time.monotonic() - self._asked[0] > STALLED_AFTER:
            waited = time.monotonic() - self._asked[0]
            yield Alert("fold-stalled", "fold-stalled", f"the coordinator's loop has not answered for "
                        f"{waited:.0f} s: nothing is folded or decided", "critical")
        hub = self.reach.get("hub-read")
        if hub is not None and hub.failing_for() > HUB_STALLED_AFTER:
            yield Alert("fold-stalled", "fold-stalled", f"the fold is not fed: {hub.line()}", "critical")
        feed = self.reach.get("feed-events")
        if feed is not None and not feed.reachable:
            yield Alert("feed-refused", "feed-refused", feed.line(), "error")

    def _run(self) -> None:
        while not self.stopping.wait(LOOK_EVERY):
            try:
                self.look()
            except Exception as exc:  # noqa: BLE001 - the next look tries again
                log.debug("alerts not looked at this time: %s", exc)
