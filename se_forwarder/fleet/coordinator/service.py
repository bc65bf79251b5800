"""The coordinator service: the fold kept warm from the hub, decisions made while leading.

One thread (``run``) owns the fold. It folds what the hub reader hands it, carries out control
requests, and, while this instance leads and has caught up (leader.py), runs a decision pass
whenever new input arrived (at most every 50 ms) and at least once a second (the clock matters:
echo timeouts, min_healthy, heartbeats going stale). Each decision is folded at once and handed
to the output (output.py), which publishes it and then sends its approval message. Every minute
it prunes; while leading, every ``snapshot_interval`` and at a clean stop it saves the fold with
the positions it covers (blobs.py), when nothing is waiting to be published.

Azure's input (``[azure]``, azure_input.py): the Azure feed hub is read beside the agents' hub into
the same inbox, its positions kept with theirs; the Resource Graph catch-ups and the outcomes of
``acknowledge`` come back from their own threads and are folded on this one. An approval through
ARM (``Via: "arm"``) is acknowledged once it is published, and what Azure answered is published as
an ``acknowledge`` decision.

Input rules: every event read from the hub passes trust.py first (``_fold``): agent CloudEvents,
and this coordinator's own decisions when signed by a trusted key, are folded; decisions of
another coordinator name (``foreign``: a shadow coordinator under its own name can watch the same
hub as a live one) and forgeries (``forged``) are counted by reason and dropped. The decisions
this instance makes are folded as it makes them, before they are signed and published (output.py).

A standby folds the same input and makes no decision. Control requests that change something are
refused on a standby with the leader's address (``NotLeading``): a standby's fold may lag the
leader's, and the sequence numbers of pause/hold decisions come from the fold, so only the leader
can number them safely.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ...approvals import signing
from ...errors import SeForwarderError, StateError
from . import access, trust
from .azure_input import AzureInput
from .blobs import Lease, Snapshots
from .control import OVERRIDE, ControlRefused
from .decide import Evaluation, evaluate
from .events import Decision, to_dict
from .fold import FOLDED, FoldStats, fold_event
from .hub import Batch, HubPublisher, HubReader, Position, partition_ends
from .leader import Leadership
from .output import Outgoing, Output
from .queues import QueueConflictLog
from .retention import prune
from .sender import Sender, Signer
from .service_config import ServiceSettings
from .snapshot import restore, snapshot
from .state import FleetState
from .view import status

log = logging.getLogger("se_forwarder.coordinator")

PASS_EVERY = 0.05  # s between decision passes while input keeps arriving
PASS_AT_LEAST = 1.0  # s: a pass at least this often while leading
PRUNE_EVERY = 60.0
MAX_FOLD_PER_TURN = 20_000  # events folded before the loop looks at requests and the clock again


class NotLeading(SeForwarderError):
    """This instance does not lead (or has not caught up): the leader's API address, if known."""

    def __init__(self, message: str, leader: str = "") -> None:
        super().__init__(message)
        self.leader = leader


