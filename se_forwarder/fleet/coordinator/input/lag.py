"""How far the fold is behind each hub, in time: the lag guard, and the gap retention may leave.

Each hub reader's watcher (hub_reader.py) asks the hub where every partition ends, every
``PROBE_EVERY`` seconds, off the loop and with a deadline: its last enqueued sequence number and
time, and where the hub now begins (retention). ``Watch`` keeps what those questions saw; the loop
compares it with the positions of what it has *folded* (a position advances only when its event
went through the edge into the fold, so a backlog waiting for verification is lag too):

- **Lag** of a partition: ``now`` minus the enqueued time of the first end a question saw beyond the
  folded position (0 when the fold has reached the last end seen). It is the age of the oldest
  event the fold has not folded, to within one question (an event the fold misses was enqueued
  after the question before); the events behind are counted too. A hub's lag is its worst
  partition's. The hub's clock (enqueued times) and the coordinator's are both UTC; keep them in
  sync (NTP), as Azure's are.
- **Verification**: the events read from the agents' hub and waiting in the verifier's stage
  (input/verifier.py: ``backlog``, the number and the oldest's enqueued time). They are behind
  the folded positions too, so the hub's lag counts them; the stage's own count says so at once
  (between two questions, and while the hub does not answer) and names the cause: a verifier more
  than ``max_lag`` behind stops early approvals like a late fold.
- **Not measured yet**: until the agents' hub has answered the watcher once, the instance does not
  act (``unmeasured``; the service's ``acting``): a start, from a snapshot or not, makes no decision
  on a lag it has not measured (which would be a round of ``stale`` defers for every waiting event).
- **Not known**: the agents' hub has not answered a question for ``max_lag`` plus two questions'
  time; its lag cannot be told, and it counts as stale. The Azure feed hub not answering is said
  by its reachability (``azure-feed``) and does not stop approvals: it is the second input.
- **Gap**: a position older than where its partition now begins. The events in between are gone
  (retention), so the fold misses them; the reader would go on from the beginning silently. The
  watcher looks before its reader (re)opens the partitions from the fold's positions (``check_start``),
  and the loop keeps comparing what it folded with where each partition begins.

``LagGuard`` turns that into what the service does: ``stale(positions, now)`` is why the fold is too
late to approve on ("" when it is not), said once in the log when it starts and once when the fold
caught up; ``check_gaps(positions)`` latches the first gap found, said once as an error (``block``
latches a rolled-back snapshot the same way): the instance stops acting until it is restarted
without that snapshot (docs/coordinator.md).

Both are alerts (view/alerts.py), raised in the book given (``Service.alerts``): ``fold-gap`` from
the moment a gap or a rolled-back snapshot is latched (sent by the instance that holds the lease
although it does not act, output/alerting.py), and ``fold-late`` once the guard has stopped early
approvals for ``LATE_ALERT_AFTER`` seconds on end, cleared when the fold caught up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ....timestamps import rfc3339
from ..view.alerts import Alert

log = logging.getLogger("se_forwarder.coordinator.hub")

PROBE_EVERY = 2.0  # s between the watcher's questions to the hub while reading
KEPT = 64  # ends kept per partition (the oldest beyond a fold that far behind matters no more)
LATE_ALERT_AFTER = 60.0  # s of no early approval for a late fold before ``fold-late`` opens


class Alerts(Protocol):
    """Where the guard raises and clears its alerts (output/alert_book.py's ``AlertBook``)."""

    def raise_(self, alert: Alert) -> None: ...

    def clear(self, ident: str) -> None: ...


class NoAlerts:
    def raise_(self, alert: Alert) -> None:
        pass

    def clear(self, ident: str) -> None:
        pass


@dataclass(frozen=True)
class End:
    """Where a partition ended when asked: its last event (sequence, enqueued time) and where it begins."""

    sequence: int  # -1: empty
    enqueued: float | None  # epoch s
    beginning: int  # the first sequence number the hub still keeps (-1: empty)


def end_of(props: dict[str, Any]) -> End:
    """An ``End`` from the SDK's ``get_partition_properties`` answer."""
    sequence = int(props["last_enqueued_sequence_number"])
    when: Any = props.get("last_enqueued_time_utc")
    enqueued = float(when.timestamp()) if hasattr(when, "timestamp") and sequence >= 0 else None
    begins = props.get("beginning_sequence_number")
    return End(sequence, enqueued, int(begins) if begins is not None else -1)


class Watch:
    """What one hub's questions saw of its partitions' ends (written by its watcher, read by the loop).
    ``label`` names the hub in lines; ``prefix`` is its partitions' prefix in the positions map."""

    def __init__(self, label: str, prefix: str = "", second: bool = False) -> None:
        self.label, self.prefix, self.second = label, prefix, second
        self.answered: float | None = None  # wall time of the last question every partition answered
        self.gaps: list[str] = []  # where the reader had to go on from a later position than it had
        self._seen: dict[str, tuple[End, ...]] = {}  # partition -> ends seen, oldest first
        self._lock = threading.Lock()

    def check_start(self, ends: dict[str, End], start: dict[str, int]) -> None:
        """Before the reader (re)opens the partitions from ``start`` (partition -> the last sequence
        read): a partition that now begins after it has lost what lies between (module docstring)."""
        for pid, end in sorted(ends.items()):
            read = start.get(pid)
            if read is not None and end.sequence >= end.beginning > read + 1:
                self.gaps.append(_gap_line(self.label, pid, read, end.beginning))

    def observe(self, ends: dict[str, End], at: float) -> None:
        with self._lock:
            seen = dict(self._seen)
            for pid, end in ends.items():
                kept = seen.get(pid, ())
                if not kept or end.sequence < kept[-1].sequence:  # new, or the partition began again
                    kept = (end,)
                elif end.sequence > kept[-1].sequence or end.beginning != kept[-1].beginning:
                    kept = (*kept, end)[-KEPT:]
                seen[pid] = kept
            self._seen, self.answered = seen, at

    def seen(self) -> dict[str, tuple[End, ...]]:
        with self._lock:
            return self._seen


@dataclass(frozen=True)
class Lag:
    """One hub's lag now: the worst partition's age of what is not folded, the events behind."""

    label: str
    seconds: float
    events: int
    partition: str  # the partition furthest behind ("" when none is)
    silent: float | None = None  # seconds since the hub last answered, when that is too long to tell


def measure(watch: Watch, positions: dict[str, Any], now: float, max_lag: float) -> Lag:
    """``watch``'s hub's lag against the folded ``positions`` (module docstring)."""
    if watch.answered is None or now - watch.answered > max_lag + 2 * PROBE_EVERY:
        return Lag(watch.label, 0.0, 0, "", now - watch.answered if watch.answered is not None else None)
    worst, events, where = 0.0, 0, ""
    for pid, ends in watch.seen().items():
        pos = positions.get(watch.prefix + pid)
        folded = pos.sequence if pos is not None else ends[-1].beginning - 1
        behind = next((e for e in ends if e.sequence > folded and e.sequence >= 0), None)
        if behind is None:
            continue
        events += ends[-1].sequence - folded
        age = max(0.0, now - behind.enqueued) if behind.enqueued is not None else 0.0
        if age >= worst:
            worst, where = age, pid
    return Lag(watch.label, worst, events, where)


def gaps(watch: Watch, positions: dict[str, Any]) -> list[str]:
    """Each partition whose folded position is older than where the hub now begins, in a line."""
    out = []
    for pid, ends in sorted(watch.seen().items()):
        pos = positions.get(watch.prefix + pid)
        begins = ends[-1].beginning
        if pos is not None and begins > pos.sequence + 1 and ends[-1].sequence >= begins:
            out.append(_gap_line(watch.label, pid, pos.sequence, begins))
    return [*watch.gaps, *out]


def _gap_line(label: str, pid: str, read: int, begins: int) -> str:
    return (f"partition {pid} of {label} was folded up to {read} but the hub now keeps it from {begins} "
            f"on: {begins - read - 1} event(s) were lost to retention")


def _no_backlog() -> tuple[int, float | None]:
    return 0, None


class LagGuard:
    """What the service does with the lag of its hubs (module docstring)."""

    def __init__(self, watches: list[Watch], max_lag: float, alerts: Alerts | None = None,
                 backlog: Callable[[], tuple[int, float | None]] | None = None) -> None:
        self.watches, self.max_lag = watches, max_lag
        self.alerts = alerts if alerts is not None else NoAlerts()
        self.backlog = backlog or _no_backlog  # what waits for the verifier's workers (module docstring)
        self.lags: list[Lag] = []  # as measured at the last ``stale``
        self.reason = ""  # as said last
        self.late_since: float | None = None  # since when ``reason`` has not been ""
        self.gap = ""  # the first gap found: latched

    def unmeasured(self) -> str:
        """Why the lag cannot be told yet ("" once the agents' hub answered the watcher): an instance
        that leads acts only after that, so a start never decides on a lag it has not measured."""
        labels = [w.label for w in self.watches if not w.second and w.answered is None]
        return f"it has not yet learned how far the fold is behind {', '.join(labels)}" if labels else ""

    def stale(self, positions: dict[str, Any], now: float) -> str:
        """Why the fold is too late to approve on ("" when it is not); said once per change."""
        lags = [measure(w, positions, now, self.max_lag) for w in self.watches]
        why = [self._why(lag, w) for lag, w in zip(lags, self.watches, strict=True)]
        waiting, oldest = self.backlog()
        verifying = max(0.0, now - oldest) if waiting and oldest is not None else 0.0
        if verifying > self.max_lag:
            why.append(f"verification is {verifying:.0f} s behind the agents' hub ({waiting} event(s) "
                       f"waiting for the verifier's workers), more than max_lag {self.max_lag:g} s")
        self.lags = [replace(lag, seconds=verifying, events=max(lag.events, waiting))  # the stage's, if worse
                     if not w.second and lag.silent is None and verifying > lag.seconds else lag
                     for lag, w in zip(lags, self.watches, strict=True)]
        reason = "; ".join(r for r in why if r)
        if reason and not self.reason:
            log.warning("no early approval while the fold is late: %s", reason)
        elif self.reason and not reason:
            log.info("the fold caught up with its hubs (within %g s): early approvals go on", self.max_lag)
        self.reason = reason
        self._alert_late(reason, now)
        return reason

    def _alert_late(self, reason: str, now: float) -> None:
        if not reason:
            self.late_since = None
            self.alerts.clear("fold-late")
            return
        self.late_since = now if self.late_since is None else self.late_since
        if now - self.late_since >= LATE_ALERT_AFTER:
            self.alerts.raise_(Alert("fold-late", "fold-late", f"no early approval since "
                                     f"{rfc3339(self.late_since)}: {reason}"[:1000], "warning"))

    def _why(self, lag: Lag, watch: Watch) -> str:
        if lag.silent is not None or watch.answered is None:
            if watch.second:
                return ""
            return (f"how far the fold is behind {lag.label} is not known: it has not answered for "
                    f"{lag.silent:.0f} s" if lag.silent is not None else
                    f"how far the fold is behind {lag.label} is not known yet")
        if lag.seconds <= self.max_lag:
            return ""
        return (f"the fold is {lag.seconds:.0f} s behind {lag.label} ({lag.events} event(s) not folded yet, "
                f"partition {lag.partition} furthest), more than max_lag {self.max_lag:g} s")

    def block(self, why: str) -> None:
        """Latch another reason the fold misses what it should know (a rolled-back snapshot, ha/keeper.py)."""
        if why and not self.gap:
            self.gap = why
            self._alert_gap()

    def check_gaps(self, positions: dict[str, Any]) -> str:
        """The first gap found, latched and said once as an error ("" while there is none)."""
        if not self.gap:
            found = [line for w in self.watches for line in gaps(w, positions)]
            if found:
                self.gap = "; ".join(found)
                log.error("the fold has a gap: %s. This instance does not act on a fold that misses "
                          "events; delete the snapshot blob and restart it to read the hub from the start "
                          "of its retention knowingly (docs/coordinator.md#a-gap-in-the-fold)", self.gap)
                self._alert_gap()
        return self.gap

    def _alert_gap(self) -> None:
        self.alerts.raise_(Alert("fold-gap", "fold-gap", f"this instance does not act: {self.gap}"[:1000],
                                 "critical", {"Fix": "docs/coordinator.md#a-gap-in-the-fold"}))
