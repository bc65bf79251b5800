"""Azure's events in the fold: merged with what the agents reported, Azure's word winning. Pure.

``fold_event(state, facts)`` folds one observation (``azure_facts.EventFacts``, from the feed or
from Resource Graph) into ``state.azure.events`` and then into the event's fold record
(``reconcile``), which the agents' reports also update (fold/dispatch.py calls ``reconcile`` after every
report of an event Azure knows). So the record the decision pass reads is the merge of both
sources, whatever their order:

- An event Azure reports and no agent did is in the fold, with its Resources, type, NotBefore and
  status, and counts against the budgets like any other (its VMs resolved by Azure's topology,
  azure_topology.names).
- Its Resources, type, source, description, duration and NotBefore are Azure's.
- Its status: Azure's when Azure shows it ended (Completed, Canceled). Otherwise the more
  advanced of Azure's and the agents' up to Started: an agent that saw it Started before Azure's
  feed said so is believed (that is the cautious side), an agent that says it completed while
  Azure still shows it Started or Scheduled is not (Azure: Started, agent: completed -> Started).
  view/azure.py shows and counts each disagreement.
- Its times (first Scheduled and Started, last completed and ended) include Azure's.
- An event Azure shows ended that the fold never knew is not folded: Resource Graph keeps past
  events, and their end is history. (Should the feed deliver an event's end before its start,
  the next catch-up ends it.)

The coordinator's ``acknowledge`` outcomes (decide/arm_path.py) fold here too: an approval through
``acknowledge`` that Azure answered is the event's echo from ``ARM``, a refusal is a rejection of
that approval by ``ARM`` (decide/evaluate.py then tries the next path).
"""

from __future__ import annotations

from collections.abc import Iterable

from . import topology as azure_topology
from .azure_state import AzureEvent, CatchUp, EventFacts
from .caps import FOLDED, LATE, SKIPPED
from .health import fold_azure_health
from .health import forget as forget_health
from .state import COMPLETED, STARTED, TERMINAL, DecisionRecord, EventRecord, FleetState

ARM = "arm"  # the echo and rejection key of approvals through acknowledge (never a VM key)
REJECTIONS = ("forbidden", "disallowed-by-policy", "unauthorized", "not-found", "refused")  # end that path
SUFFIX = "/acknowledge"  # an acknowledge decision's id: <its approval's id>/acknowledge


def fold_event(state: FleetState, facts: EventFacts) -> str:
    """Fold one observation of an event by Azure; ``folded``, ``late`` for a pruned event, or
    ``skipped`` for one Azure shows ended that the fold never knew (Resource Graph keeps past events:
    history, not maintenance to pace)."""
    key = facts.event_id.lower()
    if key in state.gone:
        return LATE
    if facts.rank >= TERMINAL and key not in state.azure.events and key not in state.events:
        return SKIPPED
    state.note("azure_events", key)
    state.note("events", key)
    event = state.azure.events.get(key)
    if event is None:
        event = state.azure.events[key] = AzureEvent(key=key, event_id=facts.event_id)
    elif facts.event_id < event.event_id:
        event.event_id = facts.event_id
    event.via.add(facts.via)
    event.as_of = max(event.as_of, facts.as_of)
    event.rank = max(event.rank, facts.rank)
    if facts.as_of >= event.info_as_of:
        event.info_as_of = facts.as_of
        event.resource_id, event.subscription = facts.resource_id, facts.subscription
        event.resource_group, event.event_type = facts.resource_group, facts.event_type
        event.event_source, event.description = facts.event_source, facts.description
        event.duration, event.resources = facts.duration, facts.resources
    if facts.not_before is not None and facts.as_of >= event.not_before_as_of:
        event.not_before, event.not_before_as_of = facts.not_before, facts.as_of
    status = facts.rank
    if status == 1:
        event.scheduled_at = _low(event.scheduled_at, facts.as_of)
    elif status == STARTED:
        event.started_at = _low(event.started_at, facts.as_of)
    else:
        event.ended_at = _high(event.ended_at, facts.as_of)
    record = state.events.get(key)
    if record is None:
        record = state.events[key] = EventRecord(key=key, event_id=event.event_id)
    reconcile(state, record)
    return FOLDED


