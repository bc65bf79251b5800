"""A snapshot's VMs as columns (fold/snapshot/columns.py, format 2): any VM's record comes back
exactly, whatever it shares with others or says twice; lines of format 1 (VMs as rows), as earlier
versions wrote them, still load to the same fold; a later format is refused in one line. And the
derived parts a restore makes at once (the co-reception sets, the names index) are what making them
one VM at a time makes."""

from __future__ import annotations

import json
from dataclasses import astuple
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.errors import StateError
from se_forwarder.fleet.coordinator.fold.groups import Groups
from se_forwarder.fleet.coordinator.fold.snapshot import BATCH, lines, restore_lines, snapshot
from se_forwarder.fleet.coordinator.fold.snapshot.columns import vm_records
from se_forwarder.fleet.coordinator.fold.state import NO_STAMP, FleetState, Vm
from se_forwarder.fleet.coordinator.view.digest import Digest

from .folds import events, folded
from .snapshots import encoded, format_1

TAKEN = Vm.__slots__[:-1]  # ``seen`` is not kept
words = st.sampled_from(["", "a", "rg-1", "RG-1", "web-0", "Web-0", "westeurope", "1", "é", "x y"])
times = st.floats(1.7e9, 1.8e9)
stamps = st.one_of(st.just(NO_STAMP), st.tuples(times, st.text(max_size=8)))
placements = st.tuples(*[words] * 7, st.lists(st.tuples(words, words), max_size=2, unique_by=lambda t: t[0])
                       .map(lambda tags: tuple(sorted(tags))))


@st.composite
def vms(draw: st.DrawFn, key: str) -> Vm:
    name = draw(words)
    sub, group = draw(words), draw(words)
    own = f"/subscriptions/{sub}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachines/{name}"
    rid = draw(st.sampled_from([own, own.lower(), "", "/subscriptions/x/other"]))
    several = st.lists(st.tuples(words, words, times), max_size=3).map(lambda c: tuple(sorted(c)))
    claims = draw(st.one_of(st.just(()), st.just(((name, rid.lower(), draw(times)),)), several))
    placed = draw(st.one_of(st.none(), placements))
    return Vm(key, name, draw(st.sampled_from([key, "", "other-id"])), draw(st.booleans()), rid, sub, group,
              *draw(st.tuples(*[words] * 6)), draw(st.dictionaries(words, words, max_size=2)), draw(stamps),
              draw(st.one_of(st.none(), times)), draw(st.one_of(st.just(float("-inf")), times)), draw(words),
              tuple(draw(st.lists(words, max_size=2))), draw(st.one_of(st.none(), times)), draw(words),
              draw(words), placed, (float("inf"), "") if placed is None else draw(st.tuples(times, words)),
              claims)


@st.composite
def fleets(draw: st.DrawFn) -> list[Vm]:
    count = draw(st.integers(0, 12))
    return [draw(vms(f"vm-{i:03d}")) for i in range(count)]


@settings(max_examples=200, deadline=None)
@given(fleets())
def test_any_vm_written_as_columns_comes_back_as_the_same_record(fleet):
    state = FleetState(vms={vm.key: vm for vm in fleet})
    restored = restore_lines(lines(state))
    assert [as_counted(vm) for vm in restored.vms.values()] == [as_counted(vm) for vm in fleet]
    assert Digest().of(restored) == Digest().of(state)


def as_counted(vm: Vm) -> tuple[Any, ...]:
    """A VM's values, its claims as they count: resourceIds in lower case (a record holds them as
    sent), in that order."""
    values = astuple(vm)[:len(TAKEN)]
    at = TAKEN.index("claims")
    return (*values[:at], tuple(sorted((n, r.lower(), t) for n, r, t in values[at])), *values[at + 1:])


def test_vms_share_one_table_entry_for_where_they_are_and_say_their_own_ids_once():
    own = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/web-{}"
    fleet = [Vm(f"id-{i:04d}", f"web-{i}", f"id-{i:04d}", True, own.format(i), "s", "rg", "westeurope", "",
                "", str(i % 3), str(i % 5), "", claims=((f"web-{i}", "r", 1.0),))
             for i in range(BATCH + 1)]
    records = list(vm_records([astuple(vm) for vm in fleet]))
    assert [tag for tag, _ in records] == ["vm-shared", "vm-columns", "vm-columns"]
    assert len(records[0][1]) == 15  # 3 fault domains by 5 update domains
    first = records[1][1]
    assert first["vmId"][0] is None and first["resourceId"][0] is None
    assert first["claims"][0] == (("web-0", "r", 1.0),)  # not its own resourceId: kept whole


@settings(max_examples=100, deadline=None)
@given(events)
def test_lines_of_format_1_with_vms_as_rows_still_load_to_the_same_fold(items):
    state = folded(items)
    restored = restore_lines(encoded(format_1(state)))
    assert snapshot(restored) == snapshot(state)
    assert Digest().of(restored) == Digest().of(state)


@pytest.mark.parametrize("first", [["format", 3], ["format", "2"], ["vm-columns", {}]])
def test_lines_of_another_format_are_refused_in_one_line(first):
    text = [json.dumps(first).encode() + b"\n", *list(lines(folded([])))[1:]]
    with pytest.raises(StateError, match=r"^coordinator snapshot: not a snapshot of format 1 or 2$"):
        restore_lines(text)


def test_vm_columns_of_unequal_lengths_are_a_damaged_snapshot_in_one_line():
    state = FleetState(vms={"a": Vm("a", "web-a"), "b": Vm("b", "web-b")})
    text = [json.loads(line) for line in lines(state)]
    for tag, value in text:
        if tag == "vm-columns":
            value["polled"].pop()
    with pytest.raises(StateError, match=r"^coordinator snapshot: damaged \(ValueError: VM columns"):
        restore_lines(encoded(text))


members = st.lists(st.sampled_from([f"k{i}" for i in range(12)]), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(st.lists(members, max_size=6), st.booleans())
def test_a_set_read_back_at_once_is_the_set_joined_one_by_one(sets, sort):
    sets = [sorted(set(s)) for s in sets] if sort else sets
    at_once, one_by_one = Groups(), Groups()
    at_once.dirty, one_by_one.dirty = set(), set()
    for each in sets:
        at_once.add(each)
        for other in each[1:]:
            one_by_one.union(each[0], other)
    assert at_once.parent.keys() == one_by_one.parent.keys()
    assert {k: at_once.find(k) for k in at_once.parent} == {k: one_by_one.find(k) for k in one_by_one.parent}
    assert at_once.sets == one_by_one.sets
    assert at_once.dirty == one_by_one.dirty


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["web-1", "Web-1", "WEB-1", "db", "Db-2", "é", "É"]), max_size=10))
def test_the_names_index_made_whole_is_the_one_kept_vm_by_vm(names):
    whole = FleetState(vms={f"k{i}": Vm(f"k{i}", name) for i, name in enumerate(names)})
    kept = FleetState(names={})
    for key, vm in whole.vms.items():
        kept.vms[key] = vm
        kept.rename(key, None, vm.name)
    assert whole.named("web-1") == kept.named("web-1")
    assert whole.names == kept.names
