"""Properties of the fold: any order, duplicates, snapshot + the rest, and garbage.

"Any order" keeps the coordinator's own switch decisions (pause, resume, hold, release) in the
order they were made: they all travel in one hub partition, and each must be exactly one more
than the current one (switches.py). Everything else may come in any order.

A heartbeat or a rejection that names an event no VM reported in full yet is dropped (fold.py), so
the order-free properties start from a fold where every event was reported in full once."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import FleetState, FoldStats, Policy, restore
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.decide import index
from se_forwarder.fleet.coordinator.fold.snapshot import lines, restore_lines, snapshot

from .fleet import PREFIX, SOURCE, T0, AgentVm, approved, heartbeat, iso, rejected, report

VMS = [AgentVm(f"vm-{i}", rg=f"rg-{i % 2}", zone=str(i % 3 or "")) for i in range(5)]
VMS.append(AgentVm("vm-0", complete=False))  # vm-0 before its agent had instance metadata
EVENTS = {"E1": ("Reboot", [0, 1]), "e2": ("Redeploy", [2]), "E3": ("Freeze", [3, 4, 0]),
          "T4": ("Terminate", [1])}


def _moved(vm: AgentVm, t: int) -> AgentVm:
    """A redeploy may move a VM to another fault domain: the topology depends on the time."""
    return AgentVm(vm.name, rg=vm.rg, zone=vm.zone, fd=str(t // 40 % 2), complete=vm.complete)


@st.composite
def agent_event(draw: st.DrawFn) -> dict:
    vm = _moved(draw(st.sampled_from(VMS)), t := draw(st.integers(0, 120)))
    event_id = draw(st.sampled_from(sorted(EVENTS)))
    kind, affected = EVENTS[event_id]
    names = [VMS[i].name for i in affected]
    what = draw(st.sampled_from(["scheduled", "started", "completed", "canceled", "approved", "prepared",
                                 "preparefailed", "approvalrejected", "heartbeat"]))
    now = T0 + t
    if what == "heartbeat":
        status = st.sampled_from(["Scheduled", "Started"])
        listed = draw(st.lists(st.tuples(st.sampled_from(sorted(EVENTS)), status), max_size=2))
        return heartbeat(vm, now, tuple((e, s, EVENTS[e][0]) for e, s in listed))
    if what == "approved":
        return approved(vm, event_id, now, resources=names, event_type=kind, not_before=T0 + 600)
    if what == "approvalrejected":
        attempt = draw(st.integers(1, 2))
        code = draw(st.sampled_from(["expired", "replayed", "bad-signature"]))
        return rejected(vm, event_id, now, f"{event_id}/coordinator/approve/{attempt}", code)
    return report(what, vm, event_id, now, event_type=kind, resources=names, not_before=T0 + 600)


@st.composite
def decision_event(draw: st.DrawFn) -> dict:
    kind = draw(st.sampled_from(["approve", "defer", "breach", "pause", "resume", "hold", "release"]))
    event_id = draw(st.sampled_from(sorted(EVENTS)))
    t = T0 + draw(st.integers(0, 120))
    n = draw(st.integers(1, 3))
    data = {"EventId": event_id, "Actor": draw(st.sampled_from(["coordinator", "person:a"])),
            "Reason": "r", "Shadow": draw(st.booleans())}
    if kind == "approve":
        ident = f"{event_id}/coordinator/approve/{n}"
        target = {"name": draw(st.sampled_from(VMS)).name, "vmId": ""}
        data.update(Attempt=n, ReasonCode="fits", Target=target)
    elif kind in ("defer", "breach"):
        code = draw(st.sampled_from(["budget", "held"]))
        ident = f"{event_id}/coordinator/{kind}/{n}-{code}"
        data.update(ReasonCode=code, Scope=draw(st.sampled_from([None, "fleet"])),
                    Budgets=[{"scope": "fleet", "used": 0, "withEvent": 1, "max": 1}])
    elif kind in ("pause", "resume"):
        scope = draw(st.sampled_from(["fleet", "zone:westeurope/1"]))
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


@settings(max_examples=150, deadline=None)
@given(events, st.randoms(use_true_random=False), st.data())
def test_any_order_with_any_duplicates_gives_the_same_state(items, rng, data):
    repeats = data.draw(st.lists(st.sampled_from(items), max_size=10)) if items else []
    one, two = folded(interleaved(items + repeats, rng)), folded(items)
    assert snapshot(one) == snapshot(two)
    assert one.terminated == two.terminated
    assert index(one, Policy()).members == index(two, Policy()).members


@settings(max_examples=150, deadline=None)
@given(events, st.data())
def test_a_snapshot_plus_the_rest_is_the_same_as_everything(items, data):
    cut = data.draw(st.integers(0, len(items)))
    restored = restore(json.loads(json.dumps(snapshot(folded(items[:cut])))))
    assert snapshot(folded(items[cut:], restored)) == snapshot(folded(items))


@settings(max_examples=150, deadline=None)
@given(events, st.data())
def test_the_snapshot_as_lines_is_the_same_fold_and_folds_on_the_same(items, data):
    cut = data.draw(st.integers(0, len(items)))
    restored = restore_lines(lines(folded(items[:cut])))
    assert snapshot(restored) == snapshot(folded(items[:cut]))
    assert snapshot(folded(items[cut:], restored)) == snapshot(folded(items))


@settings(max_examples=100, deadline=None)
@given(events)
def test_folding_everything_twice_is_folding_it_once(items):
    assert snapshot(folded(items + items)) == snapshot(folded(items))


@settings(max_examples=100, deadline=None)
@given(events)
def test_a_snapshot_restores_to_itself_and_is_strict_json(items):
    data = snapshot(folded(items))
    text = json.dumps(data, allow_nan=False)
    assert snapshot(restore(json.loads(text))) == data


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def mutated(draw: st.DrawFn) -> dict:
    event = copy.deepcopy(draw(st.one_of(agent_event(), decision_event())))
    target = event
    if draw(st.booleans()) and isinstance(event.get("data"), dict):
        target = event["data"]
    key = draw(st.sampled_from(sorted(target) + ["Vm", "Events", "Resources", "Message", "time"]))
    target[key] = draw(json_values)
    return event


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(mutated(), st.dictionaries(st.text(max_size=10), json_values, max_size=5)),
                max_size=8))
def test_the_fold_never_raises_and_counts_everything_it_reads(items):
    state, stats = FleetState(), FoldStats()
    outcomes = [fold_event(state, item, stats) for item in items]
    assert set(outcomes) <= {"folded", "skipped", "malformed", "late", "capped"}
    counted = (sum(stats.folded.values()) + sum(stats.skipped.values()) + stats.malformed + stats.late
               + stats.dropped)
    assert counted == len(items)
    json.dumps(snapshot(state), allow_nan=False)


def test_a_fold_of_more_vms_than_a_line_holds_comes_back_whole():
    state = FleetState()
    for i in range(2500):
        fold_event(state, heartbeat(AgentVm(f"web-{i}", rg=f"rg-{i % 7}", zone=str(i % 3 or "")), T0 + i))
    text = list(lines(state))
    assert sum(1 for line in text if line.startswith(b'["vms"')) == 3
    assert snapshot(restore_lines(text)) == snapshot(state)
