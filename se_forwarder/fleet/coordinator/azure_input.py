"""Azure's input at the service's edge: the feed hub, the Resource Graph catch-up and ``acknowledge``.

``AzureInput`` belongs to the service (service.py) when ``[azure]`` is configured. Nothing here
runs on the service's loop but ``take`` and ``fold_feed``; every call to Azure runs on a thread of
its own with a deadline, and its result comes back to the loop through ``take``:

- **The feed.** The Azure feed hub (``[azure.feed]``) is read with the same ``HubReader`` as the
  agents' hub, into the same inbox. Its batches carry partitions named ``feed:<hub>/<partition>``,
  so their positions are kept and saved with the snapshot beside the agents' hub's, the loop
  knows where each batch came from, and a new leader reads it to its end too before it acts
  (``ends``). Only Event Grid's identity may send to that hub (the Bicep
  grants nothing else), so no VM can write to this input. Each event (Event Grid delivers
  ``[CloudEvent]``; hub.decode takes its one element) is checked by ``azure_facts.feed_event`` and
  folded as Azure's (azure_fold.py); a refusal is counted by reason. Conversely, Azure's types read
  from the agents' hub are refused by trust.py (``azure``).
- **The catch-up.** At start and every ``arg_interval``, ``Graph.catch_up`` (azure_graph.py) on a
  thread of its own; the ``CatchUp`` is folded on the loop (azure_fold.fold_catch_up).
- **Acknowledge.** ``acknowledge(approval, path)`` queues the POST (azure_ack.py), once the
  approval is published; its outcome comes back as an ``Acked``, which the service publishes as
  an ``acknowledge`` decision (azure_paths.acknowledged).

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
from dataclasses import dataclass, replace
from typing import Any

from ...timestamps import rfc3339
from . import azure_facts, azure_fold, azure_paths
from .access import azure_credential
from .azure_config import AzureSettings
from .azure_facts import CatchUp
from .azure_graph import describe_error
from .events import Decision
from .hub import Batch, HubReader, Position, partition_ends
from .intake import FOLDED
from .state import FleetState

log = logging.getLogger("se_forwarder.coordinator.azure")

FEED = "feed:"


@dataclass(frozen=True)
class Acked:
    approval_id: str
    outcome: str
    reason: str
    at: float


class AzureInput:
    def __init__(self, settings: AzureSettings, *, page_size: int = 1000) -> None:
        self.settings, self.page_size = settings, page_size
        self.prefix = f"{FEED}{settings.feed.eventhub}/" if settings.feed is not None else ""
        self.results: queue.Queue[CatchUp | Acked] = queue.Queue()
        self.reader: HubReader | None = None
        self.counts: Counter[str] = Counter()  # feed-folded, feed-<reason>, feed-late, feed-not-cloudevent
        self.last: CatchUp | None = None  # the last catch-up folded
        self.catch_ups = 0
        self._stop = threading.Event()
        self._credential: Any = None
        self._acknowledger: Any = None
        self._poller: threading.Thread | None = None

    def credential(self) -> Any:
        if self._credential is None:
            self._credential = azure_credential(self.settings)
        return self._credential

    # -- life ---------------------------------------------------------------------------------------

    def start(self) -> None:
        from .azure_ack import Acknowledger

        self._acknowledger = Acknowledger(self.settings, self.credential(), self._acked)
        self._acknowledger.start()
        self._poller = threading.Thread(target=self._poll, name="coordinator-resource-graph", daemon=True)
        self._poller.start()

    def read_feed(self, positions: dict[str, Position], deliver: Callable[[Batch], None]) -> None:
        """(Re)start reading the feed hub from the positions saved for it (the others are the agents')."""
        if self.reader is not None:
            self.reader.close()
        if self.settings.feed is None:
            return
        start = {p[len(self.prefix):]: pos for p, pos in positions.items() if p.startswith(self.prefix)}
        prefix = self.prefix
        self.reader = HubReader(self.settings.feed, start,
                                lambda batch: deliver(replace(batch, partition=prefix + batch.partition)))
        self.reader.start()

    def ends(self) -> dict[str, int]:
        """The feed hub's partition ends, named as its positions are (leader.py's catch-up rule);
        none when it cannot be read: the agents' hub alone then decides when a leader may act."""
        if self.settings.feed is None:
            return {}
        try:
            ends = partition_ends(self.settings.feed)
        except Exception as exc:  # noqa: BLE001 - one line; the feed is the second input
            log.warning("the Azure feed hub's ends cannot be read (%s); acting without reading it to its end",
                        describe_error(exc))
            return {}
        return {self.prefix + pid: end for pid, end in ends.items()}

    def close(self) -> None:
        self._stop.set()
        if self.reader is not None:
            self.reader.close()
        if self._acknowledger is not None:
            self._acknowledger.close()
        if self._poller is not None:
            self._poller.join(5)

    # -- the feed (on the loop) --------------------------------------------------------------------

    def is_feed(self, batch: Batch) -> bool:
        return bool(self.prefix) and batch.partition.startswith(self.prefix)

    def fold_feed(self, state: FleetState, batch: Batch) -> None:
        for event, _ in batch.events:
            if event is None:
                self.counts["feed-not-cloudevent"] += 1
                continue
            facts = azure_facts.feed_event(event, self.settings.subscriptions)
            if isinstance(facts, azure_facts.Refusal):
                self.counts[f"feed-{facts.code}"] += 1
                log.debug("feed event %s refused (%s): %s", str(event.get("id"))[:80], facts.code,
                          facts.detail)
                continue
            outcome = azure_fold.fold_event(state, facts)
            self.counts["feed-folded" if outcome == FOLDED else f"feed-{outcome}"] += 1

    # -- the catch-up (its own thread) -------------------------------------------------------------

    def _poll(self) -> None:
        from .azure_graph import Graph

        graph: Graph | None = None
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                graph = graph or Graph(self.settings, self.credential(), page_size=self.page_size,
                                       deadline=min(120.0, max(20.0, self.settings.arg_interval)))
                result = graph.catch_up()
            except Exception as exc:  # noqa: BLE001 - one line; tried again at the next interval
                result = CatchUp(time.time(), errors=[describe_error(exc)])
            for error in result.errors[:3]:
                log.warning("Resource Graph catch-up: %s", error)
            self.results.put(result)
            self._stop.wait(max(1.0, self.settings.arg_interval - (time.monotonic() - began)))
        if graph is not None:
            graph.close()

    # -- acknowledge -----------------------------------------------------------------------------------

    def acknowledge(self, approval_id: str, path: str) -> None:
        assert self._acknowledger is not None, "start() first"
        self._acknowledger.submit(approval_id, path)

    def _acked(self, approval_id: str, outcome: str, reason: str) -> None:
        self.counts[f"acknowledge-{outcome}"] += 1
        self.results.put(Acked(approval_id, outcome, reason, time.time()))

    def once_published(self, state: FleetState, decision: Decision, may_act: Callable[[], bool],
                       done: Future[Any] | None) -> Future[Any] | None:
        """For an approval through ARM, the future of its publication (``done``, or a new one),
        which then has it acknowledged while this instance may still act; ``done`` otherwise."""
        if decision.kind != "approve" or decision.via != azure_paths.VIA_ARM or decision.shadow:
            return done
        published: Future[Any] = done or Future()
        path = azure_paths.acknowledge_path(state, decision.event_id or "")

        def go(future: Future[Any]) -> None:
            if path is not None and future.exception() is None and may_act():
                self.acknowledge(decision.id, path)

        published.add_done_callback(go)
        return published

    # -- on the loop -----------------------------------------------------------------------------------

    def pump(self, state: FleetState, publish: Callable[[Decision], object] | None) -> bool:
        """Fold the catch-ups that came back, and hand what acknowledge answered to ``publish`` as
        ``acknowledge`` decisions (None: this instance does not act; they are logged and dropped, and
        the leader retries the approval). True when a catch-up was folded."""
        folded = False
        while True:
            try:
                item = self.results.get_nowait()
            except queue.Empty:
                return folded
            if isinstance(item, CatchUp):
                azure_fold.fold_catch_up(state, item)
                self.last, self.catch_ups, folded = item, self.catch_ups + 1, True
                for code, count in item.refused.items():
                    self.counts[f"graph-{code}"] += count
                continue
            approval = state.decisions.get(item.approval_id)
            if approval is None or publish is None:
                log.warning("acknowledge of %s: %s (%s), not published: this instance no longer acts",
                            item.approval_id[:200], item.outcome, item.reason)
                continue
            publish(azure_paths.acknowledged(approval, item.outcome, item.reason, item.at))

    def describe(self) -> dict[str, Any]:
        last = self.last
        return {
            "feed": self.settings.feed.eventhub if self.settings.feed else None,
            "acknowledge": self.settings.acknowledge,
            "catchUps": self.catch_ups,
            "lastCatchUp": None if last is None else {
                "time": rfc3339(last.as_of), "covered": list(last.covered), "vms": len(last.vms),
                "events": len(last.events), "queries": last.queries, "errors": last.errors[:5]},
            "counts": dict(sorted(self.counts.items())),
        }
