"""The heartbeat watch (decide/availability.py's ``Beats``): after each sweep, the VMs it holds
stale are exactly those of the fleet whose heartbeat is older than the cutoff, as a look at every VM
would find; and VMs heard from again and again keep its table the size of the fleet."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.decide.availability import Beats

KEYS = [f"vm{i}" for i in range(6)]
# a step: VMs heard from (how much later than their last heartbeat), the fleet, the cutoff's advance
STEP = st.tuples(st.dictionaries(st.sampled_from(KEYS), st.integers(0, 30).map(float)),
                 st.frozensets(st.sampled_from(KEYS)), st.integers(0, 20).map(float))


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=8))
def test_a_sweep_holds_stale_exactly_the_fleet_s_vms_without_a_fresh_heartbeat(steps: list) -> None:
    heard: dict[str, float | None] = dict.fromkeys(KEYS)
    beats, fleet, cutoff = Beats(), set[str](), 0.0
    for changes, now_fleet, advance in steps:
        for key, later in changes.items():  # a VM's heartbeat never goes back
            heard[key] = (heard[key] or 0.0) + later
        for key in now_fleet - fleet:  # joined: armed with the heartbeat it has (idx.joined)
            beats.arm(key, heard[key])
        fleet, cutoff = set(now_fleet), cutoff + advance
        beats.sweep(cutoff, lambda key: heard[key] if key in fleet else None, fleet)
        assert beats.stale == {k for k in fleet if (beat := heard[k]) is None or beat < cutoff}


def test_vms_heard_from_again_and_again_keep_the_table_the_fleet_s_size() -> None:
    beats, keys = Beats(), [f"vm{i}" for i in range(400)]
    for key in keys:
        beats.arm(key, 0.0)
    for minute in range(1, 13):
        beats.sweep(minute * 60.0 - 30, lambda key, m=minute: m * 60.0, set(keys))
    once: dict[str, float] = {}
    for key in keys:
        once[key] = 0.0
    assert not beats.stale and len(beats.armed) == len(keys)
    assert sys.getsizeof(beats.armed) == sys.getsizeof(once)
