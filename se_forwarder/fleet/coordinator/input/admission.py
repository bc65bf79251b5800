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
subscription the shard does not own (edge/shard.py), counted as ``other-shard`` among the refusals
and logged at debug level only (on a hub shared by several shards it is what most events are). It
is marked so on the reader's thread as the batch is handed on (``put``), before the verifier's
workers (input/verifier.py) see it: another shard's report or registration never costs a signature
check, a registration quota or a worker's time.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ....approvals import signing
from ..config.limits import CAPS, Limits
from ..config.trust import TrustSettings
from ..edge import offload, shard, trust
from ..edge.gate import Edge, Gate
from ..fold.state import FleetState, Identity
from .hub_reader import Batch
from .hubs import FEED
from .intermediates import Intermediates
from .verifier import Verifier

log = logging.getLogger("se_forwarder.coordinator")

REFUSED = {trust.FORGED: "a forged decision", trust.FOREIGN: "another coordinator's decision",
           trust.UNSIGNED: "an unsigned report", trust.UNREGISTERED: "a report of an unregistered VM",
           trust.BAD_SIGNATURE: "a report that does not verify with its VM's key",
           trust.WRONG_VM: "a report about another VM",
           trust.AZURE: "an event of Azure's own types on the agents' hub (a VM sent it)"}
SAY_EVERY = 60.0
OTHER = trust.Checked(verdict=trust.Verdict(False, shard.OTHER_SHARD, "another shard's"))  # marked by put


def _nowhere(_batch: Batch) -> None:
    raise RuntimeError("no inbox to deliver to")


@dataclass(frozen=True)
class AdmissionCounts:
    """What became of the events read so far (``BatchAdmission.counts``, for /metrics and status)."""

    folded: dict[str, int]  # by CloudEvent type (prefix left out)
    skipped: dict[str, int]  # by why: not-cloudevent, malformed, late, other-type, capped
    refused: dict[str, int]  # by trust.py's reason
    capped: dict[str, int]  # by [limits] cap
    waiting: int  # reports held until their VM's registration (or an intermediate)
    rekeyed: int  # vmIds that registered a new key
    held_bytes: int = 0  # what those held reports take ([limits] held_bytes)
    key_conflicts: int = 0  # vmIds whose document came with two keys, not settled
    intermediates_missing: int = 0  # CA Issuers URLs that failed and are not tried again yet
    verifier_restarts: int = 0  # worker pools made again after a worker died

