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
others have the usual shape (``cloudevents.about``: the
IMDS event as ``data`` plus enrichment) with ``Reason`` (one line) and ``ReasonCode`` added. A refused
message whose EventId is not in the document (unknown, gone, unreadable or forged) still gets an
event: ``subject`` is the claimed EventId (``unknown`` when there is none that looks like one), no
``eventtype``/``eventstatus`` extensions, and ``data`` = ``EventId`` (or null), ``Reason``,
``ReasonCode``, ``InDocument: false``, ``DocumentIncarnation``, ``AffectsThisVm: false``, ``Vm``.
Both carry ``Message``: the message's own fields (``Id``, ``Source``, ``Time``, ``EventId``,
``ExpiresAt``, ``Reason``, ``VmName``; strings cut at 200 characters) plus ``QueueMessageId``,
``Queue`` and ``Authentic`` (whether the signature verified: an unauthenticated message's fields
are whatever the sender wrote).

The events themselves are built by ``cloudevents.py``; this module says what goes into them.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import cloudevents as ce
from ..model import Document, Kind, VmIdentity

if TYPE_CHECKING:  # messages and signing load only with an approval queue (agent memory)
    from .messages import Verdict

UNKNOWN = "unknown"


def safe_id(text: str) -> str:
    """``text`` usable inside a CloudEvent id (queue message ids are GUIDs; anything else is cut)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:100] or "_"


def rejection_event(
    verdict: Verdict,
    *,
    document: Document | None,
    vm: VmIdentity,
    queue_message_id: str,
    queue: str,
    observed: datetime,
) -> ce.NewEvent:
    """The ``approvalrejected`` audit event for a refused queue message."""
    reason = f"{verdict.code}: {verdict.detail}"
    message = dict(verdict.summary or {})
    message.update({"QueueMessageId": queue_message_id, "Queue": queue, "Authentic": verdict.authentic})
    extra: dict[str, Any] = {"Reason": reason, "ReasonCode": verdict.code, "Message": message}
    suffix = safe_id(queue_message_id)
    event = document.by_id().get(verdict.event_id) if document and verdict.event_id else None
    if event is not None and document is not None:
        return ce.for_outbox(ce.about(Kind.APPROVAL_REJECTED, event, document.incarnation, vm, observed,
                                      id_suffix=suffix, extra_data={**extra, "InDocument": True}))
    return ce.for_outbox(ce.unmatched(
        Kind.APPROVAL_REJECTED, verdict.event_id or UNKNOWN, vm, observed,
        incarnation=document.incarnation if document else None, id_suffix=suffix,
        data={"EventId": verdict.event_id, **extra, "InDocument": False},
    ))

