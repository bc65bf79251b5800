"""Every CloudEvent the agent emits is built here: the one place that knows the schema of design.md.

The kinds (``model.Kind``: transitions, ``approved``, the audit events, ``prepared``,
``recovered``, ``heartbeat``) name the types. Events about one Scheduled event (``about``) carry
the IMDS event as ``data`` plus enrichment, with id ``<EventId>/<kind>``; ``unmatched`` is an
audit event whose EventId is not in the document; ``heartbeat`` is the agent's sign of life
(with its ``[health]`` verdict); ``identity`` registers its key with an attested document
(``docs/identity.md``). ``for_outbox`` turns any of them into the outbox's row (``NewEvent``), so
nothing else assembles ids, types or payloads.

Events are built and serialised with the ``cloudevents`` SDK (core v1 API); the outbox keeps the
structured-mode JSON text, which every sink derives its wire form from.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cloudevents.core.v1.event import CloudEvent

from . import __version__
from .model import TYPE_PREFIX, Document, HealthVerdict, Kind, ScheduledEvent, Transition, VmIdentity
from .timestamps import rfc3339

__all__ = ["TYPE_PREFIX", "Kind", "NewEvent", "about", "approved", "ce_id", "ce_type", "event_data",
           "for_outbox", "from_json", "health_data", "heartbeat", "hook_failed", "identity",
           "imds_fields", "prepared", "recovered", "to_json", "transition", "transition_rows",
           "unmatched"]

#: The ``eventstatus`` extension says what happened, as Azure's Event Grid feed does; the last
#: status IMDS showed stays in ``data.EventStatus``. Other types carry the IMDS status.
EVENT_STATUS = {Kind.STARTED: "Started", Kind.COMPLETED: "Completed", Kind.CANCELED: "Canceled",
                Kind.RECOVERED: "Completed"}
#: What ``event_data`` (and a transition's ``extra``) adds to the IMDS event in ``data``.
ADDED_KEYS = ("NotBeforeUtc", "DocumentIncarnation", "AffectsThisVm", "Vm", "Inferred", "InferredFrom")
if TYPE_CHECKING:
    from cloudevents.core.formats.json import JSONFormat


@functools.cache
def _format() -> JSONFormat:
    """The SDK's JSON format, loaded with the first event to write: it brings dateutil (~3 MB),
    which an agent polling an unchanged document never needs."""
    from cloudevents.core.formats.json import JSONFormat

    return JSONFormat()


@dataclass(frozen=True)
class NewEvent:
    """A CloudEvent about to enter the outbox (``for_outbox``)."""

    ce_id: str
    event_id: str
    state: str
    ce_type: str
    payload: str
    observed_at: float


def ce_type(kind: str) -> str:
    """``com.azure.scheduledevents.<kind>``."""
    return Kind(kind).type


def ce_id(event_id: str, kind: str) -> str:
    """Deterministic: the same transition always gets the same id, across restarts and VMs."""
    return f"{event_id}/{kind}"


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


def about(
    kind: Kind,
    event: ScheduledEvent,
    incarnation: int,
    vm: VmIdentity,
    observed: datetime,
    *,
    id_suffix: str | None = None,
    extra_data: dict[str, Any] | None = None,
) -> CloudEvent:
    """A CloudEvent of ``kind`` about ``event``; ``id_suffix`` extends the id (audit events)."""
    ident = ce_id(event.event_id, kind)
    if id_suffix:
        ident = f"{ident}/{id_suffix}"
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "type": Kind(kind).type,
        "source": vm.source,
        "id": ident,
        "subject": event.event_id,
        "time": observed.astimezone(UTC),
        "datacontenttype": "application/json",
        "eventtype": event.event_type,
        "eventstatus": EVENT_STATUS.get(Kind(kind), event.status),
        "incarnation": incarnation,
        "vmid": vm.vm_id,
    }
    return CloudEvent(attributes, event_data(event, incarnation, vm, extra_data))


def transition(transition: Transition, vm: VmIdentity, observed: datetime) -> CloudEvent:
    """``scheduled`` / ``started`` / ``completed`` / ``canceled`` (inferred ones say so)."""
    extra = None
    if transition.inferred_from is not None:
        extra = {"Inferred": True, "InferredFrom": transition.inferred_from}
    return about(transition.state, transition.event, transition.incarnation, vm, observed,
                 extra_data=extra)


def transition_rows(transitions: list[Transition], vm: VmIdentity,
                    observed: datetime) -> list[NewEvent]:
    """The outbox rows of ``transitions`` seen at ``observed``."""
    return [for_outbox(transition(t, vm, observed)) for t in transitions]


def approved(event: ScheduledEvent, incarnation: int, vm: VmIdentity, approved_by: str,
             observed: datetime) -> CloudEvent:
    """``approved``: StartRequests was POSTed for ``event`` (``ApprovedBy`` says on whose word)."""
    return about(Kind.APPROVED, event, incarnation, vm, observed,
                 extra_data={"ApprovedBy": approved_by})


def prepared(event: ScheduledEvent, incarnation: int, vm: VmIdentity, *, seconds: float | None,
             observed: datetime) -> CloudEvent:
    """``prepared``: this VM's prepare hook succeeded for ``event``."""
    return about(Kind.PREPARED, event, incarnation, vm, observed, extra_data={
        "Hook": "prepare", "DurationSeconds": _duration(seconds),
    })


