"""Azure's own word, read at the edge: the feed's CloudEvents and Resource Graph's rows as facts. Pure.

What Azure publishes (docs/azure-feed.md) is checked here before anything is folded, like
``approvals/messages.validate``: a function of the input and of the managed subscriptions, which
returns the facts or a ``Refusal`` whose ``code`` says why (counted by the service, never folded):

=================  ================================================================================
``type``           a feed CloudEvent that is not a scheduled event: its ``data.resourceInfo.type`` is
                   not ``microsoft.maintenance/scheduledEvents`` (any case), or it is but ``type`` is
                   neither documented spelling (``FEED_EVENT_TYPES``: ``...MaintenanceResources.
                   ScheduledEventEmitted``, ``microsoft.maintenance/scheduledevents/write``)
``unread``         an event of a kind Azure's feed also carries that no box reads (Resource Health's
                   ``...HealthResources.ResourceAnnotated``): counted, not a sign the feed is wrong
``schema``         a missing or mistyped member (``data.resourceInfo.properties``, ``Resources``...)
``subscription``   the event or VM is of a subscription ``[azure] subscriptions`` does not list
``resource-id``    the scheduled event's ARM id is not ``/subscriptions/<s>/resourceGroups/<rg>/
                   providers/Microsoft.Compute/{virtualMachines|virtualMachineScaleSets|
                   availabilitySets}/<name>/providers/Microsoft.Maintenance/scheduledevents/<EventId>``
                   (or another EventId than the one it carries): the coordinator acknowledges on
                   that id with its own identity, so nothing else is taken
``status``         ``EventStatus`` is not Scheduled, Started, Completed or Canceled; or an
                   ``availabilityState`` is not Available, Unavailable, Degraded or Unknown
``text``           a name, an id or a tag too long or with control characters
=================  ================================================================================

What an event is comes from ``data.resourceInfo.type`` (the event's ``type`` only when that is
absent): Microsoft's page spells a scheduled event's ``type`` two ways (docs/azure-feed.md), so
both are taken. ``KINDS`` maps each resource type read to its reader: scheduled events, and
Resource Health's availability statuses (``...HealthResources.AvailabilityStatusChanged``).

Facts:

- ``EventFacts``: one observation of a scheduled event, ``as_of`` the time Azure's view holds for
  (the feed: ``data.operationalInfo.resourceEventTime``, else the CloudEvent's ``time``; Resource
  Graph: when the query was answered, as its rows carry no time).
- ``VmFacts``: one VM as Azure files it (``resources`` for availability sets and flexible scale
  sets, ``computeresources`` for uniform scale sets): key (its ``vmId``, lower case, as the
  agents' reports are keyed), name as ``Resources`` names it (a uniform scale set's VM is
  ``<scale set>_<instanceId>``), availability set, scale set, zone, tags, the fault and update
  domains when Resource Graph has them (``instance_view``: the ARM path that has them otherwise),
  and whether it is opted in to Azure's feed (``scheduledEventsPolicy...eventGridAndResourceGraph.
  enable`` on the VM, or on its set: ``set_row``). Only an opted-in VM's events reach the feed and
  ``maintenanceresources``; when neither the VM's nor its set's row shows the policy, it counts as
  not opted in.
- ``HealthFacts``: one VM's ``availabilityState`` as Resource Health reported it, from the feed
  (``health_event``) or a ``healthresources`` row (``health_row``): ``targetResourceId`` a VM's ARM
  id in a managed subscription, the status's own id under it
  (``<VM>/providers/Microsoft.ResourceHealth/availabilityStatuses/<name>``), the feed event's
  ``source`` that subscription; ``occurredTime`` (Resource Health's API spells it ``occuredTime``:
  both read; else the event's time, or when the query was answered) is when it took that state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ....approvals.messages import EVENT_ID
from ....model import MalformedDocument, parse_not_before
from ....printable import has_controls
from ....timestamps import seconds
from ..fold.azure_state import (
    _RG,
    _SUB,
    AVAILABILITY_STATES,
    EVENT_ARM_ID,
    STATUS_RANKS,
    EventFacts,
    HealthFacts,
    VmFacts,
)
from ..schema import (
    AVAILABILITY_EVENT_TYPE,
    AVAILABILITY_RESOURCE,
    FEED_EVENT_TYPE,
    FEED_EVENT_TYPES,
    HEALTH_TYPES,
    SCHEDULED_EVENT_RESOURCE,
)

EVENT_TYPE = FEED_EVENT_TYPE
EVENT_TABLE_TYPE = SCHEDULED_EVENT_RESOURCE
REASONS = ("type", "unread", "schema", "subscription", "resource-id", "status", "text")
UNREAD = (HEALTH_TYPES,)  # type prefixes (lower case) of the kinds no box reads (once not in KINDS)
_SPELLINGS = frozenset(t.lower() for t in FEED_EVENT_TYPES)
MAX_NAME = 200
MAX_RESOURCES = 1000
MAX_TAGS = 50
VM_ARM_ID = re.compile(
    rf"^/subscriptions/{_SUB}/resourcegroups/{_RG}/providers/microsoft\.compute/"
    r"(?:virtualmachines/(?P<vm>[^/\s]{1,80})"
    r"|virtualmachinescalesets/(?P<set>[^/\s]{1,80})/virtualmachines/(?P<instance>[^/\s]{1,80}))\Z", re.I)
GROUP_ARM_ID = re.compile(
    rf"^/subscriptions/{_SUB}/resourcegroups/{_RG}/providers/microsoft\.compute/"
    r"(?:availabilitysets|virtualmachinescalesets)/(?P<name>[^/\s]{1,80})\Z", re.I)


@dataclass(frozen=True)
class Refusal:
    code: str  # one of REASONS
    detail: str


def _get(mapping: Mapping[str, Any], name: str) -> Any:
    """A member by name, case-insensitively (Azure spells property names both ways)."""
    if name in mapping:
        return mapping[name]
    lowered = name.lower()
    return next((v for k, v in mapping.items() if isinstance(k, str) and k.lower() == lowered), None)


def _text(value: Any, what: str, limit: int = MAX_NAME, *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise _Refused("schema", f"{what} is missing")
        return ""
    if not isinstance(value, str):
        raise _Refused("schema", f"{what} is not a string")
    if len(value) > limit or has_controls(value):
        raise _Refused("text", f"{what} is too long or has control characters")
    return value


class _Refused(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def _managed(subscription: str, managed: Sequence[str]) -> None:
    if subscription.lower() not in {s.lower() for s in managed}:
        raise _Refused("subscription", f"subscription {subscription} is not managed")


def _event(info: Any, managed: Sequence[str], as_of: float, via: str) -> EventFacts:
    if not isinstance(info, Mapping):
        raise _Refused("schema", "resourceInfo is not an object")
    rid = _text(_get(info, "id"), "the scheduled event's id", 600, required=True)
    found = EVENT_ARM_ID.match(rid)
    if found is None:
        raise _Refused("resource-id", f"{rid[:200]!r} is not a scheduled event of a VM, scale set or "
                       "availability set")
    _managed(found["sub"], managed)
    props = _get(info, "properties")
    if not isinstance(props, Mapping):
        raise _Refused("schema", "properties is not an object")
    event_id = _text(_get(props, "EventId") or _get(info, "name"), "EventId", required=True)
    if not EVENT_ID.match(event_id) or event_id.lower() != found["event"].lower():
        raise _Refused("resource-id", f"EventId {event_id[:100]!r} is not the one its id names")
    status = _text(_get(props, "EventStatus"), "EventStatus", 20, required=True)
    if status.lower() not in STATUS_RANKS:
        raise _Refused("status", f"EventStatus {status!r} is not Scheduled, Started, Completed or Canceled")
    listed = _get(props, "Resources")
    if not isinstance(listed, list) or len(listed) > MAX_RESOURCES:
        raise _Refused("schema", "Resources is not a list (of at most 1000 names)")
    resources = tuple(_text(r, "a name in Resources", required=True) for r in listed)
    raw_nb = _get(props, "NotBefore")
    try:
        parsed = parse_not_before(raw_nb) if raw_nb else None
    except MalformedDocument:
        raise _Refused("schema", f"NotBefore {str(raw_nb)[:60]!r} is not a time") from None
    duration = _get(props, "DurationInSeconds")
    return EventFacts(
        event_id=event_id, resource_id=rid, subscription=found["sub"].lower(),
        resource_group=found["rg"].lower(), status=status.capitalize(),
        event_type=_text(_get(props, "EventType"), "EventType", 40),
        event_source=_text(_get(props, "EventSource"), "EventSource", 40),
        description=_text(_get(props, "Description"), "Description", 2000),
        duration=duration if isinstance(duration, int) and not isinstance(duration, bool) else None,
        resources=resources, not_before=parsed.timestamp() if parsed else None, as_of=as_of, via=via)


def feed_event(event: Mapping[str, Any], managed: Sequence[str]) -> EventFacts | HealthFacts | Refusal:
    """The facts of one CloudEvent read from the feed hub (module docstring), or why not."""
    try:
        kind, data = str(event.get("type") or ""), event.get("data")
        info = data.get("resourceInfo") if isinstance(data, Mapping) else None
        resource = _get(info, "type") if isinstance(info, Mapping) else None
        what = resource.lower() if isinstance(resource, str) and resource else kind.lower()
        reader = KINDS.get(SCHEDULED_EVENT_RESOURCE if what in _SPELLINGS else what)
        if reader is None:
            if kind.lower().startswith(UNREAD):
                raise _Refused("unread", f"{kind[:120]}: a kind of Azure's events this coordinator does "
                               "not read")
            raise _Refused("type", f"type {kind[:120]!r} (resourceInfo.type {str(resource)[:80]!r}) is not "
                           "a scheduled event")
        return reader(event, managed)
    except _Refused as refused:
        return Refusal(refused.code, refused.detail)


def _scheduled_event(event: Mapping[str, Any], managed: Sequence[str]) -> EventFacts:
    """A scheduled event's CloudEvent, in either spelling of its type."""
    if str(event.get("type") or "").lower() not in _SPELLINGS:
        raise _Refused("type", f"type {str(event.get('type'))[:120]!r} is neither spelling of a scheduled "
                       f"event's ({' or '.join(FEED_EVENT_TYPES)})")
    data = event.get("data")
    if not isinstance(data, Mapping):
        raise _Refused("schema", "data is not an object")
    facts = _event(data.get("resourceInfo"), managed, _event_time(event, data), "feed")
    source = event.get("source")
    if not isinstance(source, str) or source.lower() != f"/subscriptions/{facts.subscription}":
        raise _Refused("subscription", f"source {str(source)[:120]!r} is not the event's subscription")
    return facts


