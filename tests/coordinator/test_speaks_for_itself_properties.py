"""Property: whatever VM Y reports, signed with its own key, no other VM's own state changes and no
other VM becomes available because of it.

The projection of a VM V that Y must leave alone: V's record (topology, heartbeat, last heard, the
events its heartbeat listed), and for every event V's status, echo, ``prepared``,
``preparefailed``, completion and rejections; and the set of VMs other than Y that are unavailable
may only grow. Y's reports are any sequence of every type the fold reads, about its peers' events,
new events or its own, with any Resources (peers' names, its own, made-up ones), any topology for
itself (a peer's name or zone included), dated anywhere from two days ago to 2099, read at a hub
time of their own.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import Policy
from se_forwarder.fleet.coordinator.decide import index, unavailable
from se_forwarder.fleet.coordinator.fold import FleetState, Sender
from se_forwarder.fleet.coordinator.fold import claimed as fold_event

from .fleet import SET, T0, AgentVm, Fleet, approved, avset, heartbeat, rejected, report

POLICY = Policy(heartbeat_timeout=180, min_healthy=300)
Y = SET[5]
PEERS = [vm for vm in SET if vm is not Y]
NOW = T0 + 400


def base() -> Fleet:
    """A watched set whose VMs are at every stage of their own events."""
    fleet = avset(POLICY)
    fleet.beat(*SET, t=T0 + 300)
    fleet.announce("S1", [SET[0]], SET, t=T0 + 10, not_before=T0 + 900)  # scheduled
    fleet.announce("A1", [SET[1], SET[2]], SET, t=T0 + 10, not_before=T0 + 900)
    fleet.fold(approved(SET[1], "A1", T0 + 20, resources=["web-1", "web-2"]))  # approved
    fleet.announce("R1", [SET[3]], SET, t=T0 + 10, not_before=T0 + 100)
    fleet.transition("started", "R1", [SET[3]], t=T0 + 200)  # started
    fleet.announce("C1", [SET[4]], SET, t=T0 + 10, not_before=T0 + 100)
    fleet.transition("started", "C1", [SET[4]], t=T0 + 150)
    fleet.transition("completed", "C1", [SET[4]], t=T0 + 250)  # within min_healthy
    fleet.fold(report("prepared", SET[0], "S1", T0 + 30), report("prepared", SET[2], "A1", T0 + 30),
               report("preparefailed", SET[0], "S1", T0 + 40, extra={"Reason": "hook"}))
    return fleet


BASE = base()
EVENT_IDS = ["S1", "A1", "R1", "C1", "OLD", "N1"]
NAMES = [vm.name for vm in SET] + ["ghost-1"]
TIMES = st.one_of(st.integers(int(T0 - 2 * 86400), int(T0 + 800)), st.just(int(T0 + 86400 * 365 * 70)))


@st.composite
def y_report(draw: st.DrawFn) -> dict[str, Any]:
    """One report of Y as itself: any type, any event, any Resources, any time, any self-topology."""
    me = AgentVm(Y.name if draw(st.booleans()) else draw(st.sampled_from(NAMES)),
                 fd=draw(st.sampled_from(["0", "1", "2"])), zone=draw(st.sampled_from(["", "1"])))
    me = _as_y(me)
    t = float(draw(TIMES))
    event_id = draw(st.sampled_from(EVENT_IDS))
    resources = draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
    kind = draw(st.sampled_from(["scheduled", "started", "completed", "canceled", "approved", "prepared",
                                 "preparefailed", "approvalrejected", "heartbeat"]))
    event_type = draw(st.sampled_from(["Reboot", "Terminate", "Freeze"]))
    if kind == "heartbeat":
        status = st.sampled_from(["Scheduled", "Started"])
        listed = draw(st.lists(st.tuples(st.sampled_from(EVENT_IDS), status), max_size=3))
        return heartbeat(me, t, tuple((e, s, event_type) for e, s in listed))
    if kind == "approved":
        return approved(me, event_id, t, resources=resources, event_type=event_type)
    if kind == "approvalrejected":
        return rejected(me, event_id, t, f"{event_id}/coordinator/approve/1", "expired")
    return report(kind, me, event_id, t, event_type=event_type, resources=resources,
                  not_before=draw(st.sampled_from([None, T0 + 50, T0 + 5000])))


def _as_y(vm: AgentVm) -> AgentVm:
    """``vm``'s claims with Y's vmId (what Y's registered key signs: its own vmId, any data)."""

    class Claimed(AgentVm):
        @property
        def vm_id(self) -> str:
            return Y.vm_id

    return Claimed(vm.name, rg=vm.rg, fd=vm.fd, zone=vm.zone)


def projection(state: FleetState, vm: str) -> tuple[Any, ...]:
    record = state.vms[vm]
    own = (record.topology(), record.last_heartbeat, record.last_heard, record.listed, record.polled)
    events = []
    for key, e in sorted(state.events.items()):
        mine = (e.reports.get(vm), e.echoes.get(vm), e.prepared.get(vm), e.prepare_failed.get(vm),
                e.finished.get(vm), tuple(sorted(m for m, (who, _) in e.rejections.items() if who == vm)))
        if mine != (None, None, None, None, None, ()):
            events.append((key, mine))
    return own, tuple(events)


def down(state: FleetState) -> dict[str, str]:
    return unavailable(state, POLICY, index(state, POLICY), NOW)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(y_report(), st.integers(0, 400)), max_size=12))
def test_no_report_of_y_changes_another_vms_state_or_makes_it_available(sequence):
    state = copy.deepcopy(BASE.state)
    before = {vm.key: projection(state, vm.key) for vm in PEERS}
    down_before = {k for k in down(state) if k != Y.key}
    for event, hub_offset in sequence:
        fold_event(state, event, received=T0 + hub_offset, sender=Sender(Y.key))
    assert {vm.key: projection(state, vm.key) for vm in PEERS} == before
    assert down_before <= set(down(state))


def test_the_base_has_vms_at_every_stage():
    reasons = down(copy.deepcopy(BASE.state))
    stages = {reasons.get(SET[i].key) for i in range(5)}
    assert stages >= {"approved", "started", "completed", "prepare-failed"}
