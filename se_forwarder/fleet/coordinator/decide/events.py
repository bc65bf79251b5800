"""Decisions, and their CloudEvents: the one place that knows the coordinator's event schema.

Every decision is published to the hub (so every instance folds it) and read by people's tools:
the Teams/Slack formatter and the fleet page render them. Built with the ``cloudevents`` SDK.

Attributes:

=================  ================================================================================
``type``           ``com.azure.scheduledevents.coordinator.<kind>``, kind one of ``approve``,
                   ``sent``, ``defer``, ``breach``, ``pause``, ``resume``, ``hold``, ``release``,
                   ``acknowledge`` (what Azure answered an approval through ARM: decide/arm_path.py),
                   ``confirm`` (an operator confirmed where VMs are: decide/control.py)
``id``             deterministic, so the same decision made from the same fold by any instance has
                   the same id (and is folded once): ``<EventId>/coordinator/approve/<attempt>``,
                   ``<EventId>/coordinator/sent/<attempt>``,
                   ``<EventId>/coordinator/defer/<n>-<ReasonCode>``,
                   ``<EventId>/coordinator/breach/<12 hex of SHA-256 of the sorted scopes>``,
                   ``<EventId>/coordinator/hold|release/<Sequence>``,
                   ``<EventId>/coordinator/approve/<attempt>/acknowledge``,
                   ``coordinator/pause|resume/<scope>/<Sequence>``,
                   ``coordinator/confirm/<scope>/<16 hex of SHA-256 of the VMs and placements>``
``source``         the coordinator (one name for all its instances, given by the service)
``subject``        the EventId; the scope for ``pause``/``resume``/``confirm``
``time``           when the decision was made (UTC); ``sent``: when the message was in the queue;
                   ``acknowledge``: when Azure answered (or the call ended unanswered)
``eventtype``      extension: the event's EventType, when there is an event
``keyid``          extension: 16 hex of SHA-256 of the raw public key of the coordinator's key
``signature``      extension: base64 Ed25519 signature over every other member (``signed``)
=================  ================================================================================

``keyid`` and ``signature`` follow approvals/signing.py to the byte (docs/coordinator.md, "Decision
signatures"):
the signature covers every attribute and ``data`` in canonical JSON, so no member can be changed,
added or removed. trust.py lets a decision into the fold only when it verifies.

``data`` (``application/json``), every member always present (null when it does not apply):

=================  ================================================================================
``Decision``       the kind, as in ``type``
``EventId``        the EventId (null for pause/resume)
``EventType``      Reboot, Redeploy, ... as the agents reported it
``EventSource``    Platform or User
``NotBeforeUtc``   RFC 3339
``Resources``      the event's Resources (VM names), as reported
``Affected``       [{``name``, ``vmId``, ``group``}] the VMs those names resolved to
``Target``         approve, sent and acknowledge: {``name``, ``vmId``, ``group``}, the watched
                   affected VM whose queue gets the signed approval message; with ``Via: "arm"`` the
                   resource the event is filed under (its VM or scale set, ``vmId`` empty)
``Via``            approve and acknowledge: ``queue`` (a message to the target's agent) or ``arm``
                   (the Maintenance ``acknowledge``, when no affected VM has a watched agent:
                   decide/arm_path.py); null for the other kinds (an approval through ``arm`` has no
                   ``sent`` record: its ``acknowledge`` says what came of it)
``ReasonCode``     see decide/evaluate.py (approve: ``fits``, ``approve-now``, ``approve-now-override``
                   (a person exceeded a budget), ``retry-no-echo``, ``retry-rejected``; defer:
                   ``too-early`` ... ``budget``; ``breach``; control: ``pause``, ``resume``,
                   ``hold``, ``release``; ``sent``; acknowledge: what Azure answered, one of
                   azure_paths.OUTCOMES)
``Reason``         one short sentence for people ("group:... would have 2 unavailable, max 1")
``Actor``          ``coordinator`` for its own decisions, else who acted (as the service names
                   them, e.g. ``person:alice``)
``Budgets``        [{``scope``, ``kind``, ``size``, ``used``, ``withEvent``, ``max``}] for every
                   budgeted scope holding an affected VM, in ``[[budgets]]`` order: ``size`` = VMs in
                   the scope, ``used`` = unavailable VMs when deciding (earlier approvals of the
                   same pass included), ``withEvent`` = counting this event's VMs too (what is
                   compared with ``max``, the limit). ``breach``: only the scopes it breaches, with
                   ``withEvent`` = the event's own VMs there. ``pause``/``resume``: the scope itself
                   when it has a budget. Other decisions without affected VMs: []
``Shadow``         true when made in shadow mode (nothing is sent for it)
``Attempt``        approve: 1, 2, ... (each is one message; a retry goes to the next affected VM);
                   sent: the attempt whose message was queued; else null
``Scope``          pause/resume: the scope (``fleet`` = everything); defer: the scope behind the
                   reason (``paused``, ``queued``, ``budget``), else null; breach: the first
                   breached scope
``Sequence``       pause/resume/hold/release: 1, 2, ... per scope or event, each exactly one more
                   than the current one, at most 2^53 (switches.py)
``Overrides``      approve-now: the scopes (or kinds, or ``all``) whose budget the person chose to
                   exceed, kept by its retries ([] otherwise)
``Confirmed``      confirm: [{``vm``: its key, ``placement``: [subscription, resource group,
                   location, zone, scale set, fault domain, update domain, [[tag, value], ...]]}]
                   each VM whose placement a person confirmed (fold/inventory.py); null otherwise
=================  ================================================================================

The service sends an approval message for each ``approve`` that is not ``Shadow`` and goes
through a queue (``Via: "queue"``), to ``Target``'s queue, with the message ``id`` equal to the
decision ``id``: an agent processes a message id once, so an approval sent by two instances (a
leader change) is carried out once. An approval with ``Via: "arm"`` gets no message: the
coordinator acknowledges the event through ARM, and publishes what Azure answered as an
``acknowledge`` decision (decide/arm_path.py).

``sent`` is not a decision but a record of one: published after the approval's message was put in
its queue (``sent(approval, queue, when)``), with the approval's ``EventId``, ``EventType``,
``Target`` and ``Attempt`` (``Resources``, ``Affected`` and ``Budgets`` empty, ``Reason`` naming the
queue). It is signed and verified like every decision (``signed``, trust.py): a forged ``sent``
would keep an approval's message from ever being sent. Every instance folds it, so each knows that
the message went out and when: the "no echo" retry counts ``echo_timeout`` from then, and an
approval without one is sent (again, under the same message id) by whichever instance leads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from ....approvals import signing
from ....timestamps import rfc3339
from ..fold import inventory
from ..fold.state import DecisionRecord, Placement
from ..schema import DECISION_PREFIX

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

COORDINATOR = "coordinator"  # Actor of the coordinator's own decisions
_FORMAT = JSONFormat()


# Decisions and their parts are named tuples: a pass after a burst makes tens of thousands, and a
# tuple is made in a fraction of a frozen dataclass's time (one ``object.__setattr__`` per field).
class VmRef(NamedTuple):
    name: str
    vm_id: str
    group: str

    def as_data(self) -> dict[str, str]:
        return {"name": self.name, "vmId": self.vm_id, "group": self.group}


class BudgetUse(NamedTuple):
    scope: str
    kind: str
    size: int
    used: int
    with_event: int
    max: int

    @property
    def fits(self) -> bool:
        return self.with_event <= self.max

    def as_data(self) -> dict[str, Any]:
        return {"scope": self.scope, "kind": self.kind, "size": self.size, "used": self.used,
                "withEvent": self.with_event, "max": self.max}


def overridden(use: BudgetUse, overrides: Sequence[str]) -> bool:
    """A person chose to exceed this budget: its scope, its kind (``zone``) or ``all`` is named."""
    return "all" in overrides or use.scope in overrides or use.kind in overrides


def inherited(last: DecisionRecord) -> tuple[str, ...]:
    """The ``Overrides`` of an approval (a person's approve-now), which its retries keep."""
    values = last.data.get("Overrides")
    return tuple(v for v in values if isinstance(v, str)) if isinstance(values, list) else ()


class Decision(NamedTuple):
    """One decision; ``data()`` is its CloudEvent data (module docstring)."""

    kind: str
    id: str
    subject: str
    time: float
    code: str
    reason: str
    actor: str = COORDINATOR
    shadow: bool = False
    event_id: str | None = None
    event_type: str | None = None
    event_source: str | None = None
    not_before: float | None = None
    resources: tuple[str, ...] = ()
    affected: tuple[VmRef, ...] = ()
    target: VmRef | None = None
    budgets: tuple[BudgetUse, ...] = ()
    attempt: int | None = None
    scope: str | None = None
    sequence: int | None = None
    overrides: tuple[str, ...] = ()
    via: str | None = None  # approve: "arm" for an approval through acknowledge, else a queue message
    confirmed: tuple[tuple[str, Placement], ...] | None = None  # confirm: (VM key, placement) each

    def data(self) -> dict[str, Any]:
        return {
            "Decision": self.kind,
            "EventId": self.event_id,
            "EventType": self.event_type or None,
            "EventSource": self.event_source or None,
            "NotBeforeUtc": None if self.not_before is None else _utc(self.not_before),
            "Resources": list(self.resources),
            "Affected": [vm.as_data() for vm in self.affected],
            "Target": self.target.as_data() if self.target else None,
            "ReasonCode": self.code,
            "Reason": self.reason,
            "Actor": self.actor,
            "Budgets": [use.as_data() for use in self.budgets],
            "Shadow": self.shadow,
            "Attempt": self.attempt,
            "Scope": self.scope,
            "Sequence": self.sequence,
            "Overrides": list(self.overrides),
            "Via": self.via or ("queue" if self.kind == "approve" else None),
            "Confirmed": None if self.confirmed is None else
            [{"vm": key, "placement": inventory.as_data(where)} for key, where in self.confirmed],
        }


def sent(approval: DecisionRecord, queue: str, when: float) -> Decision:
    """The record that the message of ``approval`` (an approve) went into ``queue`` at ``when``."""
    data = approval.data
    target: dict[str, Any] = data["Target"] if isinstance(data.get("Target"), dict) else {}
    event_id = str(data.get("EventId"))
    return Decision(
        kind="sent", id=f"{event_id}/coordinator/sent/{approval.attempt}", subject=event_id, time=when,
        code="sent", reason=f"approval {approval.id} put in queue {queue}", event_id=event_id,
        event_type=_text(data.get("EventType")), event_source=_text(data.get("EventSource")),
        target=VmRef(str(target.get("name") or ""), str(target.get("vmId") or ""),
                     str(target.get("group") or "")),
        attempt=approval.attempt,
    )


# What came of an approval, handed to the service's loop from another thread: the approval's id,
# its record made from the approval (``sent``, azure_paths.acknowledged) and the term it belongs to.
Recorded = tuple[str, Callable[[DecisionRecord], "Decision"], int]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# A pass's decisions share its time and a few NotBefores: each written once.
@lru_cache(maxsize=1024)
def _utc(moment: float) -> str:
    return rfc3339(moment)


@lru_cache(maxsize=1024)
def _when(moment: float) -> datetime:
    return datetime.fromtimestamp(moment, UTC)


@lru_cache(maxsize=1024)
def _when_text(moment: float) -> str:
    """``time`` in a decision's dict as the SDK writes it (``Z`` for +00:00)."""
    return _when(moment).isoformat().removesuffix("+00:00") + "Z"


def _attributes(decision: Decision, source: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "type": DECISION_PREFIX + decision.kind,
        "source": source,
        "id": decision.id,
        "subject": decision.subject,
        "time": _when(decision.time),
        "datacontenttype": "application/json",
    }
    if decision.event_type:
        attributes["eventtype"] = decision.event_type
    return attributes


def to_cloudevent(decision: Decision, source: str) -> CloudEvent:
    """The decision as a CloudEvent from ``source`` (the coordinator's name, the same on every
    instance, e.g. ``urn:se-forwarder:coordinator:prod``)."""
    return CloudEvent(_attributes(decision, source), decision.data())


def to_json(decision: Decision, source: str) -> str:
    """Structured-mode JSON text, as published to the hub."""
    return _FORMAT.write(to_cloudevent(decision, source)).decode("utf-8")


def to_dict(decision: Decision, source: str) -> dict[str, Any]:
    """The structured-mode dict the fold reads (what comes back from the hub, less the signature):
    ``json.loads(to_json(...))`` made without the text (the SDK writes ``time`` with ``Z`` for
    +00:00; ``data`` holds JSON's own types only), as the service folds every decision it makes."""
    attributes = _attributes(decision, source)
    attributes["time"] = _when_text(decision.time)
    return {**attributes, "data": decision.data()}


def signed(decision: Decision, source: str, key: Ed25519PrivateKey) -> dict[str, Any]:
    """The decision as published: ``to_dict`` with ``keyid`` and ``signature`` made with ``key``."""
    return signing.sign(to_dict(decision, source), key)