def _event_time(event: Mapping[str, Any], data: Mapping[str, Any]) -> float:
    """The feed event's ``resourceEventTime``, else its ``time``."""
    operational = data.get("operationalInfo")
    as_of = seconds(operational.get("resourceEventTime")) if isinstance(operational, Mapping) else None
    as_of = as_of if as_of is not None else seconds(event.get("time"))
    if as_of is None:
        raise _Refused("schema", "neither resourceEventTime nor time is an RFC 3339 time")
    return as_of


def _health(info: Any, managed: Sequence[str], as_of: float, via: str) -> HealthFacts:
    """An availability status (a feed event's ``resourceInfo``, or a row) read (module docstring)."""
    if not isinstance(info, Mapping):
        raise _Refused("schema", "resourceInfo is not an object")
    props = _get(info, "properties")
    if not isinstance(props, Mapping):
        raise _Refused("schema", "properties is not an object")
    target = _text(_get(props, "targetResourceId"), "targetResourceId", 600, required=True)
    found = VM_ARM_ID.match(target)
    if found is None:
        raise _Refused("resource-id", f"targetResourceId {target[:200]!r} is not a VM's id")
    _managed(found["sub"], managed)
    rid = _text(_get(info, "id"), "the availability status's id", 800, required=True)
    if not rid.lower().startswith(f"{target.lower()}/providers/{AVAILABILITY_RESOURCE}/"):
        raise _Refused("resource-id", f"{rid[:200]!r} is not an availability status of {target[:200]!r}")
    said = _text(_get(props, "availabilityState"), "availabilityState", 20, required=True)
    state = next((s for s in AVAILABILITY_STATES if s.lower() == said.lower()), None)
    if state is None:
        raise _Refused("status", f"availabilityState {said!r} is not {', '.join(AVAILABILITY_STATES)}")
    occurred_text = _get(props, "occurredTime") or _get(props, "occuredTime")
    occurred = seconds(occurred_text) if occurred_text else as_of
    if occurred is None:
        raise _Refused("schema", f"occurredTime {str(occurred_text)[:60]!r} is not a time")
    return HealthFacts(resource_id=target.lower(), state=state, occurred=occurred, via=via)


