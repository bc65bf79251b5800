"""The wire model of the Scheduled Events document, and its tolerant parser.

Lenient fields, strict documents. A reply that is not JSON, lacks an integer DocumentIncarnation
or an Events list, has an entry that is not an object or has no EventId or EventStatus, or lists
one EventId twice, is not a document: MalformedDocument, so garbage never turns into a transition.
Any other field that cannot be read keeps its event: the field is carried as served (``raw``, so
``data`` of every CloudEvent shows it), the problem is named in ``ScheduledEvent.problems`` (the
poller logs it once per event and counts it), and the agent reads the field as the table of
``event_fields.py`` says (an unknown EventStatus, for one, counts as Started).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from . import event_fields as fields

SCHEDULED = "Scheduled"
STARTED = "Started"
KNOWN_STATUSES = (SCHEDULED, STARTED)
TYPE_PREFIX = "com.azure.scheduledevents."


class Kind(StrEnum):
    """Every kind of CloudEvent the agent emits: the last part of its ``type``.

    The first four are transitions of an event between two documents (``differ.py``); the others
    are the approval path's and the agent's own (``recovered``: this VM is back after an event that
    affected it, ``approvals/recovery.py``; ``identity``: its key and attested document, for the
    fleet coordinator; ``docs/identity.md``). ``cloudevents.py`` builds each of them;
    metrics, ``status``, ``demo``, ``fleet tail`` and the chat formatter name them from here.
    """

    SCHEDULED = "scheduled"
    STARTED = "started"
    COMPLETED = "completed"
    CANCELED = "canceled"
    APPROVED = "approved"
    APPROVAL_REJECTED = "approvalrejected"
    PREPARED = "prepared"
    PREPARE_FAILED = "preparefailed"
    RECOVER_FAILED = "recoverfailed"
    RECOVERED = "recovered"
    HEARTBEAT = "heartbeat"
    IDENTITY = "identity"

    @property
    def type(self) -> str:
        """The CloudEvent ``type``: ``com.azure.scheduledevents.<kind>``."""
        return TYPE_PREFIX + self.value

    @classmethod
    def of(cls, ce_type: object) -> Kind | None:
        """The kind of a CloudEvent ``type`` string; None for any other type."""
        text = str(ce_type or "")
        if not text.startswith(TYPE_PREFIX):
            return None
        try:
            return cls(text[len(TYPE_PREFIX):])
        except ValueError:
            return None


TRANSITIONS = (Kind.SCHEDULED, Kind.STARTED, Kind.COMPLETED, Kind.CANCELED)
# Older names of the transition kinds.
T_SCHEDULED, T_STARTED, T_COMPLETED, T_CANCELED, T_APPROVED = (*TRANSITIONS, Kind.APPROVED)


HEALTHY, UNHEALTHY, UNKNOWN = "healthy", "unhealthy", "unknown"
VERDICTS = (HEALTHY, UNHEALTHY, UNKNOWN)
REASON_CHARS = 200  # a verdict's reason is cut to this length: it travels in every heartbeat


@dataclass(frozen=True)
class HealthVerdict:
    """What this VM's own probes say of its application (``[health]``, ``health/``).

    ``verdict`` is healthy, unhealthy or unknown (not yet enough passes or failures in a row);
    ``probe`` and ``reason`` name what is not passing (None when healthy); ``since`` is when the
    verdict took its value and ``checked_at`` when the last round of probes started (unix times;
    None before the first round ended); ``last_round_ok``: every probe passed in that round.
    ``cloudevents.health_data`` writes it into heartbeats and ``recovered`` events.
    """

    verdict: str
    since: float
    checked_at: float | None = None
    last_round_ok: bool = False
    probe: str | None = None
    reason: str | None = None
    probes: int = 0


class MalformedDocument(ValueError):
    """The IMDS reply is not a Scheduled Events document."""


def parse_not_before(value: Any) -> datetime | None:
    """NotBefore to an aware UTC datetime: RFC 1123 ("Mon, 11 Apr 2022 22:26:58 GMT") or ISO 8601 /
    RFC 3339 with a zone ("2026-11-25T19:05:25Z"); "" or None to None; MalformedDocument else."""
    try:
        return fields.not_before(value)
    except ValueError as exc:
        raise MalformedDocument(str(exc)) from None


@dataclass(frozen=True)
class ScheduledEvent:
    """One entry of ``Events``; ``raw`` keeps the fields exactly as received."""

    event_id: str
    event_type: str
    status: str
    resources: tuple[str, ...]
    not_before: datetime | None
    resource_type: str | None = None
    description: str | None = None
    source: str | None = None
    duration: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    #: (field, what is wrong) for every field that could not be read (``event_fields.py`` says
    #: how each is read then); derived from ``raw``.
    problems: tuple[tuple[str, str], ...] = field(default=(), compare=False, hash=False)

    def unreadable(self, name: str) -> bool:
        """Whether the field ``name`` (as IMDS spells it) could not be read."""
        return any(f == name for f, _ in self.problems)

    def affects(self, vm_name: str | None) -> bool:
        """Whether ``vm_name`` is in Resources (case-insensitive, as Azure VM names are); True
        when Resources could not be read: the event may be this VM's."""
        if vm_name is None:
            return False
        return self.unreadable("Resources") or \
            vm_name.casefold() in {r.casefold() for r in self.resources}


