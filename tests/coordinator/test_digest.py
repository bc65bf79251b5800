"""The fold's digest (/v1/state, view/digest.py): equal folds, equal digests, in any order; and the
digest kept up to date from what the fold noted equals the digest made from the whole fold."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import FleetState
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.fold import Claim, Identity
from se_forwarder.fleet.coordinator.fold.identities import bind
from se_forwarder.fleet.coordinator.view.digest import Digest

from . import folds, moves
from .fleet import T0, AgentVm, heartbeat


@st.composite
def step(draw: st.DrawFn) -> tuple:
    kind = draw(st.sampled_from(["move", "move", "agent", "listing", "decision", "identity", "look", "look"]))
    if kind == "move":
        return draw(moves.step())
    if kind == "listing":  # a heartbeat that lists events a VM reported (their status and times merge)
        listed = draw(st.lists(st.tuples(st.sampled_from(["E1", "E2", "T3", "E3"]),
                                         st.sampled_from(["Scheduled", "Started"])), min_size=1, max_size=2))
        return ("fold", heartbeat(draw(moves.a_vm()), T0 + draw(st.integers(0, 900)),
                                  tuple((e, s, "Reboot") for e, s in listed)))
    if kind == "agent":
        return ("fold", draw(folds.agent_event()))
    if kind == "decision":
        return ("fold", draw(folds.decision_event()))
    if kind == "identity":
        vm = draw(st.sampled_from(moves.NAMES))
        key = draw(st.sampled_from(["a", "b"]))
        created = T0 + draw(st.integers(0, 3)) * 3600
        return ("identity", Claim(AgentVm(vm).vm_id, Identity(key * 44, f"{key}id", created, created + 86400,
                                                                f"doc-{key}-{created}")))
    return ("look", None)


def run(steps: list[tuple], digest: Digest) -> FleetState:
    state = FleetState()
    for what, arg in steps:
        if moves.fold_step(state, what, arg, moves.POLICY):
            continue
        if what == "identity":
            bind(state, arg)
        else:
            digest.of(state)
    return state


@settings(max_examples=300, deadline=None)
@given(st.lists(step(), max_size=40))
def test_the_digest_kept_as_the_fold_goes_is_the_digest_of_the_whole_fold(steps):
    kept = Digest()
    state = run(steps, kept)
    whole = copy.deepcopy(state)
    whole.journal = None
    assert kept.of(state) == Digest().of(whole)


@settings(max_examples=150, deadline=None)
@given(folds.events, st.randoms(use_true_random=False))
def test_equal_folds_in_any_order_have_equal_digests(items, rng):
    one, two = folds.folded(folds.interleaved(items, rng)), folds.folded(items)
    assert Digest().of(one) == Digest().of(two)


def test_a_fold_that_changed_has_another_digest_and_the_same_again_when_it_changes_back():
    state, digest = FleetState(), Digest()
    vm = AgentVm("web-0")
    fold_event(state, heartbeat(vm, T0))
    first = digest.of(state)
    fold_event(state, heartbeat(vm, T0 + 60))
    assert digest.of(state) != first
    assert digest.of(state) == Digest().of(copy.deepcopy(state))
