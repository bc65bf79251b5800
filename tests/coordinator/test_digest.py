"""The fold's digest (/v1/state, view/digest.py): equal folds, equal digests, in any order; and the
digest kept up to date from what the fold noted equals the digest made from the whole fold. The same
steps (key changes and conflicts, operators settling them, health verdicts, Resource Health,
recovered reports, held reports) come back whole from the snapshot's lines, and the lines a save
writes from the fold it took are the fold's as it was then, whatever it folded after."""

from __future__ import annotations

import contextlib
import copy
import json
import sys
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator import FleetState
from se_forwarder.fleet.coordinator import claimed as fold_event
from se_forwarder.fleet.coordinator.decide.control import ControlRefused, settle
from se_forwarder.fleet.coordinator.decide.events import to_dict
from se_forwarder.fleet.coordinator.fold import Claim, Identity
from se_forwarder.fleet.coordinator.fold.identities import HELD_LEFT_OUT, bind
from se_forwarder.fleet.coordinator.fold.snapshot import (
    encode,
    lines,
    pieces,
    restore_lines,
    snapshot,
    written,
)
from se_forwarder.fleet.coordinator.view.digest import Digest

from . import folds, moves
from .fleet import SOURCE, T0, AgentVm, heartbeat
from .snapshots import encoded, format_1

# The strategies the steps draw from, made once (made anew for each draw, making and validating
# them cost a tenth of the module's time).
KIND = st.sampled_from(("move", "move", "agent", "listing", "decision", "identity", "identity", "settle",
                        "hold", "look", "look"))
LISTED = st.lists(st.tuples(st.sampled_from(("E1", "E2", "T3", "E3")),
                            st.sampled_from(("Scheduled", "Started"))), min_size=1, max_size=2)
REGISTERED = st.sampled_from(moves.NAMES[:2])
KEYS = st.lists(st.sampled_from(("a", "b", "c")), min_size=1, max_size=2)
KEYID = st.sampled_from((None, "aid", "bid", "cid"))


@st.composite
def step(draw: st.DrawFn) -> tuple:
    kind = draw(KIND)
    if kind == "move":
        return draw(moves.step())
    if kind == "listing":  # a heartbeat that lists events a VM reported (their status and times merge)
        listed = draw(LISTED)
        return ("fold", heartbeat(draw(moves.a_vm()), T0 + draw(st.integers(0, 900)),
                                  tuple((e, s, "Reboot") for e, s in listed)))
    if kind == "agent":
        return ("fold", draw(folds.agent_event()))
    if kind == "decision":
        return ("fold", draw(folds.decision_event()))
    if kind == "identity":
        vm = AgentVm(draw(REGISTERED)).vm_id
        keys = draw(KEYS)
        created = T0 + draw(st.integers(0, 3)) * 3600
        shared = len(keys) > 1  # one document with two keys: a key conflict
        return ("identity", [Claim(vm, Identity(k * 44, f"{k}id", created, created + 86400,
                                                f"doc-{created}" if shared else f"doc-{k}-{created}"))
                             for k in keys])
    if kind == "settle":
        keyid = draw(KEYID)
        vm = AgentVm(draw(REGISTERED)).vm_id
        return ("settle", (vm, keyid))
    if kind == "hold":  # a report held for its sender's registration (edge/gate.py)
        return ("hold", (AgentVm(draw(moves.NAME)), T0 + draw(st.integers(0, 900))))
    return ("look", None)


def run(steps: list[tuple], digest: Digest, state: FleetState | None = None) -> FleetState:
    """The steps folded (on ``state``, else a new fold); registrations and settle decisions at hub
    times that grow step by step."""
    state = FleetState() if state is None else state
    for n, (what, arg) in enumerate(steps):
        now = T0 + 1000 + n
        if moves.fold_step(state, what, arg, moves.POLICY):
            continue
        if what == "identity":
            for claim in arg:
                bind(state, replace(claim, identity=replace(claim.identity, registered_at=now)))
        elif what == "settle":
            vm, keyid = arg
            with contextlib.suppress(ControlRefused):  # not in conflict, or no such key
                made = settle(state, moves.POLICY, now, vm, keyid, "person:ops", "checked")
                fold_event(state, to_dict(made, SOURCE))
        elif what == "hold":
            vm, now = arg
            state.note("waiting", vm.vm_id)
            state.waiting.setdefault(vm.vm_id, []).append((now, heartbeat(vm, now)))
        else:
            digest.of(state)
    return state


