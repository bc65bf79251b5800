"""What happened to the demo's fleet, read from the simulator's own record (simulator/history.py).

Pure: event lives and the topology in, facts out. A VM is *down* while an event naming it in its
Resources is Started, from the moment the simulator started it to the moment it left the document
(an event still Started counts up to ``now``). The scopes are those the demo's budgets count: each
VM's group (its availability set, scale set, or itself for a standalone VM) and its zone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..fleet.coordinator.view import timeline
from ..simulator.history import EventLife


@dataclass(frozen=True)
class Span:
    vm: str
    start: float
    end: float
    event_id: str


def spans(lives: Iterable[EventLife], now: float) -> list[Span]:
    """Every VM's Started spans, by start."""
    out = [Span(vm, life.started, life.ended if life.ended is not None else now, life.event_id)
           for life in lives if life.started is not None for vm in life.resources]
    return sorted(out, key=lambda s: (s.start, s.vm))


def scopes(topology: Any) -> dict[str, tuple[str, ...]]:
    """VM -> the scopes it counts in: ``group <name>`` and, for a zonal VM, ``zone <zone>``."""
    out: dict[str, tuple[str, ...]] = {}
    for vm in topology.vm_names:
        zone = str(topology.compute_overrides(vm).get("zone") or "")
        out[vm] = (f"group {topology.group_of(vm)}", *((f"zone {zone}",) if zone else ()))
    return out


def most_down(all_spans: Sequence[Span], scopes_of: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Scope -> the most VMs of it down at once, by the fleet page's budget-line rule (timeline.down:
    half-open spans, so one VM coming back as the next goes down is one; a VM down for two events
    at once counts once)."""
    by_scope: dict[str, list[timeline.Span]] = {s: [] for vm_scopes in scopes_of.values() for s in vm_scopes}
    for span in all_spans:
        for scope in scopes_of.get(span.vm, ()):
            by_scope[scope].append(timeline.Span(span.vm, "started", span.start, span.end, span.event_id))
    return {scope: timeline.peak(timeline.down(items)) for scope, items in by_scope.items()}


@dataclass(frozen=True)
class GroupStory:
    """One group's maintenance by the rollout's events for its VMs."""

    vms: int
    started: int  # of its events
    by_own_request: int  # started by a StartRequests from the VM the event is for
    at_not_before: int  # started by Azure at NotBefore
    first_start: float | None
    last_end: float | None
    not_before: float | None  # the (earliest) NotBefore Azure would have started them at


def group_story(lives: Sequence[EventLife]) -> GroupStory:
    started = [life for life in lives if life.started is not None]
    ends = [life.ended for life in lives if life.ended is not None]
    not_befores = [life.not_before for life in lives if life.not_before is not None]
    return GroupStory(
        vms=len({vm for life in lives for vm in life.resources}),
        started=len(started),
        by_own_request=sum(1 for life in started if life.how == "approved"
                           and life.approved_by in life.resources),
        at_not_before=sum(1 for life in started if life.how == "not-before"),
        first_start=min((life.started for life in started if life.started is not None), default=None),
        last_end=max(ends) if len(ends) == len(lives) and ends else None,
        not_before=min(not_befores, default=None),
    )


def started_during(lives: Iterable[EventLife], start: float, end: float) -> int:
    """How many of ``lives`` started within [start, end]."""
    return sum(1 for life in lives if life.started is not None and start <= life.started <= end)
