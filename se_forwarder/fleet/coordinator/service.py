"""The coordinator service: the fold kept warm from the hub, decisions made while leading.

One thread (``run``, the loop) owns the fold. It folds what the hub reader hands it, a turn at a time, each
turn followed by bringing the scope index (decide/scopes.index) and /v1/state's digest up to date with what
it changed, so that a pass costs what it decides, not what was folded before it (at a start, a first pass on
the load's thread, its decisions dropped, makes them: ha/keeper.py); it carries out the API's
requests, and, while this instance acts (it leads and has caught up, ha/election.py), runs a decision pass
whenever new input arrived (at most every 50 ms) and at least once a second (the clock matters: echo
timeouts, min_healthy, heartbeats going stale). Each decision is folded at once and handed to the output
(output/publish.py), which publishes it; each pass also tells the output which approvals want their message
(decide/evaluate.py's ``sends``), and every message that went out comes back as a ``sent`` record, folded
and published like a decision. Every minute it prunes; while acting, every ``snapshot_interval`` it saves
the fold with the positions it covers, when nothing is waiting to be published.

The loop never waits for the storage account, the queues or the hub: the lease, publishing, sending and the
snapshot's upload and download all run on threads of their own with deadlines (ha/keeper.py, ha/election.py,
output/publish.py, output/queue_sender.py, azure/reach.py), so the API, ``/healthz`` and ``/metrics`` answer
during any outage. It says once when this instance stops acting and why, and once when it acts again.

Every batch read, from the agents' hub or the Azure feed hub (input/hubs.py), goes through
input/admission.py, the trust boundary. With ``[azure]`` (input/azure.py) the Resource Graph catch-ups come
back from their own thread and are folded; an approval through ARM (``Via: "arm"``) gets no message: it is
acknowledged once published, off the loop, and what Azure answered is published as an ``acknowledge``
record, the way a message that went out is a ``sent`` one (``_take_records``). Gates are asked off the loop
(input/gates.py); their verdicts are folded on it (``pump``).

A standby folds the same input and makes no decision. Control requests that change something are refused on
a standby with the leader's address (``NotLeading``): a standby's fold may lag the leader's, and the
sequence numbers of pause/hold decisions come from the fold, so only the leader can number them safely.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from ...approvals import signing
from .azure import clients as access
from .azure.reach import Reach, parts
from .config.service import ServiceSettings
from .decide.control import OVERRIDE, ControlRefused
from .decide.evaluate import Evaluation, evaluate
from .decide.events import Decision, Recorded, sent, to_dict
from .decide.queues import QueueConflictLog
from .decide.scopes import index
from .fold.dispatch import FOLDED, OWN, fold_event
from .fold.retention import prune
from .fold.state import FleetState
from .ha.election import LeaderElection, NotLeading
from .ha.keeper import Keeper, Loaded
from .ha.lease import Lease, ensure_container
from .ha.snapshot_blob import SnapshotBlob
from .input.admission import BatchAdmission
from .input.azure import AzureInput
from .input.gates import GateWatch
from .input.hub_reader import Batch, Position
from .input.hubs import Hubs
from .input.inbox import Inbox
from .input.lag import LagGuard
from .input.requests import Requests
from .output.alert_book import AlertBook
from .output.hub_producer import HubProducer
from .output.messages import ApprovalMessages
from .output.publish import Outgoing, Output
from .signer import Approval, Signer
from .stats import FleetStats, Health, Reachability, Stats, fleet_stats
from .view.digest import Digest
from .view.status import status

log = logging.getLogger("se_forwarder.coordinator")

PASS_EVERY = 0.05  # s between decision passes while input keeps arriving
PASS_AT_LEAST = 1.0  # s: a pass at least this often while leading
PRUNE_EVERY = 60.0
RECORDS = ("sent", "acknowledge")  # what came of an approval: published and folded, but no decision


class Service:
    def __init__(self, settings: ServiceSettings, stop: threading.Event,
                 clients: access.Clients = access.AZURE) -> None:
        self.settings, self.policy, self.stop = settings, settings.policy, stop
        self.source = settings.source
        self.state = FleetState()
        self.positions: dict[str, Position] = {}
        self.inbox = Inbox()
        self.requests = Requests()  # the API's, run on this thread (input/requests.py)
        self.submit = self.requests.submit
        self.records: queue.Queue[Recorded] = queue.Queue()  # what came of approvals (_take_records)
        self.evaluation: Evaluation | None = None
        self.last_input: float | None = None  # monotonic arrival of the newest folded batch
        self.decisions_made, self._dirty = 0, False
        self.reach: dict[str, Reach] = parts(*AzureInput.parts(settings.azure))
        self.azure = AzureInput(settings.azure, self.reach, self.records.put) if settings.azure else None
        self._ready = False  # the fold is loaded (and not being rebuilt)
        self._acting = False  # as last said in the log
        self._rebuild_term: int | None = None
        self._rebuilt_terms: set[int] = set()
        trusted = signing.parse_public_keys("\n".join(settings.coordinator_keys), "trust.coordinator_keys") \
            if settings.coordinator_keys else []
        self.signer = Signer(access.signing_key(settings), self.source, trusted)
        self.signer.key()  # a key that cannot be read stops the start: nothing could be signed
        self.admission = BatchAdmission(self.source, self.signer.verify_keys, settings.trust, settings.limits,
                                   self.azure.fold_feed if self.azure is not None else None, self.inbox.put,
                                   self.policy.subscriptions)
        self.gate = self.admission.gate
        api = settings.api.advertise or settings.api.url
        feed = settings.azure.feed if settings.azure is not None else None
        self.hubs = Hubs(settings.eventhub, feed, self.reach, self.admission.put, clients.consumer)
        self.alerts = AlertBook()  # what parts raise (view/alerts.py); output/alerting.py pages it
        self.lag = LagGuard(self.hubs.watches, self.policy.max_lag, self.alerts,  # no approval on a late fold
                            self.admission.backlog)  # nor while verification is behind
        container = clients.container(settings.storage)
        lease = Lease(container, settings.unit, settings.instance, api, settings.storage.lease_duration)
        self.election = LeaderElection(  # a new leader reads both hubs up to their ends before it acts
            lease, self.hubs.ends, self.reach["storage"], self.reach["hub-read"])
        self.keeper = Keeper(SnapshotBlob(container, settings.unit, settings.eventhub.label, self.signer.key,
                                       self.signer.verify_keys),
                             self.reach["storage"], settings.instance,
                             lambda: ensure_container(container, settings.storage.container), lease,
                             lambda state: evaluate(state, self.policy, time.time()))  # a pass's caches made
        self.messages = ApprovalMessages(clients.queues(settings.queues), self.signer,
                                         settings.queues.template, settings.queues.message_ttl)
        self.output = Output(HubProducer(settings.eventhub, self.source, clients.producer), self.messages,
                             self.source, self.election.may_act, self._lost, self._on_sent,
                             self.reach["hub-publish"], self.reach["queues"])
        self.queue_conflicts = QueueConflictLog()
        self.digests = Digest()
        self.gates = GateWatch(settings.gates, settings.azure, self.reach.get("arm"))

    # -- life -----------------------------------------------------------------------------------

    def run(self) -> int:
        self.keeper.load()  # creates the container first, off the loop
        if self.azure is not None:
            self.azure.start()
        self.gates.start()
        self.output.start()
        self.election.start()
        last_pass = last_prune = last_save = 0.0
        try:
            while not self.stop.is_set():
                self._fold_available(0.05)
                self.requests.serve()
                self._take_records()
                fed = self.azure is not None and self.azure.pump(self.state)  # Resource Graph's catch-ups
                if fed | self.admission.fetched(self.state) | self.gates.pump(self.state):  # each called
                    self._dirty = True
                loaded = self.keeper.poll()
                if loaded is not None:
                    self._install(loaded)
                if self._rebuild_term is not None and not self.keeper.loading():
                    self._rebuild()
                now = time.time()
                acting = self.acting()
                self._say_acting(acting)
                due = (self._dirty and now - last_pass >= PASS_EVERY) or now - last_pass >= PASS_AT_LEAST
                if acting and due:
                    self._decide(now)
                    last_pass = now
                if self._ready and now - last_prune >= PRUNE_EVERY:
                    self.admission.sweep(self.state)
                    pruned = prune(self.state, self.policy, now)
                    if pruned.vms or pruned.events or pruned.decisions:
                        log.info("pruned %d VM(s), %d event(s), %d decision(s)", pruned.vms, pruned.events,
                                 pruned.decisions)
                    last_prune = now
                interval = self.settings.storage.snapshot_interval
                if acting and now - last_save >= interval and self.output.idle() and self.keeper.can_save():
                    self.keeper.save(self.keeper.pack(self.state, self.positions))
                    last_save = now
        finally:
            self._shutdown()
        return 0

    def _install(self, loaded: Loaded) -> None:
        """The fold the keeper loaded (the snapshot's, or empty); read the hub on from its positions."""
        found = loaded.found
        if found is not None:
            log.info("fold restored from the snapshot written by %s at %s; reading on from %s",
                     found.instance, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(found.written_at)),
                     ", ".join(f"{p}:{pos.sequence}" for p, pos in sorted(loaded.positions.items())) or "-")
        elif not loaded.refused:  # a refused snapshot was said in one line already (ha/keeper.py)
            log.info("no snapshot: reading the hub from the start of its retention")
        self.admission.clear()  # what a reader that was closed still handed on
        self.inbox.clear()
        self.state, self.positions = loaded.state, loaded.positions
        self.lag.block(loaded.blocked)  # a rolled-back snapshot: no acting on what is read instead
        self.admission.gate.resume(self.state)  # what waited for a registration when it was saved
        self.hubs.start(self.positions)
        self._ready = True

    def _rebuild(self) -> None:
        """After decisions were dropped: the fold again from the snapshot and the hub (off the loop)."""
        term, self._rebuild_term = self._rebuild_term, None
        if term is None or term in self._rebuilt_terms:
            return
        self._rebuilt_terms.add(term)
        self._ready = False
        self.keeper.load(before=self.hubs.close)

    def _lost(self, term: int) -> None:
        self._rebuild_term = term

    def _shutdown(self) -> None:
        leading = self.election.term is not None
        self.output.close(15)
        if leading and self.output.idle() and not self.output.gave_up and self.acting():
            self.keeper.save_now(self.keeper.pack(self.state, self.positions), 20)
        self.election.stop(release=True)
        self.hubs.close()
        self.messages.queues.close()
        self.output.publisher.drop()
        self.admission.close()
        self.gates.close()
        if self.azure is not None:
            self.azure.close()

    # -- the fold -------------------------------------------------------------------------------

    def _fold_available(self, wait: float) -> None:
        for chunk in self.inbox.turn(wait):  # a turn's worth (input/inbox.py), then requests and the clock
            self._fold(chunk)
        index(self.state, self.policy)  # both kept as it folds (a catch-up too), module docstring
        self.digests.of(self.state)

    def _fold(self, batch: Batch) -> None:
        self.admission.fold(self.state, batch)
        if batch.events:
            self.positions[batch.partition] = batch.events[-1][1]
        self.last_input = batch.arrived
        self._dirty = True

    # -- deciding -------------------------------------------------------------------------------

    def acting(self) -> bool:
        term, gap = self.election.term, self.lag.check_gaps(self.positions)  # looked at first: it latches
        return (self._ready and self._rebuild_term is None and term is not None and not gap
                and self.election.may_act(term.number) and self.election.caught_up(self.positions)
                and not self.lag.unmeasured())

    def blocked(self) -> bool:
        """It holds the lease but a gap in its fold keeps it from acting (output/alerting.py says so)."""
        term = self.election.term
        return bool(self.lag.gap) and term is not None and self.election.may_act(term.number)

    def why_not(self) -> str:
        """Why this instance does not act now ("" when it does)."""
        if not self._ready or self._rebuild_term is not None:
            storage = self.reach["storage"]
            problem = f" ({storage.last_error})" if not storage.reachable else ""
            return f"it is loading the fold from the snapshot{problem}"
        gap = self.lag.check_gaps(self.positions)
        return f"the fold has a gap: {gap}" if gap else (self.election.why_not(self.positions)
                                                          or self.lag.unmeasured())

    def _say_acting(self, acting: bool) -> None:
        if acting == self._acting:
            return
        self._acting = acting
        term = self.election.term
        if acting and term is not None:
            log.info("this instance acts as the leader (term %d, %.1f s after it took the lease)",
                     term.number, time.monotonic() - term.began)
        elif not acting:
            log.warning("this instance stopped acting: %s", self.why_not() or "it no longer leads")

    def _decide(self, now: float) -> None:
        term = self.election.term
        if term is None:
            return
        trigger = self.last_input if self._dirty else None
        self._dirty = False
        self.evaluation = result = evaluate(self.state, self.policy, now, self.lag.stale(self.positions, now))
        for line in self.queue_conflicts.news(self.state, result.index):
            log.warning("%s", line)
        for decision in result.decisions:
            self._publish(decision, term.number, trigger)
        wanted = [self.state.decisions[i] for i in result.sends if i in self.state.decisions]
        self.output.want(wanted, term.number)

    def _publish(self, decision: Decision, term: int, trigger: float | None = None,
                 done: Future[Any] | None = None) -> str:
        """Fold ``decision``, then hand it to the output; the fold's outcome (published only when
        ``folded``: what would not fold here would not fold anywhere)."""
        outcome = fold_event(self.state, to_dict(decision, self.source), sender=OWN)
        extra = {"event_id": decision.event_id, "reason": decision.code}
        if outcome != FOLDED:
            log.error("%s %s not published: it does not fold (%s)", decision.kind, decision.id[:200],
                      outcome, extra=extra)
            return outcome
        self.decisions_made += decision.kind not in RECORDS  # records are logged where made
        over = [f"{u.scope} {u.with_event}/{u.max}" for u in decision.budgets if not u.fits]
        if decision.kind == "approve" and (over or decision.code == OVERRIDE):
            log.warning("%s %s OVERRIDES budgets (%s) on the word of %s: %s", decision.kind,
                        decision.subject, ", ".join(over) or "not counted", decision.actor,
                        decision.reason, extra=extra)
        elif decision.kind not in RECORDS:
            log.info("%s %s: %s", decision.kind, decision.subject, decision.reason, extra=extra)
        if self.azure is not None:  # an approval through ARM is acknowledged once published
            done = self.azure.once_published(self.state, decision, term, self.election.may_act, done)
        self.output.put(Outgoing(decision, term, trigger, done))
        return outcome

    def _on_sent(self, approval: Approval, queue_name: str, when: float, term: int) -> None:
        """From the sending thread: an approval's message is in its queue (recorded on the loop)."""
        self.records.put((approval.id, partial(sent, queue=queue_name, when=when), term))

    def _take_records(self) -> None:
        """Publish the records of what came of approvals (``sent``, ``acknowledge``) while the term
        they were made in lasts and this instance acts (output/queue_sender.py says what follows)."""
        while True:
            try:
                approval_id, make, term = self.records.get_nowait()
            except queue.Empty:
                return
            approval = self.state.decisions.get(approval_id)
            if approval is not None and self._ready and self.election.may_act(term):
                self._publish(make(approval), term)
            else:  # a sent record is reported again once this instance acts again
                self.output.sending.unreported(approval_id)

    # -- requests from the API (run on this thread: input/requests.py) -------------------------

    def control(self, make: Callable[[FleetState, float], Decision]) -> tuple[Decision, Future[Any]]:
        """Make a control decision (on this thread) and publish it; it, and the future of its publication."""
        if not self.acting():
            holder, why = self.election.holder, self.why_not()
            if (self.election.term is None and self._ready and holder is not None and holder.api
                    and self.reach["storage"].reachable):
                raise NotLeading(f"this instance ({self.settings.instance}) is a standby ({why}); send "
                                 f"control requests to the leader ({holder.instance} at {holder.api})",
                                 holder.api)
            raise NotLeading(f"this instance ({self.settings.instance}) cannot act now: {why}; "
                             "try again in a few seconds")
        term = self.election.term
        assert term is not None
        decision = make(self.state, time.time())
        published: Future[Any] = Future()
        outcome = self._publish(decision, term.number, None, published)
        if outcome != FOLDED:
            raise ControlRefused("not-folded", f"the {decision.kind} of {decision.subject[:100]} would not "
                                 f"fold ({outcome}), so it was not published and nothing changed")
        self._dirty = True  # an approve-now wants its message at the next pass
        return decision, published

    def status(self, all_scopes: bool = False, decisions: int = 50) -> dict[str, Any]:
        now = time.time()
        result = status(self.state, self.policy, now, evaluate(self.state, self.policy, now, self.lag.reason),
                        decisions_limit=decisions, all_scopes=all_scopes)
        result["service"] = self.describe()
        return result

    def describe(self) -> dict[str, Any]:
        """The ``service`` member of ``status`` and ``/v1/state``."""
        return {**self.stats().as_data(), "shard": self.settings.shard and self.settings.shard.as_data()}

    # -- what observe.py renders (stats.py) -------------------------------------------------------

    def health(self) -> Health:
        """What the parts record now (read off the loop: never the fold's contents)."""
        acting = self.acting()
        return Health(
            self.election.role(acting), self.election.term is not None, acting,
            "" if acting else self.why_not(), len(self.state.vms),
            {p: pos.sequence for p, pos in list(self.positions.items())},
            tuple((r.failing_for(), r.line()) for r in self.reach.values() if not r.reachable),
            self.output.unsigned, self.lag.reason if acting else "", self.lag.gap)

    def stats(self) -> Stats:
        """Every counter and size, on the service thread (``submit``)."""
        acting, state = self.acting(), self.state
        return Stats(
            self.settings.unit, self.settings.instance, self.source, self.election.role(acting),
            self.election.term is not None, acting, "" if acting else self.why_not(),
            self.election.leader(self.settings.instance),
            {p: pos.sequence for p, pos in sorted(self.positions.items())}, self.admission.counts(state),
            self.output.counts(), self.decisions_made, len(state.vms), len(state.open_events),
            len(state.identities), None if self.last_input is None else time.monotonic() - self.last_input,
            {name: Reachability(r.reachable, r.failures, r.overdue, r.last_success, r.as_data())
             for name, r in self.reach.items()},
            self.azure.describe() if self.azure is not None else None,
            self.lag.lags, self.lag.reason, self.lag.gap)

    def fleet_stats(self) -> FleetStats:
        """What costs a pass over the fleet (``/metrics`` only), on the service thread."""
        counts = dict(self.azure.counts) if self.azure is not None else None
        return fleet_stats(self.state, self.policy, counts, time.time())

    def digest(self) -> str:
        """The fold's digest (view/digest.py), on the service thread: what changed since the last pass."""
        return self.digests.of(self.state)
