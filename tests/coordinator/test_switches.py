"""The sequence rule of pause/resume and hold/release (switches.py): each exactly one more than the
current one, an integer of at most 2^53. A decision outside the rule never folds, so no sequence
can be poisoned: the next real pause always gets a sequence and an id the fold takes."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import hold, pause, prune, release, restore, resume, to_dict
from se_forwarder.fleet.coordinator.fold.snapshot import snapshot
from se_forwarder.fleet.coordinator.fold.switches import MAX_SEQUENCE

from .fleet import SOURCE, T0, Fleet, avset, iso

OPS = "person:ops"


def switch(kind: str, sequence: object, key: str = "fleet", t: float = T0) -> dict:
    """A switch decision as it reads from the hub (already past trust.py)."""
    scoped = kind in ("pause", "resume")
    data = {"Scope": key if scoped else None, "EventId": None if scoped else key, "Sequence": sequence,
            "Actor": OPS, "Reason": "r"}
    ident = f"coordinator/{kind}/{key}/{sequence}" if scoped else f"{key}/coordinator/{kind}/{sequence}"
    return {"specversion": "1.0", "type": f"com.azure.scheduledevents.coordinator.{kind}", "id": ident,
            "source": SOURCE, "subject": key, "time": iso(t), "data": data}


def test_switches_fold_in_sequence():
    fleet = Fleet()
    fleet.fold(switch("pause", 1), switch("resume", 2, t=T0 + 1), switch("pause", 3, t=T0 + 2))
    assert fleet.state.paused("fleet") is not None
    assert fleet.state.pauses["fleet"].record.sequence == 3


@pytest.mark.parametrize("sequence", [0, -1, 3, 10**700, MAX_SEQUENCE + 1, True, 2.0, "2", None],
                         ids=lambda value: repr(value)[:24])
def test_a_switch_that_is_not_exactly_one_more_than_the_current_never_folds(sequence):
    fleet = Fleet()
    fleet.fold(switch("pause", 1))
    assert fleet.fold_one(switch("resume", sequence, t=T0 + 1)) == "malformed"
    assert fleet.state.paused("fleet") is not None and len(fleet.state.decisions) == 1


def test_a_sequence_of_2_to_the_53_folds_and_nothing_after_it_does():
    fleet = Fleet()
    fleet.fold(switch("pause", 1))
    fleet.state.pauses["fleet"].record.data["Sequence"] = MAX_SEQUENCE - 1
    assert fleet.fold_one(switch("resume", MAX_SEQUENCE, t=T0 + 1)) == "folded"
    assert fleet.fold_one(switch("pause", MAX_SEQUENCE + 1, t=T0 + 2)) == "malformed"


def test_the_review_s_poisoned_resume_changes_nothing_and_the_next_pause_folds():
    fleet = avset()
    fleet.apply(pause(fleet.state, fleet.policy, T0, "fleet", OPS, "incident"))
    assert fleet.fold_one(switch("resume", 10**700, t=T0 + 1)) == "malformed"
    fleet.apply(resume(fleet.state, fleet.policy, T0 + 2, "fleet", OPS, "over"))
    again = pause(fleet.state, fleet.policy, T0 + 3, "fleet", OPS, "again")
    assert (again.sequence, again.id) == (3, "coordinator/pause/fleet/3")
    assert fleet.fold_one(to_dict(again, SOURCE)) == "folded" and fleet.state.paused("fleet") is not None


def test_holds_follow_the_same_rule_per_event():
    fleet = avset()
    fleet.apply(hold(fleet.state, fleet.policy, T0, "E1", OPS, "x"))
    assert fleet.fold_one(switch("release", 5, "E1", t=T0 + 1)) == "malformed"
    assert fleet.state.held("e1") is not None
    fleet.apply(release(fleet.state, fleet.policy, T0 + 2, "E1", OPS, "y"))
    assert fleet.state.held("e1") is None and fleet.state.holds["e1"].record.sequence == 2


def test_the_same_switch_read_back_from_the_hub_changes_nothing():
    fleet = Fleet()
    fleet.fold(switch("pause", 1), switch("resume", 2, t=T0 + 1))
    before = snapshot(fleet.state)
    assert fleet.fold_one(switch("pause", 1)) == fleet.fold_one(switch("resume", 2, t=T0 + 1)) == "folded"
    assert snapshot(fleet.state) == before


def test_a_snapshot_keeps_each_scope_s_current_switch_after_prune_dropped_the_ones_before():
    fleet = avset()
    for i, kind in enumerate(("pause", "resume", "pause")):
        fleet.fold(switch(kind, i + 1, t=T0 + i))
    prune(fleet.state, fleet.policy, T0 + 3 * 86400)
    assert [d.id for d in fleet.state.decisions.values()] == ["coordinator/pause/fleet/3"]
    restored = restore(json.loads(json.dumps(snapshot(fleet.state))))
    assert restored.paused("fleet") is not None
    following = switch("resume", 4, t=T0 + 3 * 86400)
    fleet.fold(copy.deepcopy(following))
    assert Fleet(state=restored).fold_one(following) == "folded"
    assert snapshot(restored) == snapshot(fleet.state)


sequences = st.one_of(st.integers(-3, 8), st.integers(MAX_SEQUENCE - 2, MAX_SEQUENCE + 2),
                      st.integers(min_value=10**20), st.booleans(), st.floats(allow_nan=False),
                      st.text(max_size=4), st.none())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pause", "resume", "hold", "release"]), sequences),
                max_size=12))
def test_a_switch_folds_only_when_its_sequence_is_the_current_one_plus_one(items):
    fleet = Fleet()
    for i, (kind, sequence) in enumerate(items):
        key = "fleet" if kind in ("pause", "resume") else "e1"
        table = fleet.state.pauses if key == "fleet" else fleet.state.holds
        current = table[key].record.sequence if key in table else 0
        follows = (isinstance(sequence, int) and not isinstance(sequence, bool)
                   and sequence == current + 1 and sequence <= MAX_SEQUENCE)
        event = switch(kind, sequence, "fleet" if key == "fleet" else "E1", t=T0 + i)
        outcome = fleet.fold_one(event)
        assert outcome == ("folded" if follows else "malformed") or (
            not follows and event["id"] in fleet.state.decisions and outcome == "folded")
        assert (table[key].record.sequence if key in table else 0) == (sequence if follows else current)
    assert all(0 < s.record.sequence <= MAX_SEQUENCE
               for s in (*fleet.state.pauses.values(), *fleet.state.holds.values()))