class Service:
    def __init__(self, settings: ServiceSettings, stop: threading.Event) -> None:
        self.settings, self.policy, self.stop = settings, settings.policy, stop
        self.source = settings.source
        self.state, self.stats = FleetState(), FoldStats()
        self.positions: dict[str, Position] = {}
        self.refused: Counter[str] = Counter()  # trust.py's reason code -> events dropped
        self.not_cloudevents = 0
        self._forged_said = 0.0  # monotonic: when the next forged decision may be logged
        self.inbox: queue.Queue[Batch] = queue.Queue(maxsize=1000)
        self.requests: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self.evaluation: Evaluation | None = None
        self.last_input: float | None = None  # monotonic arrival of the newest folded batch
        self.decisions_made = 0
        self._dirty = False
        self._rebuild_term: int | None = None
        self._rebuilt_terms: set[int] = set()
        self.started = time.monotonic()
        trusted = signing.parse_public_keys("\n".join(settings.coordinator_keys), "trust.coordinator_keys") \
            if settings.coordinator_keys else []
        self.signer = Signer(settings.key_file, self.source, trusted)
        self.signer.key()  # a key that cannot be read stops the start: nothing could be signed
        container = access.container(settings.storage)
        self.container = container
        self.snapshots = Snapshots(container, settings.name, self._hub_label(), self.signer.key,
                                   self.signer.verify_keys)
        api = settings.api.advertise or settings.api.url
        self.azure = AzureInput(settings.azure) if settings.azure is not None else None
        self.leadership = Leadership(  # a new leader acts once it read both hubs up to their ends
            Lease(container, settings.name, settings.instance, api, settings.storage.lease_duration),
            lambda: {**partition_ends(settings.eventhub), **(self.azure.ends() if self.azure else {})})
        self.sender = Sender(access.Queues(settings.queues), self.signer, settings.queues.template,
                             settings.queues.message_ttl)
        self.output = Output(HubPublisher(settings.eventhub, partition_key=self.source), self.sender,
                             self.source, self.leadership.may_act, self._lost)
        self.reader: HubReader | None = None
        self.last_snapshot: tuple[float, int] | None = None  # (time, bytes)
        self.queue_conflicts = QueueConflictLog()

    # -- life -----------------------------------------------------------------------------------

    def _hub_label(self) -> str:
        hub = self.settings.eventhub
        return f"{hub.namespace or '(connection string)'}/{hub.eventhub}/{hub.consumer_group}"

    def run(self) -> int:
        self._ensure_container()
        self._load()
        if self.azure is not None:
            self.azure.start()
        self.output.start()
        self.leadership.start()
        last_pass = last_prune = last_save = 0.0
        try:
            while not self.stop.is_set():
                self._fold_available(0.05)
                self._serve_requests()
                self._take_azure()
                if self._rebuild_term is not None:
                    self._rebuild()
                now = time.time()
                acting = self.acting()
                due = (self._dirty and now - last_pass >= PASS_EVERY) or now - last_pass >= PASS_AT_LEAST
                if acting and due:
                    self._decide(now)
                    last_pass = now
                if now - last_prune >= PRUNE_EVERY:
                    pruned = prune(self.state, self.policy, now)
                    if pruned.vms or pruned.events or pruned.decisions:
                        log.info("pruned %d VM(s), %d event(s), %d decision(s)", pruned.vms, pruned.events,
                                 pruned.decisions)
                    last_prune = now
                interval = self.settings.storage.snapshot_interval
                if acting and now - last_save >= interval and self.output.idle():
                    self._save()
                    last_save = now
        finally:
            self._shutdown()
        return 0

    def _ensure_container(self) -> None:
        from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError

        try:
            self.container.create_container()
        except ResourceExistsError:
            pass
        except HttpResponseError as exc:
            if exc.status_code not in (403, 409):  # no right to create it: it must exist then
                raise SeForwarderError(f"storage container {self.settings.storage.container}: "
                                       f"{exc.message or exc}") from None
        except AzureError as exc:
            raise SeForwarderError(f"storage container {self.settings.storage.container}: "
                                   f"{str(exc).splitlines()[0][:300]}") from None

    def _load(self) -> None:
        """The fold from the last snapshot (or empty), and the hub read on from its positions."""
        refused = False
        try:
            found = self.snapshots.load()
            restored = restore(found.state) if found is not None else None
        except StateError as exc:  # one line: what is wrong with it, and what happens instead
            log.error("%s; reading the hub from the start of its retention instead", exc)
            found = restored = None
            refused = True
        if found is not None and restored is not None:
            self.state = restored
            self.positions = dict(found.positions)
            log.info("fold restored from the snapshot written by %s at %s; reading on from %s",
                     found.instance, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(found.written_at)),
                     ", ".join(f"{p}:{pos.sequence}" for p, pos in sorted(self.positions.items())) or "-")
        else:
            self.state, self.positions = FleetState(), {}
            if not refused:
                log.info("no snapshot: reading the hub from the start of its retention")
        self.reader = HubReader(self.settings.eventhub, self.positions, self.inbox.put)
        self.reader.start()
        if self.azure is not None:
            self.azure.read_feed(self.positions, self.inbox.put)

    def _rebuild(self) -> None:
        term, self._rebuild_term = self._rebuild_term, None
        if term is None or term in self._rebuilt_terms:
            return
        self._rebuilt_terms.add(term)
        if self.reader is not None:
            self.reader.close()
        while not self.inbox.empty():
            self.inbox.get_nowait()
        self._load()

    def _lost(self, term: int) -> None:
        self._rebuild_term = term

    def _shutdown(self) -> None:
        leading = self.leadership.term is not None
        self.output.close(15)
        if leading and self.output.idle() and self.acting():
            self._save()
        self.leadership.stop(release=True)
        if self.reader is not None:
            self.reader.close()
        self.sender.queues.close()
        self.output.publisher.drop()
        if self.azure is not None:
            self.azure.close()

    # -- the fold -------------------------------------------------------------------------------

    def _fold_available(self, wait: float) -> None:
        try:
            batch = self.inbox.get(timeout=wait)
        except queue.Empty:
            return
        folded = 0
        while True:
            self._fold(batch)
            folded += len(batch.events)
            if folded >= MAX_FOLD_PER_TURN:
                return
            try:
                batch = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _fold(self, batch: Batch) -> None:
        if self.azure is not None and self.azure.is_feed(batch):
            self.azure.fold_feed(self.state, batch)
            self.positions[batch.partition] = batch.events[-1][1]
            self.last_input, self._dirty = batch.arrived, True
            return
        keys = self.signer.verify_keys()
        for event, position in batch.events:
            if event is None:
                self.not_cloudevents += 1
            else:
                verdict = trust.check(event, source=self.source, keys=keys)
                if verdict.trusted:
                    fold_event(self.state, event, self.stats, self.settings.limits, position.enqueued)
                else:
                    self.refused[verdict.code or ""] += 1
                    if verdict.code == trust.FORGED and time.monotonic() >= self._forged_said:
                        self._forged_said = time.monotonic() + 60  # one line a minute at most
                        log.warning("dropped a forged decision (%d so far), %s %s: %s",
                                    self.refused[trust.FORGED], str(event.get("type"))[:80],
                                    str(event.get("id"))[:120], verdict.detail)
            self.positions[batch.partition] = position
        self.last_input = batch.arrived
        self._dirty = True

    # -- deciding -------------------------------------------------------------------------------

    def acting(self) -> bool:
        term = self.leadership.term
        return (term is not None and self.leadership.may_act(term.number)
                and self.leadership.caught_up(self.positions))

    def _decide(self, now: float) -> None:
        term = self.leadership.term
        if term is None:
            return
        trigger = self.last_input if self._dirty else None
        self._dirty = False
        self.evaluation = result = evaluate(self.state, self.policy, now)
        for line in self.queue_conflicts.news(self.state, result.index):
            log.warning("%s", line)
        for decision in result.decisions:
            self._publish(decision, term.number, trigger)

    def _publish(self, decision: Decision, term: int, trigger: float | None = None,
                 done: Future[Any] | None = None) -> str:
        """Fold ``decision``, then hand it to the output; the fold's outcome (published only when
        ``folded``: what would not fold here would not fold anywhere)."""
        outcome = fold_event(self.state, to_dict(decision, self.source))
        extra = {"event_id": decision.event_id, "reason": decision.code}
        if outcome != FOLDED:
            log.error("%s %s not published: it does not fold (%s)", decision.kind, decision.id[:200],
                      outcome, extra=extra)
            return outcome
        self.decisions_made += 1
        over = [f"{u.scope} {u.with_event}/{u.max}" for u in decision.budgets if not u.fits]
        if decision.kind == "approve" and (over or decision.code == OVERRIDE):
            log.warning("%s %s OVERRIDES budgets (%s) on the word of %s: %s", decision.kind,
                        decision.subject, ", ".join(over) or "not counted", decision.actor,
                        decision.reason, extra=extra)
        else:
            log.info("%s %s: %s", decision.kind, decision.subject, decision.reason, extra=extra)
        if self.azure is not None:
            done = self.azure.once_published(self.state, decision,
                                             lambda: self.leadership.may_act(term), done)
        self.output.put(Outgoing(decision, term, trigger, done))
        return outcome

    def _take_azure(self) -> None:
        """Fold Azure's catch-ups; publish what acknowledge answered while acting (azure_input.py)."""
        term = self.leadership.term
        publish = (lambda d: self._publish(d, term.number)) if term is not None and self.acting() else None
        if self.azure is not None and self.azure.pump(self.state, publish):
            self._dirty = True

    # -- snapshots ------------------------------------------------------------------------------

    def _save(self) -> None:
        try:
            size = self.snapshots.save(snapshot(self.state), self.positions, self.settings.instance)
        except Exception as exc:  # noqa: BLE001 - the next one may work; the hub still has everything
            log.warning("snapshot not saved: %s", str(exc).splitlines()[0][:300] if str(exc) else exc)
            return
        self.last_snapshot = (time.time(), size)
        log.debug("snapshot saved (%d bytes)", size)

    def digest(self) -> str:
        text = json.dumps(snapshot(self.state), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    # -- requests from the API (run on this thread) ---------------------------------------------

    def submit(self, func: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.requests.put((func, future))
        return future

    def _serve_requests(self) -> None:
        while True:
            try:
                func, future = self.requests.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(func())
            except Exception as exc:  # noqa: BLE001 - handed to the API, which answers with it
                future.set_exception(exc)

    def control(self, make: Callable[[FleetState, float], Decision]) -> Future[Any]:
        """Make a control decision (on this thread) and publish it; the future of its publication."""
        if not self.acting():
            holder = self.leadership.holder
            if self.leadership.term is not None:
                raise NotLeading("this instance leads but is still reading the hub up to its end; "
                                 "try again in a few seconds")
            where = f" ({holder.instance} at {holder.api})" if holder and holder.api else ""
            raise NotLeading(f"this instance ({self.settings.instance}) is a standby; send control "
                             f"requests to the leader{where}", holder.api if holder else "")
        term = self.leadership.term
        assert term is not None
        decision = make(self.state, time.time())
        published: Future[Any] = Future()
        outcome = self._publish(decision, term.number, None, published)
        if outcome != FOLDED:
            raise ControlRefused("not-folded", f"the {decision.kind} of {decision.subject[:100]} would not "
                                 f"fold ({outcome}), so it was not published and nothing changed")
        return published

    def status(self, all_scopes: bool = False, decisions: int = 50) -> dict[str, Any]:
        now = time.time()
        result = status(self.state, self.policy, now, evaluate(self.state, self.policy, now),
                        decisions_limit=decisions, all_scopes=all_scopes)
        result["service"] = self.describe()
        return result

    @property
    def role(self) -> str:
        if self.leadership.term is not None:
            return "leader" if self.acting() else "leader (catching up)"
        return "standby" if self.leadership.stepped else "starting"

    def describe(self) -> dict[str, Any]:
        holder = None if self.leadership.term is not None else self.leadership.holder
        return {
            "name": self.settings.name, "instance": self.settings.instance, "role": self.role,
            "acting": self.acting(), "source": self.source,
            "leader": ({"instance": self.settings.instance, "api": self.leadership.lease.api}
                       if self.leadership.term is not None
                       else {"instance": holder.instance, "api": holder.api} if holder else None),
            "positions": {p: pos.sequence for p, pos in sorted(self.positions.items())},
            "folded": sum(self.stats.folded.values()),
            "skipped": sum(self.stats.skipped.values()) + self.not_cloudevents,
            "refused": {code: self.refused[code] for code in trust.REASON_CODES},
            "decisionsMade": self.decisions_made,
            "azure": self.azure.describe() if self.azure is not None else None,
        }
