"""Audit CloudEvents of the approval path: refused approval messages, prepare hooks' results.

=====================================================  ========================================
type                                                   id
=====================================================  ========================================
``com.azure.scheduledevents.approvalrejected``         ``<EventId>/approvalrejected/<queue message id>``
``com.azure.scheduledevents.prepared``                 ``<EventId>/prepared``
``com.azure.scheduledevents.preparefailed``            ``<EventId>/preparefailed``
``com.azure.scheduledevents.recoverfailed``            ``<EventId>/recoverfailed``
=====================================================  ========================================

``prepared`` (this VM's prepare hook succeeded: a coordinator may gate approvals on it) has the
usual shape plus ``Hook`` and ``DurationSeconds``. When the event is in the current document the
others have the usual shape (``cloudevents.build``: the
IMDS event as ``data`` plus enrichment) with ``Reason`` (one line) and ``ReasonCode`` added. A refused
message whose EventId is not in the document (unknown, gone, unreadable or forged) still gets an
event: ``subject`` is the claimed EventId (``unknown`` when there is none that looks like one), no
``eventtype``/``eventstatus`` extensions, and ``data`` = ``EventId`` (or null), ``Reason``,
``ReasonCode``, ``InDocument: false``, ``DocumentIncarnation``, ``AffectsThisVm: false``, ``Vm``.
Both carry ``Message``: the message's own fields (``Id``, ``Source``, ``Time``, ``EventId``,
``ExpiresAt``, ``Reason``, ``VmName``; strings cut at 200 characters) plus ``QueueMessageId``,
``Queue`` and ``Authentic`` (whether the signature verified: an unauthenticated message's fields
are whatever the sender wrote).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cloudevents.core.v1.event import CloudEvent

from .. import cloudevents as ce
from ..model import Document, ScheduledEvent, VmIdentity
from ..outbox import NewEvent

if TYPE_CHECKING:  # messages and signing load only with an approval queue (agent memory)
    from .messages import Verdict

APPROVAL_REJECTED = ce.APPROVAL_REJECTED  # "approvalrejected"
PREPARED = ce.PREPARED  # "prepared"
PREPARE_FAILED = "preparefailed"
RECOVER_FAILED = "recoverfailed"
UNKNOWN = "unknown"


def safe_id(text: str) -> str:
    """``text`` usable inside a CloudEvent id (queue message ids are GUIDs; anything else is cut)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:100] or "_"


def _new_event(cloud: CloudEvent, event_id: str, state: str, observed: datetime) -> NewEvent:
    attrs = cloud.get_attributes()
    return NewEvent(
        ce_id=attrs["id"],
        event_id=event_id,
        state=state,
        ce_type=attrs["type"],
        payload=ce.to_json(cloud),
        observed_at=observed.timestamp(),
    )


def rejection_event(
    verdict: Verdict,
    *,
    document: Document | None,
    vm: VmIdentity,
    queue_message_id: str,
    queue: str,
    observed: datetime,
) -> NewEvent:
    """The ``approvalrejected`` audit event for a refused queue message."""
    reason = f"{verdict.code}: {verdict.detail}"
    message = dict(verdict.summary or {})
    message.update({"QueueMessageId": queue_message_id, "Queue": queue, "Authentic": verdict.authentic})
    extra: dict[str, Any] = {"Reason": reason, "ReasonCode": verdict.code, "Message": message}
    suffix = safe_id(queue_message_id)
    event = document.by_id().get(verdict.event_id) if document and verdict.event_id else None
    if event is not None and document is not None:
        cloud = ce.build(APPROVAL_REJECTED, event, document.incarnation, vm, observed,
                         event_id_suffix=suffix, extra_data={**extra, "InDocument": True})
        return _new_event(cloud, event.event_id, APPROVAL_REJECTED, observed)
    subject = verdict.event_id or UNKNOWN
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "type": ce.ce_type(APPROVAL_REJECTED),
        "source": vm.source,
        "id": f"{ce.ce_id(subject, APPROVAL_REJECTED)}/{suffix}",
        "subject": subject,
        "time": observed,
        "datacontenttype": "application/json",
        "vmid": vm.vm_id,
    }
    if document is not None:
        attributes["incarnation"] = document.incarnation
    data = {
        "EventId": verdict.event_id,
        **extra,
        "InDocument": False,
        "DocumentIncarnation": document.incarnation if document else None,
        "AffectsThisVm": False,
        "Vm": vm.as_data(),
    }
    return _new_event(CloudEvent(attributes, data), subject, APPROVAL_REJECTED, observed)


def hook_failure_event(
    hook: str,
    event: ScheduledEvent,
    incarnation: int,
    vm: VmIdentity,
    *,
    reason: str,
    exit_code: int | None,
    seconds: float | None,
    observed: datetime,
) -> NewEvent:
    """``preparefailed`` / ``recoverfailed``: the hook failed, timed out or was interrupted."""
    state = PREPARE_FAILED if hook == "prepare" else RECOVER_FAILED
    cloud = ce.build(state, event, incarnation, vm, observed, extra_data={
        "Reason": reason,
        "Hook": hook,
        "ExitCode": exit_code,
        "DurationSeconds": None if seconds is None else round(seconds, 3),
    })
    return _new_event(cloud, event.event_id, state, observed)


def prepared_event(
    event: ScheduledEvent,
    incarnation: int,
    vm: VmIdentity,
    *,
    seconds: float | None,
    observed: datetime,
) -> NewEvent:
    """``prepared``: this VM's prepare hook succeeded for ``event``."""
    cloud = ce.build(PREPARED, event, incarnation, vm, observed, extra_data={
        "Hook": "prepare",
        "DurationSeconds": None if seconds is None else round(seconds, 3),
    })
    return _new_event(cloud, event.event_id, PREPARED, observed)
