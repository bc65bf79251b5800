"""The service's input: each batch read from either hub checked on its way into the fold, and what is
said of it in the log. The trust boundary: nothing reaches the fold from a hub but through here.
Runs on the service's thread, except the intermediates' fetching thread, which only hands finished
URLs back through a queue.

Every event read from the agents' hub passes the gate first (gate.py, with trust.py's
verdicts): agents' registrations bind each vmId to its key, their reports are
folded when signed by that key, and this coordinator's own decisions when signed by a trusted key;
decisions of another coordinator name (``foreign``: a shadow coordinator under its own name can
watch the same hub as a live one), forgeries and refused reports are counted by reason and dropped
(one log line a minute per reason). A registration whose attested document needs an intermediate
not configured waits while input/intermediates.py fetches it on its own thread. A batch from the Azure
feed hub (``readers.FEED`` partitions) is not the gate's: it goes to the
feed's own check at the edge (``feed``: input/azure.py, with edge/azure_facts.py), since no VM can write
to that hub and none of its events carries a VM's key.

A shard (``[shard]``) first drops what plainly is another shard's: an event that claims a
subscription the shard does not own (edge/shard.py, before any signature check), counted as
``other-shard`` among the refusals and logged at debug level only (on a hub shared by several
shards it is what most events are).

``BatchAdmission`` owns the gate (gate.py, pure) and the intermediates fetcher (input/intermediates.py, when
``[trust] fetch_intermediates``); it counts what is not a CloudEvent, keeps the newest enqueued time
read (the hub time held reports expire by), logs each vmId that registers a new key, and logs
refusals: one ``warning`` a minute at most per reason, with the count so far.
"""

from __future__ import annotations

import logging
import queue
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ....approvals import signing
from ..config.limits import CAPS, Limits
from ..config.trust import TrustSettings
from ..edge import shard, trust
from ..edge.gate import Edge, Gate
from ..fold.state import FleetState
from .hub_reader import Batch
from .hubs import FEED
from .intermediates import Intermediates

log = logging.getLogger("se_forwarder.coordinator")

REFUSED = {trust.FORGED: "a forged decision", trust.FOREIGN: "another coordinator's decision",
           trust.UNSIGNED: "an unsigned report", trust.UNREGISTERED: "a report of an unregistered VM",
           trust.BAD_SIGNATURE: "a report that does not verify with its VM's key",
           trust.WRONG_VM: "a report about another VM",
           trust.AZURE: "an event of Azure's own types on the agents' hub (a VM sent it)"}
SAY_EVERY = 60.0


@dataclass(frozen=True)
class AdmissionCounts:
    """What became of the events read so far (``BatchAdmission.counts``, for /metrics and status)."""

    folded: dict[str, int]  # by CloudEvent type (prefix left out)
    skipped: dict[str, int]  # by why: not-cloudevent, malformed, late, other-type, capped
    refused: dict[str, int]  # by trust.py's reason
    capped: dict[str, int]  # by [limits] cap
    waiting: int  # reports held until their VM's registration (or an intermediate)
    rekeyed: int  # vmIds that registered a new key


class BatchAdmission:
    def __init__(self, source: str, keys: Callable[[], signing.VerifyKeys], settings: TrustSettings,
                 limits: Limits, feed: Callable[[FleetState, Batch], None] | None = None,
                 owned: frozenset[str] = frozenset()) -> None:
        self.feed = feed  # the Azure feed hub's batches (with [azure.feed]): checked there
        self.fetched_urls: queue.Queue[str] = queue.Queue()
        self.intermediates = Intermediates(settings.intermediate_hosts, self.fetched_urls.put) \
            if settings.fetch_intermediates else None
        attested = trust.Attestation(settings.anchors(), settings.subscriptions,
                                     self.intermediates.lookup if self.intermediates is not None else None)
        self.gate = Gate(Edge(source, keys, attested, settings.require_signed_reports, settings.report_skew,
                              limits))
        self.not_cloudevents = 0
        self.owned = owned  # [shard] subscriptions; empty: every subscription is this coordinator's
        self.other_shard = 0  # events dropped as another shard's (edge/shard.py)
        self.hub_time: float | None = None  # the newest enqueued time read from the hub
        self._said: dict[str, float] = {}  # reason -> monotonic time it may be logged again

    @property
    def refused(self) -> Counter[str]:
        return self.gate.refused

    def fold(self, state: FleetState, batch: Batch) -> None:
        """Every event of ``batch`` through the gate, or the feed's check for a batch of the Azure feed
        hub (the positions are the service's to keep)."""
        if self.feed is not None and batch.partition.startswith(FEED):
            self.feed(state, batch)
            return
        for event, position in batch.events:
            if event is None:
                self.not_cloudevents += 1
            elif (claimed := shard.other_shard(event, self.owned)) is not None:
                self.other_shard += 1
                log.debug("dropped another shard's event %s: it claims subscription %s",
                          str(event.get("id"))[:120], claimed[:60])
            else:
                outcome = self.gate.admit(state, event, position.enqueued)
                if outcome in trust.REASON_CODES and self.gate.last_refusal is not None:
                    _, verdict, refused = self.gate.last_refusal
                    what = f"{str(refused.get('type'))[:80]} {str(refused.get('id'))[:120]}"
                    self.say(outcome, f"{what}: {verdict.detail}")
            if position.enqueued is not None and (self.hub_time is None or position.enqueued > self.hub_time):
                self.hub_time = position.enqueued
        for rekey in self.gate.rekeys:
            vm = state.vms.get(rekey.vm)
            log.warning("vmId %s (%s) registered a new identity key %s, replacing %s (a reinstall, or its "
                        "state directory moved away)", rekey.vm, vm.name if vm else "not heard from yet",
                        rekey.new, rekey.old)
        self.gate.rekeys.clear()

    def counts(self, state: FleetState) -> AdmissionCounts:
        fold = self.gate.stats
        return AdmissionCounts(
            dict(fold.folded),
            {"not-cloudevent": self.not_cloudevents, "malformed": fold.malformed, "late": fold.late,
             "other-type": sum(fold.skipped.values()), "capped": fold.dropped},
            {**{code: self.refused[code] for code in trust.REASON_CODES},
             shard.OTHER_SHARD: self.other_shard},
            {reason: fold.capped.get(reason, 0) for reason in CAPS},
            self.gate.held(state), self.gate.registered.get("rekeyed", 0))

    def say(self, code: str, what: str) -> None:
        """One warning a minute at most per reason, with the count so far."""
        if time.monotonic() >= self._said.get(code, 0.0):
            self._said[code] = time.monotonic() + SAY_EVERY
            log.warning("dropped %s (%d so far): %s", REFUSED.get(code, f"an event ({code})"),
                        self.gate.refused[code], what)

    def fetched(self, state: FleetState) -> bool:
        """Admit again what waited for intermediates fetched since; whether anything was."""
        any_done = False
        while True:
            try:
                url = self.fetched_urls.get_nowait()
            except queue.Empty:
                return any_done
            self.gate.fetched(state, url)
            any_done = True

    def sweep(self, state: FleetState) -> None:
        """Drop reports that waited too long for their VM's registration (in hub time)."""
        if self.hub_time is not None and self.gate.sweep(state, self.hub_time):
            self.say(trust.UNREGISTERED, "reports waited in vain for their VM's registration")

    def close(self) -> None:
        if self.intermediates is not None:
            self.intermediates.close()
