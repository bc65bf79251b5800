"""Transition -> CloudEvent: the one place that knows the schema of design.md.

Events are built and serialised with the ``cloudevents`` SDK (core v1 API); the outbox keeps the
structured-mode JSON text, which every sink derives its wire form from.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cloudevents.core.v1.event import CloudEvent

from . import __version__
from .model import T_CANCELED, T_COMPLETED, T_STARTED, Document, ScheduledEvent, Transition, VmIdentity

TYPE_PREFIX = "com.azure.scheduledevents."
APPROVAL_REJECTED = "approvalrejected"
PREPARED = "prepared"
HEARTBEAT = "heartbeat"
#: The ``eventstatus`` extension says what happened, as Azure's Event Grid feed does; the last
#: status IMDS showed stays in ``data.EventStatus``. Other types carry the IMDS status.
EVENT_STATUS = {T_STARTED: "Started", T_COMPLETED: "Completed", T_CANCELED: "Canceled"}
if TYPE_CHECKING:
    from cloudevents.core.formats.json import JSONFormat


@functools.cache
def _format() -> JSONFormat:
    """The SDK's JSON format, loaded with the first event to write: it brings dateutil (~3 MB),
    which an agent polling an unchanged document never needs."""
    from cloudevents.core.formats.json import JSONFormat

    return JSONFormat()


def ce_type(state: str) -> str:
    return TYPE_PREFIX + state


def ce_id(event_id: str, state: str) -> str:
    """Deterministic: the same transition always gets the same id, across restarts and VMs."""
    return f"{event_id}/{state}"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_data(
    event: ScheduledEvent, incarnation: int, vm: VmIdentity, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = dict(event.raw)
    data["NotBeforeUtc"] = rfc3339(event.not_before) if event.not_before else None
    data["DocumentIncarnation"] = incarnation
    data["AffectsThisVm"] = event.affects(vm.name)
    data["Vm"] = vm.as_data()
    if extra:
        data.update(extra)
    return data


def build(
    state: str,
    event: ScheduledEvent,
    incarnation: int,
    vm: VmIdentity,
    observed: datetime,
    *,
    event_id_suffix: str | None = None,
    extra_data: dict[str, Any] | None = None,
) -> CloudEvent:
    """A CloudEvent for ``state`` of ``event``; ``event_id_suffix`` extends the id (audit events)."""
    ident = ce_id(event.event_id, state)
    if event_id_suffix:
        ident = f"{ident}/{event_id_suffix}"
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "type": ce_type(state),
        "source": vm.source,
        "id": ident,
        "subject": event.event_id,
        "time": observed.astimezone(UTC),
        "datacontenttype": "application/json",
        "eventtype": event.event_type,
        "eventstatus": EVENT_STATUS.get(state, event.status),
        "incarnation": incarnation,
        "vmid": vm.vm_id,
    }
    return CloudEvent(attributes, event_data(event, incarnation, vm, extra_data))


def from_transition(transition: Transition, vm: VmIdentity, observed: datetime) -> CloudEvent:
    extra = None
    if transition.inferred_from is not None:
        extra = {"Inferred": True, "InferredFrom": transition.inferred_from}
    return build(transition.state, transition.event, transition.incarnation, vm, observed,
                 extra_data=extra)


def heartbeat(
    vm: VmIdentity,
    now: datetime,
    *,
    interval: float,
    last_poll: datetime | None,
    document: Document | None,
    incarnation: int | None,
    backlog: dict[str, int],
) -> CloudEvent:
    """The ``heartbeat`` CloudEvent (never stored in the outbox): a sign of life and what the
    agent sees now, for the fleet coordinator."""
    events = [] if document is None else [
        {"EventId": e.event_id, "EventStatus": e.status, "EventType": e.event_type}
        for e in document.events
    ]
    seconds = int(now.timestamp())
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "type": ce_type(HEARTBEAT),
        "source": vm.source,
        "id": f"{HEARTBEAT}/{vm.key}/{seconds}",
        "subject": vm.key,
        "time": now.astimezone(UTC),
        "datacontenttype": "application/json",
        "vmid": vm.vm_id,
    }
    data = {
        "AgentVersion": __version__,
        "HeartbeatInterval": int(interval) if float(interval).is_integer() else interval,
        "LastPollUtc": rfc3339(last_poll) if last_poll is not None else None,
        "DocumentIncarnation": incarnation,
        "Events": events,
        "EnrichmentComplete": vm.complete,
        "Backlog": dict(backlog),
        "Vm": vm.as_data(),
    }
    return CloudEvent(attributes, data)


def to_json(event: CloudEvent) -> str:
    return _format().write(event).decode("utf-8")


def from_json(text: str | bytes) -> CloudEvent:
    return _format().read(None, text)  # type: ignore[return-value]