def _availability_event(event: Mapping[str, Any], managed: Sequence[str]) -> HealthFacts:
    """An ``AvailabilityStatusChanged`` CloudEvent."""
    if str(event.get("type") or "").lower() != AVAILABILITY_EVENT_TYPE.lower():
        raise _Refused("type", f"type {str(event.get('type'))[:120]!r} is not {AVAILABILITY_EVENT_TYPE}")
    data = event.get("data")
    if not isinstance(data, Mapping):
        raise _Refused("schema", "data is not an object")
    facts = _health(data.get("resourceInfo"), managed, _event_time(event, data), "feed")
    source = event.get("source")
    sub = facts.resource_id.split("/")[2]
    if not isinstance(source, str) or source.lower() != f"/subscriptions/{sub}":
        raise _Refused("subscription", f"source {str(source)[:120]!r} is not the VM's subscription")
    return facts


#: What the feed's edge reads, by ``data.resourceInfo.type`` (lower case): its reader.
KINDS: dict[str, Callable[[Mapping[str, Any], Sequence[str]], EventFacts | HealthFacts]] = {
    SCHEDULED_EVENT_RESOURCE: _scheduled_event,
    AVAILABILITY_RESOURCE: _availability_event,
}


T = TypeVar("T")


def _row(row: Mapping[str, Any], table_type: str, read: Callable[[Any, Sequence[str], float, str], T],
         managed: Sequence[str], as_of: float) -> T | Refusal:
    """A Resource Graph row of ``table_type`` read by ``read``, or why not."""
    try:
        if str(row.get("type", "")).lower() != table_type:
            raise _Refused("type", f"row type {str(row.get('type'))[:80]!r} is not {table_type}")
        return read(row, managed, as_of, "graph")
    except _Refused as refused:
        return Refusal(refused.code, refused.detail)


