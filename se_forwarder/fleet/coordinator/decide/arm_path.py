"""Approval without an agent: the path through the Maintenance ``acknowledge``, and its audit. Pure.

An approval goes to the queue of a watched affected VM's agent whenever there is one (decide/evaluate.py).
When no affected VM has a watched agent, ``[azure] acknowledge = true`` and Azure reported the
event (so its ARM id is known) and still shows it Scheduled, the approval's target is ARM: an
``approve`` decision with ``Via: "arm"`` and, as ``Target``, the resource the event is filed under
(the VM, or the scale set). It is published like any approval, through the same budgets and
checks, and only then carried out: the coordinator POSTs
``<the event's ARM id>/acknowledge?api-version=2025-11-01`` with its own identity (azure/acknowledge.py).

Such an approval gets no queue message (it is never in decide/evaluate.py's ``sends``, and has no ``sent``
record). What Azure answered is published as a signed record of kind ``acknowledge`` (id ``<the
approval's id>/acknowledge``, ``ReasonCode`` one of ``OUTCOMES``), which every instance folds
(azure_fold.fold_acknowledged): ``approved`` is the event's echo from ARM; ``forbidden`` (403),
``unauthorized`` (401), ``not-found`` (404) and ``refused`` (any other 4xx) are a rejection of that
approval by ARM, after which the decision pass tries the next path (a watched agent, if one came
back) or defers with ``no-target``; ``failed`` (no answer by the deadline, 429 after the retries,
5xx) changes nothing: the approval is retried after ``echo_timeout`` like one that got no echo.
That timeout counts from the ``acknowledge`` record as it counts from a message's ``sent`` one
(``went_out``), or from the approval itself when no record came (the instance that made it
stopped leading first).
"""

from __future__ import annotations

from ....backoff import Backoff
from ..config.policy import Policy
from ..fold.azure import SUFFIX
from ..fold.azure_state import EVENT_ARM_ID
from ..fold.state import SCHEDULED, DecisionRecord, EventRecord, FleetState
from .events import Decision, VmRef
from .ownership import subscription_owned
from .scopes import ScopeIndex

VIA_ARM = "arm"
ACK_API_VERSION = "2025-11-01"
OUTCOMES = ("approved", "forbidden", "disallowed-by-policy", "unauthorized", "not-found", "refused",
            "failed")
RETRIED = ("forbidden", "disallowed-by-policy")  # 403s: a role or a policy, which may change
RETRY = Backoff(steps=(30.0, 60.0, 120.0, 240.0, 300.0))  # s after the nth refusal in a row


def arm_target(state: FleetState, policy: Policy, idx: ScopeIndex, record: EventRecord,
               vms: tuple[str, ...]) -> VmRef | None:
    """The ARM target of an approval of ``record`` (module docstring), or None when that path is closed."""
    event = state.azure.events.get(record.key)
    if not policy.acknowledge or event is None or event.rank != SCHEDULED or not event.resource_id \
            or not subscription_owned(policy, event.subscription):
        return None
    found = EVENT_ARM_ID.match(event.resource_id)
    if found is None:
        return None
    return VmRef(found["owner"], "", idx.group_of.get(vms[0], "") if vms else "")


def went_out(state: FleetState, record: EventRecord, last: DecisionRecord | None) -> DecisionRecord | None:
    """The record that approval ``last`` of ``record`` went out: its ``sent`` one, or through ARM
    its ``acknowledge`` one; None while there is none (decide/evaluate.py's echo timeout counts from it)."""
    if last is None:
        return None
    if last.data.get("Via") == VIA_ARM:
        return state.decisions.get(last.id + SUFFIX)
    return record.sends.get(last.attempt)


def refused_in_a_row(state: FleetState, record: EventRecord) -> tuple[int, DecisionRecord | None]:
    """How many approvals of ``record`` through ARM in a row, up to its last one, ARM refused with a
    403 (``RETRIED``), and the ``acknowledge`` record of the latest of them."""
    count, latest = 0, None
    for attempt in sorted(record.approvals, reverse=True):
        approval = record.approvals[attempt]
        answer = state.decisions.get(approval.id + SUFFIX) if approval.data.get("Via") == VIA_ARM else None
        if answer is None or answer.code not in RETRIED:
            break
        count, latest = count + 1, latest or answer
    return count, latest


def next_try(state: FleetState, record: EventRecord) -> float | None:
    """When an approval of ``record`` that ARM refused with a 403 goes through ``acknowledge`` again
    (module docstring), or None when its last approval was not so refused."""
    count, latest = refused_in_a_row(state, record)
    return None if latest is None else latest.time + RETRY.delay(count)


def waiting(last: DecisionRecord | None, out: DecisionRecord | None) -> str:
    """What an approval without an echo waits for, in words (its verdict's reason)."""
    if last is not None and last.data.get("Via") == VIA_ARM:
        return f"acknowledged, ARM answered {out.code}" if out is not None else "acknowledge not answered yet"
    return "sent, waiting for the echo" if out is not None else "its message not sent yet"


def event_resource_id(state: FleetState, event_id: str) -> str | None:
    """The ARM id of scheduled event ``event_id`` as Azure reported it, or None."""
    event = state.azure.events.get(event_id.lower())
    if event is None or EVENT_ARM_ID.match(event.resource_id) is None:
        return None
    return event.resource_id


def acknowledge_path(state: FleetState, event_id: str) -> str | None:
    """The path (with api-version) ``acknowledge`` is POSTed to for ``event_id`` alone, or None."""
    resource = event_resource_id(state, event_id)
    return None if resource is None else f"{resource}/acknowledge?api-version={ACK_API_VERSION}"


def acknowledged(approval: DecisionRecord, code: str, reason: str, now: float) -> Decision:
    """The audit of an approval through ARM: what Azure answered (module docstring)."""
    data = approval.data
    found = data.get("Target")
    target: dict[str, object] = found if isinstance(found, dict) else {}
    assert code in OUTCOMES, code
    return Decision(
        kind="acknowledge", id=approval.id + SUFFIX, subject=str(data.get("EventId") or ""), time=now,
        code=code, reason=reason, shadow=approval.shadow, event_id=data.get("EventId"),
        event_type=data.get("EventType"), event_source=data.get("EventSource"),
        resources=tuple(r for r in data.get("Resources") or () if isinstance(r, str)),
        target=VmRef(*(str(target.get(k) or "") for k in ("name", "vmId", "group"))),
        attempt=approval.attempt, via=VIA_ARM)