def _low(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _high(a: float | None, b: float) -> float:
    return b if a is None else max(a, b)


def merged_rank(azure: int, agents: Iterable[int]) -> int:
    """The event's status from Azure's and the agents' (module docstring): an agent's Started or
    completed says it started; an agent's canceled (it went away unstarted) does not."""
    if azure >= TERMINAL:
        return azure
    started = any(rank in (STARTED, COMPLETED) for rank in agents)
    return max(azure, STARTED) if started else azure


def reconcile(state: FleetState, record: EventRecord) -> None:
    """Put Azure's word into the event's fold record (module docstring); nothing when Azure does
    not know the event."""
    event = state.azure.events.get(record.key)
    if event is None:
        return
    if event.resources and (not record.has_resources or record.resources != event.resources):
        record.revision += 1
    if event.resources:
        record.resources, record.has_resources = event.resources, True
    record.event_type = event.event_type or record.event_type
    if event.event_type and event.event_type not in record.types:  # the types it was reported under
        record.types = tuple(sorted((*record.types, event.event_type)))
    record.event_source = event.event_source or record.event_source
    record.description = event.description or record.description
    record.duration = event.duration if event.duration is not None else record.duration
    if event.not_before is not None:
        record.not_before = event.not_before
    if event.event_id < record.event_id:
        record.event_id = event.event_id
    rank = record.rank = merged_rank(event.rank, record.reports.values())
    if event.scheduled_at is not None:
        record.scheduled_at = _low(record.scheduled_at, event.scheduled_at)
    if event.started_at is not None:
        record.started_at = _low(record.started_at, event.started_at)
    if event.ended_at is not None and event.rank >= TERMINAL:
        record.ended_at = _high(record.ended_at, event.ended_at)
        if event.rank == COMPLETED:
            record.completed_at = _high(record.completed_at, event.ended_at)
    record.last_report = max(record.last_report, event.as_of)
    if 0 < rank < TERMINAL:
        state.open_events.add(record.key)
    else:
        state.open_events.discard(record.key)
        if rank == COMPLETED and record.completed_at is not None:
            state.settling.add(record.key)


def ended(state: FleetState, record: EventRecord) -> bool | None:
    """Whether Azure shows the event ended (Completed or Canceled); None when Azure does not know it."""
    event = state.azure.events.get(record.key)
    return None if event is None else event.rank >= TERMINAL


def fold_acknowledged(state: FleetState, decision: DecisionRecord) -> None:
    """An ``acknowledge`` decision (the outcome of an approval through ARM) on its event's record."""
    event_id = decision.data.get("EventId")
    record = state.events.get(event_id.lower()) if isinstance(event_id, str) else None
    if record is None:
        return
    state.note("events", record.key)
    if decision.code == "approved":
        old = record.echoes.get(ARM)
        if old is None or decision.time < old[0]:
            record.echoes[ARM] = (decision.time, "coordinator:acknowledge")
    elif decision.code in REJECTIONS and decision.id.endswith(SUFFIX):
        record.rejections[decision.id[:-len(SUFFIX)]] = (ARM, decision.code)  # the approval's id


def fold_catch_up(state: FleetState, result: CatchUp) -> None:
    """A Resource Graph catch-up (azure/graph.py): its topology, its events, its VMs' health, and
    the subscriptions it read completely, whose view is then fresh as of its start."""
    azure_topology.fold_topology(state, result.topology, result.vms, result.as_of)
    for facts in result.events:
        fold_event(state, facts)
    for health in result.health:
        fold_azure_health(state, health)
    for sub in result.covered:
        state.azure.synced[sub] = max(state.azure.synced.get(sub, result.as_of), result.as_of)


def forget(state: FleetState) -> None:
    """Drop Azure's record of the events the fold no longer keeps (retention.py pruned them)."""
    for key in [k for k in state.azure.events if k not in state.events]:
        state.note("azure_events", key)
        del state.azure.events[key]
    forget_health(state)