@dataclass(frozen=True)
class Document:
    incarnation: int
    events: tuple[ScheduledEvent, ...] = ()

    def by_id(self) -> dict[str, ScheduledEvent]:
        return {e.event_id: e for e in self.events}

    def to_wire(self) -> dict[str, Any]:
        return {"DocumentIncarnation": self.incarnation, "Events": [dict(e.raw) for e in self.events]}


INFERRED_APPROVED = "approved"
INFERRED_NOT_BEFORE = "not-before-passed"
INFERRED_NOT_BEFORE_UNKNOWN = "not-before-unknown"


@dataclass(frozen=True)
class Transition:
    """A change of one event between two documents; ``event`` is the latest version seen.

    ``inferred_from`` is set for a ``started``/``completed`` pair the differ deduced for an event
    that vanished while last seen Scheduled (``approved``, ``not-before-passed`` or
    ``not-before-unknown``).
    """

    state: Kind
    event: ScheduledEvent
    incarnation: int
    inferred_from: str | None = None

    @property
    def event_id(self) -> str:
        return self.event.event_id


def _status(raw: Mapping[str, Any], event_id: str, problems: fields.Problems) -> str:
    value = raw.get("EventStatus")
    if not isinstance(value, str) or not value.strip():
        raise MalformedDocument(f"event {event_id} has no EventStatus")
    known = fields.text(raw, "EventStatus", problems, KNOWN_STATUSES)
    return known if known in KNOWN_STATUSES else STARTED  # see event_fields.py


def parse_event(raw: Any) -> ScheduledEvent:
    """One entry of Events: MalformedDocument without an EventId or an EventStatus; any other
    field that cannot be read is read as ``event_fields.py`` says and named in ``problems``."""
    if not isinstance(raw, dict):
        raise MalformedDocument(f"an entry of Events is not an object: {raw!r:.80}")
    event_id = raw.get("EventId")
    if not isinstance(event_id, str) or not event_id.strip():
        raise MalformedDocument(f"an event has no EventId: {raw!r:.120}")
    problems: fields.Problems = []
    status = _status(raw, event_id, problems)
    return ScheduledEvent(
        event_id=event_id,
        event_type=fields.event_type(raw, problems),
        status=status,
        resources=fields.resources(raw, problems),
        not_before=fields.not_before_of(raw, problems),
        resource_type=fields.text(raw, "ResourceType", problems),
        description=fields.text(raw, "Description", problems),
        source=fields.text(raw, "EventSource", problems, fields.KNOWN_SOURCES),
        duration=fields.duration(raw, problems),
        raw=dict(raw),
        problems=tuple(problems),
    )


def parse_document(body: bytes | str | Any) -> Document:
    """Parse a reply body (bytes/str) or an already decoded object into a Document."""
    if isinstance(body, bytes | bytearray | str):
        try:
            body = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MalformedDocument(f"reply is not JSON: {exc}") from exc
        except RecursionError as exc:  # "[[[[...": garbage must not crash the poller
            raise MalformedDocument("reply is not JSON: nested too deeply") from exc
    if not isinstance(body, dict):
        raise MalformedDocument("reply is not a JSON object")
    incarnation = body.get("DocumentIncarnation")
    if isinstance(incarnation, bool) or not isinstance(incarnation, int):
        raise MalformedDocument("reply lacks an integer DocumentIncarnation")
    events = body.get("Events")
    if not isinstance(events, list):
        raise MalformedDocument("reply lacks an Events array")
    parsed = tuple(parse_event(e) for e in events)
    ids = [e.event_id for e in parsed]
    if len(set(ids)) != len(ids):
        raise MalformedDocument("reply lists the same EventId twice")
    return Document(incarnation=incarnation, events=parsed)


