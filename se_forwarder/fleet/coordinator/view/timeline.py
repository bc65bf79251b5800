"""The rollout timeline: when each VM's maintenance was scheduled, approved, started and healthy again.

``spans(state, policy, idx, now)`` gives, for every event the fold still keeps (open ones, and ended
ones until ``prune`` drops them), one span per VM it affects (its Resources resolved, scopes.py)
and stage, from the fold's times (the agents' CloudEvent times and the decisions' times):

===============  =============================================  =====================================
kind             from                                           to (``None``: still going on)
===============  =============================================  =====================================
``scheduled``    the event's first Scheduled report             approved, started or ended, the first
``approved``     its first counted approval (a decision that    started or ended
                 counts in this mode, or an agent's echo)
``started``      its first Started report, or when it was due   when the VM was done with it
                 (availability.due_at: Azure starts it then)    (availability.py); canceled: ended
``min_healthy``  that completion                                when it was back (availability.back_at)
``recovering``   with ``free_slot = "recovered"``: when it was  when it was seen recovered
                 back (availability.back_at)                    (decide/recovery.py)
===============  =============================================  =====================================

A span that would end before it starts (clocks of the agents and of the coordinator disagree) is
left out. Azure starts an event for all its Resources at once, so a VM's Started span begins with the
event's first Started report.

``down(spans)`` is a group's budget line: step points ``(time, VMs down from then on)``, where a VM
is down while it is in an ``approved``, ``started``, ``min_healthy`` or ``recovering`` span: what
the coordinator counts against a budget (scopes.py), without ``not-watched``, ``prepare-failed``,
``unhealthy`` and ``azure-unavailable``, whose history the fold does not keep. Spans are half-open,
so one VM coming back as the next goes down is one down, not two; a VM in two spans at once counts
once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ..config.policy import Policy
from ..decide.availability import back_at, completions, due_at, echoes
from ..decide.recovery import RECOVERED, recovered_at
from ..decide.scopes import ScopeIndex, resolve
from ..fold.state import EventRecord, FleetState

KINDS = ("scheduled", "approved", "started", "min_healthy", "recovering")
DOWN_KINDS = frozenset(KINDS[1:])


@dataclass(frozen=True, slots=True)
class Span:
    vm: str  # VM key
    kind: str  # one of KINDS
    start: float
    end: float | None  # None: going on
    event: str  # event key


def spans(state: FleetState, policy: Policy, idx: ScopeIndex, now: float | None = None) -> list[Span]:
    """Every stage of every kept event for each VM it affects (module docstring), by start; with
    ``now``, an event due by then is Started from when it was due, and a ``recovering`` span still
    going on is there only once it began."""
    out: list[Span] = []
    for key in sorted(state.events):
        record = state.events[key]
        if record.rank == 0:
            continue
        vms = resolve(state, idx, record).vms
        if vms:
            due = due_at(state, record)
            started = min((t for t in (record.started_at, due if now is not None and due is not None
                                       and due <= now else None) if t is not None), default=None)
            done = completions(state, idx, record, vms, policy)
            approved = approved_at(record, policy, idx, vms)
            out.extend(_event_spans(record, vms, policy, done, approved, started))
            if policy.free_slot == RECOVERED:
                out.extend(_recovering(state, idx, record, policy, done, now))
    out.sort(key=lambda s: (s.start, s.vm, KINDS.index(s.kind), s.event))
    return out


def _event_spans(record: EventRecord, vms: tuple[str, ...], policy: Policy, done: dict[str, float | None],
                 approved: float | None, started: float | None) -> list[Span]:
    ended = record.ended_at
    waiting = min((t for t in (approved, started, ended) if t is not None), default=None)
    out: list[Span] = []
    for vm in vms:
        back = (done[vm] if done[vm] is not None else ended) if vm in done else None
        stages = [("scheduled", record.scheduled_at, waiting),
                  ("approved", approved, started if started is not None else ended),
                  ("started", started, back)]
        came_back = done.get(vm)
        if came_back is not None:
            stages.append(("min_healthy", came_back, back_at(policy, record, vm, came_back)))
        out.extend(Span(vm, kind, start, end, record.key) for kind, start, end in stages
                   if start is not None and (end is None or end > start))
    return out


def _recovering(state: FleetState, idx: ScopeIndex, record: EventRecord, policy: Policy,
                done: dict[str, float | None], now: float | None) -> list[Span]:
    """Each VM's wait for its recovery after ``min_healthy`` (module docstring)."""
    out = []
    for vm, came_back in done.items():
        if came_back is None:
            continue
        start = back_at(policy, record, vm, came_back)
        end = recovered_at(state, idx, record, vm, came_back)
        if (end is None and (now is None or now > start)) or (end is not None and end > start):
            out.append(Span(vm, "recovering", start, end, record.key))
    return out


def approved_at(record: EventRecord, policy: Policy, idx: ScopeIndex, vms: tuple[str, ...]) -> float | None:
    """The first approval that counts: a live decision (or a shadow one in shadow mode), or an echo
    from a VM the event affects."""
    times = [d.time for d in record.approvals.values() if policy.shadow or not d.shadow]
    times += [moment for moment, _ in echoes(idx, record, vms).values()]
    return min(times, default=None)


def down(items: Iterable[Span]) -> list[tuple[float, int]]:
    """The budget line of these spans (module docstring): ``(time, VMs down)`` at each change."""
    per_vm: dict[str, list[tuple[float, float]]] = {}
    for span in items:
        if span.kind in DOWN_KINDS:
            end = float("inf") if span.end is None else span.end
            per_vm.setdefault(span.vm, []).append((span.start, end))
    change: Counter[float] = Counter()
    for intervals in per_vm.values():
        for start, end in _union(intervals):
            change[start] += 1
            change[end] -= 1
    out: list[tuple[float, int]] = []
    level = 0
    for moment in sorted(change):
        if change[moment] and moment != float("inf"):
            level += change[moment]
            out.append((moment, level))
    return out


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Half-open intervals merged where they overlap or touch."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def peak(line: list[tuple[float, int]]) -> int:
    """The most VMs down at once on a budget line."""
    return max((level for _, level in line), default=0)
