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

from .fleet import T0, AgentVm, heartbeat
from .folds import agent_event, decision_event, events, folded, interleaved


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
    assert sum(1 for line in text if line.startswith(b'["vm-columns"')) == 3
    assert snapshot(restore_lines(text)) == snapshot(state)
