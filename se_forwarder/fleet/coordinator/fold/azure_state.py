"""What the fold keeps of Azure's own view (the feed and Resource Graph), beside the agents' reports.

``AzureView`` is ``FleetState.azure``. Like the rest of the fold, it is merged so that the order
in which Azure's observations arrive does not matter (Event Grid does not keep order, and the feed
and Resource Graph interleave differently on every instance): an event's status is the highest
rank of the life cycle Azure showed (Scheduled < Started < Canceled < Completed), its other fields
come from the newest observation (``as_of``), times are minima or maxima. Keys are the fold's: an
EventId and a ``vmId`` in lower case.

- ``events``: Azure's record of each scheduled event (``AzureEvent``).
- ``vms``: each VM Azure lists in the managed subscriptions, as its last topology refresh saw it
  (``VmFacts``, as edge/azure_facts.py read them); ``topology_at``: when that refresh was answered,
  per subscription.
- ``claims``: what each agent said of its own topology, kept when Azure's replaced it in the VM's
  record (fold/topology.py); a difference is a finding (view/azure.py).
- ``health``: Resource Health's word on each VM (``AzureHealth``), keyed by the VM's ARM id in lower
  case: the newest ``availabilityState`` by ``occurredTime`` (fold/health.py).
- ``synced``: per subscription, when the last complete catch-up of its scheduled events
  (``maintenanceresources``, every page) was answered: how fresh Azure's view is.

``dump``/``load`` are its part of the snapshot (snapshot.py). The facts themselves (``EventFacts``,
``VmFacts``, a ``CatchUp``) are typed here; edge/azure_facts.py, at the edge, makes them from what Azure
sent.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

STATUS_RANKS = {"scheduled": 1, "started": 2, "canceled": 3, "completed": 4}  # as state.py ranks them
_SUB = r"(?P<sub>[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12})"
_RG = r"(?P<rg>[-\w._()]{1,90})"
EVENT_ARM_ID = re.compile(
    rf"^/subscriptions/{_SUB}/resourcegroups/{_RG}/providers/microsoft\.compute/"
    r"(?P<kind>virtualmachines|virtualmachinescalesets|availabilitysets)/(?P<owner>[^/\s]{1,80})"
    r"/providers/microsoft\.maintenance/scheduledevents/(?P<event>[^/\s]{1,128})\Z", re.I)


@dataclass(frozen=True)
class EventFacts:
    event_id: str
    resource_id: str  # the scheduled event's ARM id (what ``acknowledge`` is posted to)
    subscription: str  # lower case
    resource_group: str  # lower case
    status: str  # Scheduled | Started | Completed | Canceled
    event_type: str
    event_source: str
    description: str
    duration: int | None
    resources: tuple[str, ...]
    not_before: float | None
    as_of: float
    via: str  # feed | graph

    @property
    def rank(self) -> int:
        return STATUS_RANKS[self.status.lower()]


@dataclass(frozen=True)
class VmFacts:
    key: str  # vmId, lower case
    vm_id: str
    name: str
    resource_id: str
    subscription: str  # lower case
    resource_group: str  # lower case
    location: str
    zone: str
    availability_set: str  # its name as Azure spells it, or ""
    scale_set: str  # its name as Azure spells it, or ""
    fault_domain: str  # "" when Resource Graph does not have it (see instance_view)
    update_domain: str
    tags: dict[str, str] = field(default_factory=dict, hash=False)  # names in lower case
    instance_view: str = ""  # the ARM path of its instance view, when the domains must come from it
    set_id: str = ""  # its availability set's or scale set's ARM id, lower case
    opted_in: bool = False  # its events reach Azure's feed and Resource Graph (module docstring)


AVAILABILITY_STATES = ("Available", "Unavailable", "Degraded", "Unknown")
DOWN_STATES = ("Unavailable", "Degraded")  # a VM Azure shows so counts as down (decide/availability.py)


@dataclass(frozen=True)
class HealthFacts:
    """One observation of a VM's availability by Resource Health (edge/azure_facts.py)."""

    resource_id: str  # the VM's ARM id, lower case
    state: str  # one of AVAILABILITY_STATES
    occurred: float  # when it took this state (occurredTime)
    via: str  # feed | graph


@dataclass(frozen=True, slots=True)
class AzureHealth:
    state: str
    occurred: float
    via: str

    @property
    def down(self) -> bool:
        return self.state in DOWN_STATES


@dataclass
class CatchUp:
    """What one Resource Graph catch-up read (azure/graph.py)."""

    as_of: float  # when it began: what it read is at least this fresh
    covered: tuple[str, ...] = ()  # subscriptions read completely (topology and events)
    topology: tuple[str, ...] = ()  # subscriptions whose VMs were all listed
    vms: list[VmFacts] = field(default_factory=list)
    events: list[EventFacts] = field(default_factory=list)
    health: list[HealthFacts] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)  # reason -> rows
    errors: list[str] = field(default_factory=list)
    queries: int = 0
    views: int = 0


Claim = tuple[str, str, str, str, str, str, tuple[tuple[str, str], ...]]  # see azure_topology.CLAIMED