@settings(max_examples=300, deadline=None)
@given(st.lists(step(), max_size=40))
def test_the_digest_kept_as_the_fold_goes_is_the_digest_of_the_whole_fold(steps):
    kept = Digest()
    state = run(steps, kept)
    assert kept.of(state) == Digest().of(whole(state))


@settings(max_examples=200, deadline=None)
@given(st.lists(step(), max_size=40))
def test_the_snapshot_lines_of_any_fold_restore_to_the_same_fold_and_digest(steps):
    state = run(steps, Digest())
    restored = restore_lines(lines(state))
    assert snapshot(restored) == snapshot(state)
    assert Digest().of(restored) == Digest().of(state)


def test_held_reports_past_the_snapshot_budget_are_left_out_and_counted_on_restore():
    state = FleetState()
    vm = AgentVm("web-0")
    for i in range(3000):
        state.waiting.setdefault(vm.vm_id, []).append((T0 + i, heartbeat(vm, T0 + i) | {"pad": "x" * 2000}))
    restored = restore_lines(lines(state))
    kept = len(restored.waiting[vm.vm_id])
    assert 0 < kept < 3000
    assert restored.cache[HELD_LEFT_OUT] == 3000 - kept


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
    assert digest.of(state) == Digest().of(whole(state))


def whole(state: FleetState) -> FleetState:
    """A copy of ``state`` whose digest is made from the whole fold (nothing kept)."""
    fresh = copy.deepcopy(state)
    fresh.journal = None
    fresh.cache.clear()
    return fresh


@settings(max_examples=100, deadline=None)
@given(st.lists(step(), max_size=30), st.lists(step(), max_size=30))
def test_a_digest_made_at_a_restore_is_kept_by_whoever_looks_next(before, after):
    restored = restore_lines(lines(run(before, Digest())))
    Digest().of(restored)  # as the keeper makes it, on its own thread
    state = run(after, Digest(), restored)
    assert Digest().of(state) == Digest().of(whole(state))


@settings(max_examples=150, deadline=None)
@given(st.lists(step(), max_size=30), st.lists(step(), max_size=30))
def test_the_lines_a_save_writes_are_the_fold_s_as_it_was_when_taken(before, after):
    digest = Digest()
    state = run(before, digest)
    taken = pieces(state)  # as a save takes the fold on the service's loop
    expected = list(lines(state))
    run(after, digest, state)  # the fold goes on before the save's thread writes them
    assert list(written(taken)) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(step(), max_size=30))
def test_lines_with_their_members_in_another_order_restore_the_same_fold(steps):
    state = run(steps, Digest())
    reordered = [encode(reverse(json.loads(line))) + b"\n" for line in lines(state)]  # older versions
    assert Digest().of(restore_lines(reordered)) == Digest().of(state)


def reverse(value):
    """``value`` with every object's members in reversed order."""
    if isinstance(value, dict):
        return {k: reverse(v) for k, v in reversed(value.items())}
    return [reverse(v) for v in value] if isinstance(value, list) else value


@settings(max_examples=100, deadline=None)
@given(st.lists(step(), max_size=30), st.randoms(use_true_random=False))
def test_a_vm_s_row_read_by_the_names_of_its_columns_in_any_order_restores_the_same_fold(steps, rng):
    state = run(steps, Digest())
    text = format_1(state)  # VMs as rows: as snapshots were written before VMs were columns
    columns = list(text[1][1]["vm"])
    order = rng.sample(range(len(columns)), len(columns))
    for record in text:
        if record[0] == "columns":
            record[1]["vm"] = [columns[i] for i in order]
        elif record[0] == "vms":
            record[1] = [[row[i] for i in order] for row in record[1]]
    assert Digest().of(restore_lines(encoded(text))) == Digest().of(state)


def test_records_hashed_again_and_again_keep_a_table_of_their_number() -> None:
    """A record hashed again replaces its hash where it is: VMs heard from every minute do not keep
    doubling the table of their hashes (a dict's entry taken out is never reused)."""
    state, digest = FleetState(), Digest()
    vms = [AgentVm(f"vm{i}") for i in range(400)]
    for minute in range(12):
        for vm in vms:
            fold_event(state, heartbeat(vm, T0 + minute * 60))
        digest.of(state)
    hashes = state.cache["digest"].hashes["vms"]
    once: dict[str, int] = {}
    for key in hashes:
        once[key] = 0
    assert len(hashes) == len(vms)
    assert sys.getsizeof(hashes) == sys.getsizeof(once)