def health_row(row: Mapping[str, Any], managed: Sequence[str], as_of: float) -> HealthFacts | Refusal:
    """The facts of one ``healthresources`` availability status row (answered at ``as_of``), or why not."""
    return _row(row, AVAILABILITY_RESOURCE, _health, managed, as_of)


def event_row(row: Mapping[str, Any], managed: Sequence[str], as_of: float) -> EventFacts | Refusal:
    """The facts of one ``maintenanceresources`` row (answered at ``as_of``), or why not."""
    return _row(row, EVENT_TABLE_TYPE, _event, managed, as_of)


def _domain(value: Any) -> str:
    if isinstance(value, bool):
        return ""
    if isinstance(value, int):
        return str(value)
    return value if isinstance(value, str) and value.isdigit() and len(value) < 4 else ""


def _tags(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    if len(value) > MAX_TAGS:
        raise _Refused("text", f"{len(value)} tags (Azure allows {MAX_TAGS})")
    return {_text(k, "a tag name", 512).lower(): _text(v if isinstance(v, str) else str(v), "a tag value",
                                                       256) for k, v in value.items()}


def vm_row(row: Mapping[str, Any], managed: Sequence[str]) -> VmFacts | Refusal:
    """One VM row of ``resources`` or ``computeresources`` (module docstring), or why not."""
    try:
        rid = _text(row.get("id"), "the VM's id", 600, required=True)
        found = VM_ARM_ID.match(rid)
        if found is None:
            raise _Refused("resource-id", f"{rid[:200]!r} is not a VM's id")
        _managed(found["sub"], managed)
        props = row.get("properties")
        props = props if isinstance(props, Mapping) else {}
        vm_id = _text(_get(props, "vmId"), "properties.vmId", 64, required=True)
        zones = row.get("zones")
        zone = _text(zones[0], "a zone", 8) if isinstance(zones, list) and zones else ""
        avset, scale_set, view, set_id = "", "", "", ""
        if found["set"]:  # a uniform scale set's VM: named <set>_<instanceId>, domains in its instance view
            scale_set = found["set"]
            name = f"{scale_set}_{found['instance']}"
            view = rid + "/instanceView"
            set_id = rid[:found.start("instance") - len("/virtualMachines/")].lower()
        else:
            name = found["vm"]
            for key, kind in (("availabilitySet", "avset"), ("virtualMachineScaleSet", "set")):
                ref = _get(props, key)
                group = GROUP_ARM_ID.match(str(_get(ref, "id") or "")) if isinstance(ref, Mapping) else None
                if group is not None:
                    set_id = group.string.lower()
                if group is not None and kind == "avset":
                    avset = group["name"]
                elif group is not None:
                    scale_set = group["name"]
        fault = _domain(_get(props, "platformFaultDomain"))
        update = _domain(_get(props, "platformUpdateDomain"))
        if avset and not (fault and update):
            view = rid + "/instanceView"  # an availability set's VM: Resource Graph has no domains
        return VmFacts(
            key=vm_id.lower(), vm_id=vm_id, name=_text(name, "the VM's name", required=True), resource_id=rid,
            subscription=found["sub"].lower(), resource_group=found["rg"].lower(),
            location=_text(row.get("location"), "location", 60).lower(), zone=zone,
            availability_set=_text(avset, "the availability set's name"),
            scale_set=_text(scale_set, "the scale set's name"), fault_domain=fault, update_domain=update,
            tags=_tags(row.get("tags")), instance_view=view, set_id=set_id, opted_in=_opted_in(props))
    except _Refused as refused:
        return Refusal(refused.code, refused.detail)


def _opted_in(props: Any) -> bool:
    policy = _get(props, "scheduledEventsPolicy") if isinstance(props, Mapping) else None
    targets = _get(policy, "scheduledEventsAdditionalPublishingTargets") \
        if isinstance(policy, Mapping) else None
    target = _get(targets, "eventGridAndResourceGraph") if isinstance(targets, Mapping) else None
    return isinstance(target, Mapping) and _get(target, "enable") is True


def set_row(row: Mapping[str, Any]) -> tuple[str, bool] | None:
    """(ARM id in lower case, opted in) of an availability set's or scale set's ``resources`` row."""
    rid = row.get("id")
    if not isinstance(rid, str) or GROUP_ARM_ID.match(rid) is None:
        return None
    return rid.lower(), _opted_in(row.get("properties"))


def domains(view: Any) -> tuple[str, str]:
    """(fault domain, update domain) from an instance view's body ("" for what it lacks)."""
    if not isinstance(view, Mapping):
        return "", ""
    return _domain(_get(view, "platformFaultDomain")), _domain(_get(view, "platformUpdateDomain"))