@dataclass(slots=True)
class AzureEvent:
    key: str
    event_id: str
    resource_id: str = ""
    subscription: str = ""
    resource_group: str = ""
    rank: int = 0  # highest life-cycle rank Azure showed (state.py's ranks)
    event_type: str = ""
    event_source: str = ""
    description: str = ""
    duration: int | None = None
    resources: tuple[str, ...] = ()
    info_as_of: float = float("-inf")  # of the observation the fields above come from
    not_before: float | None = None
    not_before_as_of: float = float("-inf")
    scheduled_at: float | None = None  # earliest observation per status
    started_at: float | None = None
    ended_at: float | None = None  # latest Completed or Canceled observation
    as_of: float = float("-inf")  # newest observation of any kind
    via: set[str] = field(default_factory=set)  # feed, graph: where it was seen


@dataclass
class AzureView:
    events: dict[str, AzureEvent] = field(default_factory=dict)
    vms: dict[str, VmFacts] = field(default_factory=dict)
    topology_at: dict[str, float] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    synced: dict[str, float] = field(default_factory=dict)
    generation: int = field(default=0, repr=False, compare=False)  # one more at every topology refresh
    health: dict[str, AzureHealth] = field(default_factory=dict)  # VM ARM id (lower case) -> its health
    # Derived, not in snapshots: (subscription, resource group, lower-case name) -> VM key.
    by_name: dict[tuple[str, str, str], str] | None = field(default=None, repr=False, compare=False)

    def names(self) -> dict[tuple[str, str, str], str]:
        if self.by_name is None:
            self.by_name = {(v.subscription, v.resource_group, v.name.lower()): k
                            for k, v in self.vms.items()}
        return self.by_name


def _num(value: float | None) -> float | None:
    return None if value is None or value in (float("inf"), float("-inf")) else value


def _back(value: Any) -> float:
    return float("-inf") if value is None else float(value)


def dump(view: AzureView) -> dict[str, Any]:
    """The view as JSON (canonical order)."""
    return {**dump_rest(view), "events": [event_data(e) for _, e in sorted(view.events.items())],
            "vms": [vm_data(v) for _, v in sorted(view.vms.items())]}


def dump_rest(view: AzureView) -> dict[str, Any]:
    """The view but its events and VMs (snapshot.lines writes those one a line)."""
    return {**freshness(view),
            "claims": {k: [*c[:6], [list(t) for t in c[6]]] for k, c in sorted(view.claims.items())},
            "health": {k: health_data(h) for k, h in sorted(view.health.items())}}


def health_data(h: AzureHealth) -> list[Any]:
    return [h.state, h.occurred, h.via]


def freshness(view: AzureView) -> dict[str, Any]:
    """When Azure's lists were last read, by subscription."""
    return {"topologyAt": dict(sorted(view.topology_at.items())), "synced": dict(sorted(view.synced.items()))}


def event_data(e: AzureEvent) -> dict[str, Any]:
    return {
        "key": e.key, "eventId": e.event_id, "resourceId": e.resource_id, "subscription": e.subscription,
        "resourceGroup": e.resource_group, "rank": e.rank, "eventType": e.event_type,
        "eventSource": e.event_source, "description": e.description, "duration": e.duration,
        "resources": list(e.resources), "infoAsOf": _num(e.info_as_of), "notBefore": e.not_before,
        "notBeforeAsOf": _num(e.not_before_as_of), "scheduledAt": e.scheduled_at,
        "startedAt": e.started_at, "endedAt": e.ended_at, "asOf": _num(e.as_of), "via": sorted(e.via),
    }


def vm_data(v: VmFacts) -> dict[str, Any]:
    return {**{k: getattr(v, k) for k in VmFacts.__dataclass_fields__}, "tags": dict(sorted(v.tags.items()))}


def load(data: Any) -> AzureView:
    """The view of a snapshot's ``azure`` member (an empty one for a snapshot without it)."""
    view = AzureView()
    if not data:
        return view
    load_rest(view, data)
    for item in data.get("events", ()):
        load_event(view, item)
    for item in data.get("vms", ()):
        load_vm(view, item)
    return view


def load_rest(view: AzureView, data: dict[str, Any]) -> None:
    view.topology_at = {str(k): float(v) for k, v in data["topologyAt"].items()}
    view.claims = {str(k): (*[str(x) for x in c[:6]], tuple((str(a), str(b)) for a, b in c[6]))  # type: ignore[misc]
                   for k, c in data["claims"].items()}
    view.synced = {str(k): float(v) for k, v in data["synced"].items()}
    view.health = {str(k): AzureHealth(str(h[0]), float(h[1]), str(h[2]))  # absent from older snapshots
                   for k, h in (data.get("health") or {}).items()}


def load_event(view: AzureView, item: dict[str, Any]) -> None:
    event = AzureEvent(
        key=str(item["key"]), event_id=str(item["eventId"]), resource_id=item["resourceId"],
        subscription=item["subscription"], resource_group=item["resourceGroup"], rank=int(item["rank"]),
        event_type=item["eventType"], event_source=item["eventSource"], description=item["description"],
        duration=item["duration"], resources=tuple(item["resources"]), info_as_of=_back(item["infoAsOf"]),
        not_before=item["notBefore"], not_before_as_of=_back(item["notBeforeAsOf"]),
        scheduled_at=item["scheduledAt"], started_at=item["startedAt"], ended_at=item["endedAt"],
        as_of=_back(item["asOf"]), via=set(item["via"]))
    view.events[event.key] = event


def load_vm(view: AzureView, item: dict[str, Any]) -> None:
    vm = VmFacts(**{**item, "tags": dict(item["tags"])})
    view.vms[vm.key] = vm
