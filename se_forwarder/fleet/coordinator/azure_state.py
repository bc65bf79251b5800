"""What the fold keeps of Azure's own view (the feed and Resource Graph), beside the agents' reports.

``AzureView`` is ``FleetState.azure``. Like the rest of the fold, it is merged so that the order
in which Azure's observations arrive does not matter (Event Grid does not keep order, and the feed
and Resource Graph interleave differently on every instance): an event's status is the highest
rank of the life cycle Azure showed (Scheduled < Started < Canceled < Completed), its other fields
come from the newest observation (``as_of``), times are minima or maxima. Keys are the fold's: an
EventId and a ``vmId`` in lower case.

- ``events``: Azure's record of each scheduled event (``AzureEvent``).
- ``vms``: each VM Azure lists in the managed subscriptions, as its last topology refresh saw it
  (``azure_facts.VmFacts``); ``topology_at``: when that refresh was answered, per subscription.
- ``claims``: what each agent said of its own topology, kept when Azure's replaced it in the VM's
  record (azure_topology.py); a difference is a finding (azure_view.py).
- ``synced``: per subscription, when the last complete catch-up of its scheduled events
  (``maintenanceresources``, every page) was answered: how fresh Azure's view is.

``dump``/``load`` are its part of the snapshot (snapshot.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .azure_facts import VmFacts

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
    return {
        "events": [{
            "key": e.key, "eventId": e.event_id, "resourceId": e.resource_id, "subscription": e.subscription,
            "resourceGroup": e.resource_group, "rank": e.rank, "eventType": e.event_type,
            "eventSource": e.event_source, "description": e.description, "duration": e.duration,
            "resources": list(e.resources), "infoAsOf": _num(e.info_as_of), "notBefore": e.not_before,
            "notBeforeAsOf": _num(e.not_before_as_of), "scheduledAt": e.scheduled_at,
            "startedAt": e.started_at, "endedAt": e.ended_at, "asOf": _num(e.as_of), "via": sorted(e.via),
        } for _, e in sorted(view.events.items())],
        "vms": [{**{k: getattr(v, k) for k in VmFacts.__dataclass_fields__},
                 "tags": dict(sorted(v.tags.items()))} for _, v in sorted(view.vms.items())],
        "topologyAt": dict(sorted(view.topology_at.items())),
        "claims": {k: [*c[:6], [list(t) for t in c[6]]] for k, c in sorted(view.claims.items())},
        "synced": dict(sorted(view.synced.items())),
    }


def load(data: Any) -> AzureView:
    """The view of a snapshot's ``azure`` member (an empty one for a snapshot without it)."""
    view = AzureView()
    if not data:
        return view
    for item in data["events"]:
        event = AzureEvent(
            key=str(item["key"]), event_id=str(item["eventId"]), resource_id=item["resourceId"],
            subscription=item["subscription"], resource_group=item["resourceGroup"], rank=int(item["rank"]),
            event_type=item["eventType"], event_source=item["eventSource"], description=item["description"],
            duration=item["duration"], resources=tuple(item["resources"]), info_as_of=_back(item["infoAsOf"]),
            not_before=item["notBefore"], not_before_as_of=_back(item["notBeforeAsOf"]),
            scheduled_at=item["scheduledAt"], started_at=item["startedAt"], ended_at=item["endedAt"],
            as_of=_back(item["asOf"]), via=set(item["via"]))
        view.events[event.key] = event
    for item in data["vms"]:
        vm = VmFacts(**{**item, "tags": dict(item["tags"])})
        view.vms[vm.key] = vm
    view.topology_at = {str(k): float(v) for k, v in data["topologyAt"].items()}
    view.claims = {str(k): (*[str(x) for x in c[:6]], tuple((str(a), str(b)) for a, b in c[6]))  # type: ignore[misc]
                   for k, c in data["claims"].items()}
    view.synced = {str(k): float(v) for k, v in data["synced"].items()}
    return view