@dataclass(frozen=True)
class VmIdentity:
    """What the instance compute metadata says about this VM (for enrichment).

    ``complete`` is False while the instance metadata is unknown: then only ``name`` (the host
    name) is known and every other field is "" (see ``from_hostname``).
    """

    vm_id: str
    name: str
    resource_id: str = ""
    subscription_id: str = ""
    resource_group_name: str = ""
    location: str = ""
    zone: str = ""
    vm_scale_set_name: str = ""
    platform_fault_domain: str = ""
    platform_update_domain: str = ""
    placement_group_id: str = ""
    tags: tuple[tuple[str, str], ...] = ()  # only the tags named in [vm] tags, in that order
    complete: bool = True

    @classmethod
    def from_compute(cls, compute: Mapping[str, Any], tag_names: Sequence[str] = ()) -> VmIdentity:
        """From the JSON of /metadata/instance/compute; vmId and name are required.

        ``tag_names`` picks tags from ``tagsList`` (names compare case-insensitively, as Azure's
        do; the configured spelling is kept); no other tag ever leaves the VM.
        """
        vm_id = compute.get("vmId")
        name = compute.get("name")
        if not isinstance(vm_id, str) or not vm_id or not isinstance(name, str) or not name:
            raise MalformedDocument("instance metadata lacks vmId or name")

        def text(key: str) -> str:
            value = compute.get(key)
            return "" if value is None else str(value)

        return cls(
            vm_id=vm_id,
            name=name,
            resource_id=text("resourceId"),
            subscription_id=text("subscriptionId"),
            resource_group_name=text("resourceGroupName"),
            location=text("location"),
            zone=text("zone"),
            vm_scale_set_name=text("vmScaleSetName"),
            platform_fault_domain=text("platformFaultDomain"),
            platform_update_domain=text("platformUpdateDomain"),
            placement_group_id=text("placementGroupId"),
            tags=_pick_tags(compute, tag_names),
        )

    @classmethod
    def from_hostname(cls, hostname: str) -> VmIdentity:
        """What is known without the instance metadata: the host name, standing for the VM name."""
        return cls(vm_id="", name=hostname, complete=False)

    @property
    def source(self) -> str:
        """The CloudEvent ``source``: the ARM resource id, else ``/virtualMachines/<vmId or host>``."""
        return self.resource_id or f"/virtualMachines/{self.vm_id or self.name}"

    @property
    def key(self) -> str:
        """The vmId, or the host name while it is unknown (heartbeat ids and subjects)."""
        return self.vm_id or self.name

    def as_data(self) -> dict[str, Any]:
        """``data.Vm`` of every CloudEvent (keys as IMDS names them)."""
        return {
            "vmId": self.vm_id,
            "name": self.name,
            "resourceId": self.resource_id,
            "subscriptionId": self.subscription_id,
            "resourceGroupName": self.resource_group_name,
            "location": self.location,
            "zone": self.zone,
            "vmScaleSetName": self.vm_scale_set_name,
            "platformFaultDomain": self.platform_fault_domain,
            "platformUpdateDomain": self.platform_update_domain,
            "placementGroupId": self.placement_group_id,
            "tags": dict(self.tags),
            "complete": self.complete,
        }


def _pick_tags(compute: Mapping[str, Any], names: Sequence[str]) -> tuple[tuple[str, str], ...]:
    if not names:
        return ()
    found: dict[str, str] = {}
    tags_list = compute.get("tagsList")
    if isinstance(tags_list, list):
        for item in tags_list:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                value = item.get("value")
                found.setdefault(item["name"].casefold(), "" if value is None else str(value))
    elif isinstance(compute.get("tags"), str):  # older api-versions: "k1:v1;k2:v2"
        for pair in compute["tags"].split(";"):
            key, sep, value = pair.partition(":")
            if sep and key:
                found.setdefault(key.casefold(), value)
    return tuple((n, found[n.casefold()]) for n in names if n.casefold() in found)
