"""Fold steps for the fold's property tests: agents' reports and the coordinator's decisions about a
few VMs and events, any order that keeps the switch decisions in theirs, folded into a fold that
knows every event."""

from __future__ import annotations

import copy

from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import FleetState
from se_forwarder.fleet.coordinator import claimed as fold_event

from .fleet import PREFIX, SOURCE, T0, AgentVm, approved, heartbeat, iso, rejected, report

VMS = [AgentVm(f"vm-{i}", rg=f"rg-{i % 2}", zone=str(i % 3 or "")) for i in range(5)]
VMS.append(AgentVm("vm-0", complete=False))  # vm-0 before its agent had instance metadata
EVENTS = {"E1": ("Reboot", [0, 1]), "e2": ("Redeploy", [2]), "E3": ("Freeze", [3, 4, 0]),
          "T4": ("Terminate", [1])}


def _moved(vm: AgentVm, t: int) -> AgentVm:
    """A redeploy may move a VM to another fault domain: the topology depends on the time."""
    return AgentVm(vm.name, rg=vm.rg, zone=vm.zone, fd=str(t // 40 % 2), complete=vm.complete)


HEALTH = st.none() | st.builds(
    lambda verdict, probe, reason: {"Verdict": verdict, "Probe": probe, "Reason": reason, "Probes": 1},
    st.sampled_from(["healthy", "unhealthy", "unknown", "sick"]), st.sampled_from([None, "web", "db"]),
    st.sampled_from([None, "HTTP 503", "Connection refused"]))

# The strategies the events draw from, made once (made anew for each draw, making and validating
# them cost a tenth of the property tests' time).
VM = st.sampled_from(VMS)
EVENT_ID = st.sampled_from(sorted(EVENTS))
AGENT_TYPE = st.sampled_from(("scheduled", "started", "completed", "canceled", "approved", "prepared",
                              "preparefailed", "approvalrejected", "heartbeat", "recovered"))
LISTED = st.lists(st.tuples(EVENT_ID, st.sampled_from(("Scheduled", "Started"))), max_size=2)
REJECTION = st.sampled_from(("expired", "replayed", "bad-signature"))
DECISION_TYPE = st.sampled_from(("approve", "defer", "breach", "pause", "resume", "hold", "release"))
ACTOR = st.sampled_from(("coordinator", "person:a"))
DEFERRAL = st.sampled_from(("budget", "held"))
DEFERRAL_SCOPE = st.sampled_from((None, "fleet"))
SWITCH_SCOPE = st.sampled_from(("fleet", "zone:westeurope/1"))


@st.composite
def agent_event(draw: st.DrawFn) -> dict:
    vm = _moved(draw(VM), t := draw(st.integers(0, 120)))
    event_id = draw(EVENT_ID)
    kind, affected = EVENTS[event_id]
    names = [VMS[i].name for i in affected]
    what = draw(AGENT_TYPE)
    now = T0 + t
    if what == "heartbeat":
        listed = draw(LISTED)
        beat = heartbeat(vm, now, tuple((e, s, EVENTS[e][0]) for e, s in listed))
        beat["data"]["Health"] = draw(HEALTH)
        return beat
    if what == "approved":
        return approved(vm, event_id, now, resources=names, event_type=kind, not_before=T0 + 600)
    if what == "approvalrejected":
        attempt = draw(st.integers(1, 2))
        code = draw(REJECTION)
        return rejected(vm, event_id, now, f"{event_id}/coordinator/approve/{attempt}", code)
    return report(what, vm, event_id, now, event_type=kind, resources=names, not_before=T0 + 600)


@st.composite
def decision_event(draw: st.DrawFn) -> dict:
    kind = draw(DECISION_TYPE)
    event_id = draw(EVENT_ID)
    t = T0 + draw(st.integers(0, 120))
    n = draw(st.integers(1, 3))
    data = {"EventId": event_id, "Actor": draw(ACTOR),
            "Reason": "r", "Shadow": draw(st.booleans())}
    if kind == "approve":
        ident = f"{event_id}/coordinator/approve/{n}"
        target = {"name": draw(VM).name, "vmId": ""}
        data.update(Attempt=n, ReasonCode="fits", Target=target)
    elif kind in ("defer", "breach"):
        code = draw(DEFERRAL)
        ident = f"{event_id}/coordinator/{kind}/{n}-{code}"
        data.update(ReasonCode=code, Scope=draw(DEFERRAL_SCOPE),
                    Budgets=[{"scope": "fleet", "used": 0, "withEvent": 1, "max": 1}])
    elif kind in ("pause", "resume"):
        scope = draw(SWITCH_SCOPE)
        ident = f"coordinator/{kind}/{scope}/{n}"
        data = {**data, "EventId": None, "Scope": scope, "Sequence": n}
    else:
        ident = f"{event_id}/coordinator/{kind}/{n}"
        data.update(Sequence=n)
    return {"specversion": "1.0", "type": f"{PREFIX}coordinator.{kind}", "id": ident, "source": SOURCE,
            "subject": event_id, "time": iso(t), "data": data}


SWITCHES = ("pause", "resume", "hold", "release")


def is_switch(item: dict) -> bool:
    return item["type"].rsplit(".", 1)[-1] in SWITCHES


def numbered(items: list[dict]) -> list[dict]:
    """The switch decisions renumbered 1, 2, ... per scope or event, in list order (as made)."""
    counts: dict[str, int] = {}
    for item in items:
        if is_switch(item):
            data = item["data"]
            key = data["Scope"] if data.get("Scope") else data["EventId"].lower()
            counts[key] = n = counts.get(key, 0) + 1
            data["Sequence"] = n
            item["id"] = item["id"].rsplit("/", 1)[0] + f"/{n}"
    return items


def interleaved(items: list[dict], rng) -> list[dict]:
    """A shuffle that keeps the switch decisions in their order."""
    switches = iter([i for i in items if is_switch(i)])
    others = [i for i in items if not is_switch(i)]
    rng.shuffle(others)
    slots = [True] * (len(items) - len(others)) + [False] * len(others)
    rng.shuffle(slots)
    rest = iter(others)
    return [next(switches) if switch else next(rest) for switch in slots]


events = st.lists(st.one_of(agent_event(), agent_event(), decision_event()), max_size=40).map(numbered)


KNOWN = [report("scheduled", VMS[affected[0]], event_id, T0, event_type=kind,
                resources=[VMS[i].name for i in affected], not_before=T0 + 600)
         for event_id, (kind, affected) in sorted(EVENTS.items())]


def folded(items: list[dict], state: FleetState | None = None) -> FleetState:
    """``items`` folded into ``state``, or into a fold that knows every event of EVENTS."""
    if state is None:
        state = FleetState()
        items = KNOWN + items
    for item in items:
        fold_event(state, copy.deepcopy(item))
    return state