class BatchAdmission:
    def __init__(self, source: str, keys: Callable[[], signing.VerifyKeys], settings: TrustSettings,
                 limits: Limits, feed: Callable[[FleetState, Batch], None] | None = None,
                 deliver: Callable[[Batch], None] | None = None, owned: frozenset[str] = frozenset()) -> None:
        self.feed = feed  # the Azure feed hub's batches (with [azure.feed]): checked there
        self.fetched_urls: queue.Queue[str] = queue.Queue()
        self.intermediates = Intermediates(settings.intermediate_paths, self.fetched_urls.put) \
            if settings.fetch_intermediates else None
        anchors = settings.anchors()
        attested = trust.Attestation(anchors, settings.subscriptions,
                                     self.intermediates.lookup if self.intermediates is not None else None)
        self.gate = Gate(Edge(source, keys, attested, settings.require_signed_reports, settings.report_skew,
                              limits))
        self._state: FleetState | None = None  # the fold last admitted into (the verifier reads its keys)
        # The hubs' batches go through the verifier's workers on their way to ``deliver`` (the inbox).
        self.verifier = Verifier(deliver, settings.verify_workers, limits, self._bound, self._known,
                                 lambda: offload.Job.of(anchors, settings.subscriptions, self._fetched()),
                                 ) if deliver is not None and settings.verify_workers > 0 else None
        self._onward: Callable[[Batch], None] = self.verifier.put if self.verifier is not None \
            else (deliver or _nowhere)
        self.not_cloudevents = 0
        self.owned = owned  # [shard] subscriptions; empty: every subscription is this coordinator's
        self.other_shard = 0  # events dropped as another shard's (edge/shard.py)
        self.hub_time: float | None = None  # the newest enqueued time read from the hub
        self._said: dict[str, float] = {}  # reason -> monotonic time it may be logged again

    def put(self, batch: Batch) -> None:
        """From a reader's thread: mark another shard's events (``OTHER``), then hand the batch on to
        the verifier (or the inbox); ``queue.Full`` when there is no room (the reader tries again)."""
        if self.owned and not batch.partition.startswith(FEED):
            batch.checked = [OTHER if event is not None and shard.other_shard(event, self.owned) is not None
                             else None for event, _ in batch.events]
        self._onward(batch)

    def backlog(self) -> tuple[int, float | None]:
        """What waits for the verifier's workers: events, and the oldest's enqueued time (input/lag.py)."""
        return self.verifier.backlog() if self.verifier is not None else (0, None)

    def _bound(self, vm: str) -> Identity | None:
        state = self._state
        return state.identities.get(vm) if state is not None else None

    def _known(self, event: Mapping[str, Any]) -> bool:
        state = self._state
        return state is not None and self.gate.known(state, event)

    def _fetched(self) -> dict[str, tuple[bytes, ...]]:
        return self.intermediates.found() if self.intermediates is not None else {}

    @property
    def refused(self) -> Counter[str]:
        return self.gate.refused

    def fold(self, state: FleetState, batch: Batch) -> None:
        """Every event of ``batch`` through the gate, or the feed's check for a batch of the Azure feed
        hub (the positions are the service's to keep)."""
        if self.feed is not None and batch.partition.startswith(FEED):
            self.feed(state, batch)
            return
        self._state = state
        marked = batch.checked is not None  # it came through ``put``: another shard's events are marked
        checks = batch.checked or [None] * len(batch.events)
        for (event, position), checked in zip(batch.events, checks, strict=True):
            if event is None:
                self.not_cloudevents += 1
            elif checked is OTHER or (not marked and shard.other_shard(event, self.owned) is not None):
                self.other_shard += 1
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("dropped another shard's event %s: it claims subscription %s",
                              str(event.get("id"))[:120], str(shard.claimed_subscription(event))[:60])
            else:
                outcome = self.gate.admit(state, event, position.enqueued, checked)
                if outcome in trust.REASON_CODES and self.gate.last_refusal is not None:
                    _, verdict, refused = self.gate.last_refusal
                    what = f"{str(refused.get('type'))[:80]} {str(refused.get('id'))[:120]}"
                    self.say(outcome, f"{what}: {verdict.detail}")
            if position.enqueued is not None and (self.hub_time is None or position.enqueued > self.hub_time):
                self.hub_time = position.enqueued
        for vm_key in self.gate.conflicts:
            conflict = state.conflicts.get(vm_key)
            vm = state.vms.get(vm_key)
            log.error("vmId %s (%s): one attested document came with two identity keys (%s): neither speaks "
                      "for it, and it counts as unavailable in every budget until a newer registration or "
                      "'coordinator settle-identity' settles it (a key ground to its nonce, or a copied "
                      "state directory)", vm_key, vm.name if vm else "not heard from yet",
                      ", ".join(c.keyid for c in conflict.candidates) if conflict else "?")
        self.gate.conflicts.clear()
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
            self.gate.held(state), self.gate.registered.get("rekeyed", 0), sum(self.gate.held_bytes.values()),
            len(state.conflicts), self.intermediates.missing if self.intermediates is not None else 0,
            self.verifier.restarts if self.verifier is not None else 0)

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

    def clear(self) -> None:
        """Forget what the verifier holds (the readers were closed: the next ones read from the fold's
        positions)."""
        if self.verifier is not None:
            self.verifier.clear()

    def close(self) -> None:
        if self.verifier is not None:
            self.verifier.close()
        if self.intermediates is not None:
            self.intermediates.close()
