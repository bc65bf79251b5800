"""The fleet's maintenance events for chat: one message per EventId and stage, never one per VM.

``EventStages.take`` runs on the service thread (the fold is its own) and compares each event of the
fold with the stage already accounted for it. The stages of an EventId, from every VM's reports:

- ``scheduled``: some VM reported it (Scheduled); its time is the newest full report's;
- ``started``: some VM reported it Started (the earliest such report's time);
- ``completed`` or ``canceled``: the fold holds it ended: every VM of its Resources reported it
  over itself (``rank`` completed, else canceled; the latest report's time). Only one of the two
  is ever sent; while a VM has not, a peer's completion announces no end.

A stage is sent once, when a look first sees it, if this instance acts (a standby only notes what
it saw) and the stage's time is not before ``since`` (the start of the notifier: nothing that
happened before is announced, also not what the fold reads later from the hub's backlog). A stage
passed between two looks is still sent, in order, except Scheduled: an event first seen already
started or ended is old news as Scheduled (and its first report's time is no longer known). A
canceled event has no started stage. The message names the VMs the event affects
(scopes.resolve; the reporters when it lists no Resources) with their group, zone and fault domain
(notify.fleet).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ....notify import fleet as words
from ....notify.describe import group_label
from ....timestamps import rfc3339
from ..config.policy import Policy
from ..decide.scopes import index, resolve
from ..fold.state import COMPLETED, SCHEDULED, STARTED, TERMINAL, EventRecord, FleetState

ENDED = 3


def stage_of(record: EventRecord, open_events: set[str]) -> int:
    """0 nothing reported, 1 scheduled, 2 started, 3 ended (completed or canceled)."""
    if record.rank >= TERMINAL:
        if record.key not in open_events:
            return ENDED
        return 2 if record.started_at is not None or record.completed_at is not None else 1
    return {SCHEDULED: 1, STARTED: 2}.get(record.rank, 0)


def stage_time(record: EventRecord, stage: int) -> float | None:
    if stage == 1:
        return record.info_stamp[0] if record.has_resources else record.last_report
    if stage == 2:
        return record.started_at
    return record.ended_at


class EventStages:
    """Fleet events not announced before (module docstring)."""

    def __init__(self, since: float, policy: Policy | None = None) -> None:
        self.since, self.policy = since, policy
        self.stage: dict[str, int] = {}  # event key -> highest stage accounted

    def take(self, state: FleetState, acting: bool) -> list[tuple[dict[str, Any], datetime | None]]:
        """The messages (CloudEvent, started time) of the new stages, oldest first."""
        out: list[tuple[float, dict[str, Any], datetime | None]] = []
        for key, record in state.events.items():
            reached, done = stage_of(record, state.open_events), self.stage.get(key, 0)
            if reached <= done:
                continue
            self.stage[key] = reached
            if not acting:
                continue
            for stage in range(max(done + 1, 2 if done == 0 and reached > 1 else 1), reached + 1):
                moment = stage_time(record, stage)
                if moment is None or moment < self.since:
                    continue
                out.append((moment, self._message(state, record, stage, moment), _at(record.started_at)))
        if len(self.stage) > 2 * len(state.events) + 1000:  # forget what prune dropped
            self.stage = {k: v for k, v in self.stage.items() if k in state.events}
        out.sort(key=lambda item: (item[0], item[1]["id"]))
        return [(event, started) for _, event, started in out]

    def _message(self, state: FleetState, record: EventRecord, stage: int, moment: float) -> dict[str, Any]:
        name = ("completed" if record.rank == COMPLETED else "canceled") if stage == ENDED \
            else words.STAGES[stage - 1]
        return words.message(
            name, event_id=record.event_id, time=rfc3339(moment), vms=self._vms(state, record),
            event_type=record.event_type, event_source=record.event_source,
            not_before=rfc3339(record.not_before) if record.not_before is not None else "",
            description=record.description, duration=record.duration, resources=record.resources)

    def _vms(self, state: FleetState, record: EventRecord) -> list[dict[str, str]]:
        """The affected VMs with where they are: resolved with the policy's groups when it is known."""
        group_of: dict[str, str] = {}
        if self.policy is not None:
            idx = index(state, self.policy)
            found = resolve(state, idx, record)
            keys, unresolved = list(found.vms), list(found.unresolved)
            if not record.resources:
                keys = list(dict.fromkeys(idx.key(k) for k in record.reports))
            group_of = idx.group_of
        else:
            by_name = {state.vms[k].name.lower(): k for k in record.reports if k in state.vms}
            if record.resources:
                keys = [by_name[n.lower()] for n in record.resources if n.lower() in by_name]
                unresolved = [n for n in record.resources if n.lower() not in by_name]
            else:
                keys, unresolved = list(by_name.values()), []
        out = []
        for key in keys:
            vm = state.vms.get(key)
            if vm is None:
                continue
            group = group_label(group_of[key]) if key in group_of else ""
            out.append({"name": vm.name or key, "group": group, "fault_domain": vm.fault_domain,
                        "zone": vm.zone})
        return out + [{"name": name} for name in unresolved]


def _at(moment: float | None) -> datetime | None:
    return None if moment is None else datetime.fromtimestamp(moment, UTC)
