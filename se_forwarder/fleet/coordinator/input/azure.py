"""Azure's input at the service's edge: the feed's events checked, Resource Graph's catch-up, ``acknowledge``.

``AzureInput`` belongs to the service (service.py) when ``[azure]`` is configured. Nothing here
runs on the service's loop but ``fold_feed``, ``pump`` and ``once_published``; every call to Azure
runs on a thread of its own with a deadline, and says whether ARM answered (reach.py: ``arm``,
through azure_graph.arm_call), so ``/healthz``, ``status`` and ``/metrics`` show when ARM or
Resource Graph cannot be reached:

- **The feed.** input/hubs.py reads the Azure feed hub (``[azure.feed]``) with the same ``HubReader``
  as the agents' hub, into the same inbox, its positions kept and snapshotted beside theirs
  (``azure-feed``: its reachability). Only Event Grid's identity may send to that hub (the Bicep
  grants nothing else), so no VM can write to this input. Each event (Event Grid delivers
  ``[CloudEvent]``; hub_reader.decode takes its one element) is checked by ``azure_facts.feed_event`` and
  folded as Azure's (a scheduled event: fold/azure.py; a VM's availability: fold/health.py); a
  refusal is counted by reason, logged once per reason and ``REFUSAL_SAID`` seconds, and watched
  (input/feed_watch.py: a feed whose every event is refused is as loud as one that does not
  answer). A shard skips, before any check, the events of subscriptions another shard owns
  (edge/shard.py), counted as ``feed-other-shard`` and neither refused nor watched: on a feed hub
  every subscription's topic delivers to, that is most of them. Its catch-up reads only its own
  subscriptions (``[azure] subscriptions`` is within the shard's). Conversely, Azure's types read
  from the agents' hub are
  refused by trust.py (``azure``).
- **The catch-up.** At start and every ``arg_interval``, ``Graph.catch_up`` (azure/graph.py) on a
  thread of its own; the ``CatchUp`` is folded on the loop (``pump``, azure_fold.fold_catch_up).
  While ARM does not answer, the next one comes sooner (``RETRY``, at most ``arg_interval`` apart).
- **Acknowledge.** An approval through ARM (``Via: "arm"``, never a queue message: decide/evaluate.py leaves
  it out of ``sends``) is acknowledged once it is published (``once_published``), while the term it
  was made in lasts (azure/acknowledge.py: one call at a time, each ending at its deadline). The
  approvals of one resource made in one turn of the loop (a decision pass, or a control request)
  are gathered and, at the next turn (``pump``), handed on as one batch once all are published:
  one ``AcknowledgeList`` call for several events of a scale set. What Azure answered each event
  goes to ``record`` with that term: the service publishes it as the approval's ``acknowledge``
  record (azure_paths.acknowledged), as it publishes a message's ``sent`` one.

The credential is the coordinator's (``[azure] credential``: its managed identity by default).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from ....timestamps import rfc3339
from ..azure.acknowledge import Ack
from ..azure.clients import azure_credential
from ..azure.graph import ARM_PART, ERROR_LIMIT
from ..azure.reach import Reach, describe_error
from ..config.azure import AzureSettings
from ..decide import arm_path as azure_paths
from ..decide.events import Decision, Recorded
from ..edge import azure_facts, shard
from ..fold import azure as azure_fold
from ..fold.azure_state import CatchUp, HealthFacts
from ..fold.caps import FOLDED
from ..fold.health import fold_azure_health
from ..fold.state import FleetState
from .feed_watch import PART as FEED_EVENTS
from .feed_watch import FeedWatch
from .hub_reader import Batch
from .hubs import FEED_PART

log = logging.getLogger("se_forwarder.coordinator.azure")

RETRY = (10.0, 20.0, 40.0, 80.0)  # s to the next catch-up while ARM does not answer
REFUSAL_SAID = 600.0  # s between two warnings of one reason a feed event was refused


class AzureInput:
    def __init__(self, settings: AzureSettings, reach: dict[str, Reach], record: Callable[[Recorded], None],
                 *, page_size: int = 1000) -> None:
        self.settings, self.page_size, self.record = settings, page_size, record
        self.arm = reach[ARM_PART]
        self.feed_watch: FeedWatch | None = None
        if FEED_EVENTS in reach:  # its own kind of part (feed_watch.py), in the service's map
            self.feed_watch = reach[FEED_EVENTS] = FeedWatch()
        self._said: dict[str, float] = {}  # refusal code -> monotonic time it was last warned of
        self._gathering: dict[tuple[str, int], list[tuple[Ack, Future[Any]]]] = {}  # (resource, term)
        self._may_act: Callable[[int], bool] = lambda _: False
        self.results: queue.Queue[CatchUp] = queue.Queue()
        self.counts: Counter[str] = Counter()  # feed-folded, feed-<reason>, graph-<reason>, acknowledge-<...>
        self.last: CatchUp | None = None  # the last catch-up folded
        self.catch_ups = 0
        self._stop = threading.Event()
        self._credential: Any = None
        self._acknowledger: Any = None
        self._poller: threading.Thread | None = None

    @staticmethod
    def parts(settings: AzureSettings | None) -> tuple[str, ...]:
        """The parts reach.py records for Azure's input (none without ``[azure]``)."""
        if settings is None:
            return ()
        return (FEED_PART, FEED_EVENTS, ARM_PART) if settings.feed is not None else (ARM_PART,)

    def credential(self) -> Any:
        if self._credential is None:
            self._credential = azure_credential(self.settings)
        return self._credential

    # -- life ---------------------------------------------------------------------------------------

    def start(self) -> None:
        from ..azure.acknowledge import Acknowledger

        self._acknowledger = Acknowledger(self.settings, self.credential(), self._acked, self.arm)
        self._acknowledger.start()
        self._poller = threading.Thread(target=self._poll, name="coordinator-resource-graph", daemon=True)
        self._poller.start()

    def close(self) -> None:
        self._stop.set()
        if self._acknowledger is not None:
            self._acknowledger.close()
        if self._poller is not None:
            self._poller.join(5)

    # -- the feed (on the loop) --------------------------------------------------------------------

    def fold_feed(self, state: FleetState, batch: Batch) -> None:
        """A batch from the Azure feed hub (input/hubs.py), each event checked at the edge first (its
        positions are the service's to keep)."""
        for event, _ in batch.events:
            if event is None:
                self._refused("not-cloudevent", "a message that is not a CloudEvent", None)
                continue
            if shard.other_shard(event, self.settings.shard) is not None:  # before any check: not a refusal
                self.counts[f"feed-{shard.OTHER_SHARD}"] += 1
                continue
            facts = azure_facts.feed_event(event, self.settings.subscriptions)
            if isinstance(facts, azure_facts.Refusal):
                self._refused(facts.code, facts.detail, event.get("id"))
                continue
            if isinstance(facts, HealthFacts):
                outcome = fold_azure_health(state, facts)
            else:
                outcome = azure_fold.fold_event(state, facts)
            self.counts["feed-folded" if outcome == FOLDED else f"feed-{outcome}"] += 1
            if self.feed_watch is not None:
                self.feed_watch.folded()

    def _refused(self, code: str, detail: str, ident: Any) -> None:
        self.counts[f"feed-{code}"] += 1
        if self.feed_watch is not None:
            self.feed_watch.refused(code)
        now = time.monotonic()
        loud = code != "unread" and now - self._said.get(code, float("-inf")) >= REFUSAL_SAID
        if loud:
            self._said[code] = now
        log.log(logging.WARNING if loud else logging.DEBUG, "refused feed event %s (%s): %s",
                str(ident)[:80], code, detail)

    # -- the catch-up (its own thread) -------------------------------------------------------------

    def _poll(self) -> None:
        from ..azure.graph import Graph

        graph: Graph | None = None
        failed = 0
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                deadline = min(120.0, max(20.0, self.settings.arg_interval))
                graph = graph or Graph(self.settings, self.credential(), page_size=self.page_size,
                                       deadline=deadline, reach=self.arm)
                result = graph.catch_up()
            except Exception as exc:  # noqa: BLE001 - one line; tried again at the next interval
                result = CatchUp(time.time(), errors=[describe_error(exc, ERROR_LIMIT)])
            for error in result.errors[:3]:
                log.warning("Resource Graph catch-up: %s", error)
            self.results.put(result)
            failed = failed + 1 if not self.arm.reachable else 0
            every = self.settings.arg_interval
            wait = min(every, RETRY[min(failed, len(RETRY)) - 1]) if failed else every
            self._stop.wait(max(1.0, wait - (time.monotonic() - began)))
        if graph is not None:
            graph.close()

    # -- acknowledge -----------------------------------------------------------------------------------

    def _acked(self, approval_id: str, outcome: str, reason: str, term: int) -> None:
        self.counts[f"acknowledge-{outcome}"] += 1
        made = partial(azure_paths.acknowledged, code=outcome, reason=reason, now=time.time())
        self.record((approval_id, made, term))

    def once_published(self, state: FleetState, decision: Decision, term: int, may_act: Callable[[int], bool],
                       done: Future[Any] | None) -> Future[Any] | None:
        """For an approval through ARM, the future of its publication (``done``, or a new one); it is
        gathered with the other approvals of its resource made in this turn (module docstring).
        ``done`` for any other decision."""
        if decision.kind != "approve" or decision.via != azure_paths.VIA_ARM or decision.shadow:
            return done
        published: Future[Any] = done or Future()
        resource = azure_paths.event_resource_id(state, decision.event_id or "")
        if resource is not None:
            ack = Ack(decision.id, decision.event_id or "", resource)
            self._gathering.setdefault((ack.owner.lower(), term), []).append((ack, published))
            self._may_act = may_act
        return published

    def _acknowledge_gathered(self) -> None:
        """Each resource's approvals of the last turn: acknowledged as one batch once all of them are
        published (those whose publication failed are left out), while their term lasts."""
        gathered, self._gathering = self._gathering, {}
        for (_, term), items in gathered.items():
            left, lock = [len(items)], threading.Lock()

            def published(_: Future[Any], items: list[tuple[Ack, Future[Any]]] = items, term: int = term,
                          left: list[int] = left, lock: threading.Lock = lock) -> None:
                with lock:
                    left[0] -= 1
                    if left[0]:
                        return
                batch = [ack for ack, future in items if future.exception() is None]
                if batch and self._may_act(term):
                    assert self._acknowledger is not None, "start() first"
                    self._acknowledger.submit(batch, term)

            for _, future in items:
                future.add_done_callback(published)

    # -- on the loop -----------------------------------------------------------------------------------

    def pump(self, state: FleetState) -> bool:
        """Fold the catch-ups that came back; True when one was."""
        if self.feed_watch is not None:
            self.feed_watch.look()
        if self._gathering:
            self._acknowledge_gathered()
        folded = False
        while True:
            try:
                item = self.results.get_nowait()
            except queue.Empty:
                return folded
            azure_fold.fold_catch_up(state, item)
            self.last, self.catch_ups, folded = item, self.catch_ups + 1, True
            for code, count in item.refused.items():
                self.counts[f"graph-{code}"] += count

    def describe(self) -> dict[str, Any]:
        last = self.last
        return {
            "feed": self.settings.feed.eventhub if self.settings.feed else None,
            "acknowledge": self.settings.acknowledge,
            "catchUps": self.catch_ups,
            "lastCatchUp": None if last is None else {
                "time": rfc3339(last.as_of), "covered": list(last.covered), "vms": len(last.vms),
                "events": len(last.events), "health": len(last.health), "queries": last.queries,
                "errors": last.errors[:5]},
            "counts": dict(sorted(self.counts.items())),
        }