def hook_failed(hook: str, event: ScheduledEvent, incarnation: int, vm: VmIdentity, *, reason: str,
                exit_code: int | None, seconds: float | None, observed: datetime) -> CloudEvent:
    """``preparefailed`` / ``recoverfailed``: the hook failed, timed out or was interrupted."""
    kind = Kind.PREPARE_FAILED if hook == "prepare" else Kind.RECOVER_FAILED
    return about(kind, event, incarnation, vm, observed, extra_data={
        "Reason": reason, "Hook": hook, "ExitCode": exit_code, "DurationSeconds": _duration(seconds),
    })


def recovered(event: ScheduledEvent, incarnation: int, vm: VmIdentity, observed: datetime, *,
              completed_at: float, health: HealthVerdict | None, recover_hook: str) -> CloudEvent:
    """``recovered``: after ``event`` (which affected this VM) completed, this VM's probes pass
    (``health``; None without ``[health]``) and its recover hook succeeded (``recover_hook``:
    ``succeeded``, ``none`` when no command is configured, ``not-run`` when no hook ran for it)."""
    return about(Kind.RECOVERED, event, incarnation, vm, observed, extra_data={
        "CompletedUtc": rfc3339(completed_at),
        "RecoveredAfterSeconds": round(max(0.0, observed.timestamp() - completed_at), 3),
        "Health": health_data(health),
        "RecoverHook": recover_hook,
    })


def imds_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The IMDS event of a CloudEvent's ``data``: without what ``event_data`` added."""
    return {k: v for k, v in data.items() if k not in ADDED_KEYS}


def health_data(verdict: HealthVerdict | None) -> dict[str, Any] | None:
    """``data.Health`` of heartbeats and ``recovered`` events (None without ``[health]``)."""
    if verdict is None:
        return None
    return {
        "Verdict": verdict.verdict,
        "SinceUtc": rfc3339(verdict.since),
        "CheckedUtc": rfc3339(verdict.checked_at) if verdict.checked_at is not None else None,
        "Probe": verdict.probe,
        "Reason": verdict.reason,
        "Probes": verdict.probes,
    }


def unmatched(kind: Kind, subject: str, vm: VmIdentity, observed: datetime, *,
              incarnation: int | None, id_suffix: str, data: dict[str, Any]) -> CloudEvent:
    """An audit event whose EventId (``subject``) is not in the document: no ``eventtype`` or
    ``eventstatus``, ``data`` as given plus ``DocumentIncarnation``, ``AffectsThisVm: false`` and
    ``Vm``."""
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "type": kind.type,
        "source": vm.source,
        "id": f"{ce_id(subject, kind)}/{id_suffix}",
        "subject": subject,
        "time": observed.astimezone(UTC),
        "datacontenttype": "application/json",
        "vmid": vm.vm_id,
    }
    if incarnation is not None:
        attributes["incarnation"] = incarnation
    full = {**data, "DocumentIncarnation": incarnation, "AffectsThisVm": False, "Vm": vm.as_data()}
    return CloudEvent(attributes, full)


def for_outbox(cloud: CloudEvent) -> NewEvent:
    """The outbox row of ``cloud``: its id, subject (the EventId), kind, type and JSON text."""
    attributes = cloud.get_attributes()
    kind = Kind.of(attributes["type"])
    assert kind is not None, attributes["type"]
    return NewEvent(
        ce_id=attributes["id"],
        event_id=attributes["subject"],
        state=kind.value,
        ce_type=attributes["type"],
        payload=to_json(cloud),
        observed_at=attributes["time"].timestamp(),
    )


def _duration(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def heartbeat(
    vm: VmIdentity,
    now: datetime,
    *,
    interval: float,
    last_poll: datetime | None,
    document: Document | None,
    incarnation: int | None,
    backlog: dict[str, int],
    health: HealthVerdict | None = None,
) -> CloudEvent:
    """The ``heartbeat`` CloudEvent (never stored in the outbox): a sign of life and what the
    agent sees now, for the fleet coordinator (``health``: its probes' verdict; None without
    ``[health]``)."""
    events = [] if document is None else [
        {"EventId": e.event_id, "EventStatus": e.status, "EventType": e.event_type}
        for e in document.events
    ]
    seconds = int(now.timestamp())
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "type": Kind.HEARTBEAT.type,
        "source": vm.source,
        "id": f"{Kind.HEARTBEAT}/{vm.key}/{seconds}",
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
        "Health": health_data(health),
        "Vm": vm.as_data(),
    }
    return CloudEvent(attributes, data)


def identity(vm: VmIdentity, now: datetime, *, vm_id: str, public_key: str, key_id: str, nonce: str,
             document: Mapping[str, Any], created: datetime | None) -> CloudEvent:
    """The ``identity`` CloudEvent (never stored in the outbox): this agent's Ed25519 public key
    (base64 of the raw 32 bytes) and the IMDS attested document fetched with its ``nonce``.

    Its id names the vmId, the key and the document's ``createdOn`` (unix seconds), so the same
    document announced again keeps its id. ``Vm`` is what the agent read from the instance
    metadata, for people: only the attested document's claims are verified.
    """
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "type": Kind.IDENTITY.type,
        "source": vm.source,
        "id": f"{Kind.IDENTITY}/{vm_id}/{key_id}/{int((created or now).timestamp())}",
        "subject": vm_id,
        "time": now.astimezone(UTC),
        "datacontenttype": "application/json",
        "vmid": vm_id,
    }
    data = {
        "PublicKey": public_key,
        "Nonce": nonce,
        "AttestedDocument": {"encoding": document.get("encoding"),
                             "signature": document.get("signature")},
        "AgentVersion": __version__,
        "Vm": vm.as_data(),
    }
    return CloudEvent(attributes, data)


def to_json(event: CloudEvent) -> str:
    return _format().write(event).decode("utf-8")


def from_json(text: str | bytes) -> CloudEvent:
    return _format().read(None, text)  # type: ignore[return-value]
