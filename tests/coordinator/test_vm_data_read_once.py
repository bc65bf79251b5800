"""Property: a registered VM's data.Vm equal to the one read last is not read again, with the same
outcome as reading it (fold/reports.py): its record, placement, claims and the counts of what was
cut, whatever the data.Vm (vmId too long, name with control characters or too long, incomplete,
another VM's name) and order. What the reading is compared with: the same reports with what was
read last forgotten before each."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder.fleet.coordinator.config.limits import Limits
from se_forwarder.fleet.coordinator.fold import FleetState, Sender
from se_forwarder.fleet.coordinator.fold import claimed as fold_event
from se_forwarder.fleet.coordinator.fold.caps import FoldStats

T0 = 1_800_000_000.0
LIMITS = Limits(text_chars=40)
KEYS = ["7ac4b98b-21d7-5957-9df8-36376e9bf38b", "ff15fd76-1c32-5536-be83-2ac4d071f398"]
RIDS = {"web-1": "/vms/web-1", "web-2": "/vms/web-2"}  # a topology field never cut: cut once per change


def vm_data(key: str, name: str, zone: Any, long_id: bool, complete: bool, tags: dict[str, str],
            ) -> dict[str, Any]:
    return {"vmId": key * 2 if long_id else key, "name": name, "resourceId": RIDS.get(name, "/vms/other"),
            "subscriptionId": "s", "resourceGroupName": "rg", "location": "westeurope", "zone": zone,
            "platformFaultDomain": 1, "platformUpdateDomain": "0", "tags": tags, "complete": complete}


DATA = st.builds(vm_data, st.sampled_from(KEYS), st.sampled_from(["web-1", "web-2", "web\x07", "w" * 41]),
                 st.sampled_from(["", "1", 2]), st.booleans(), st.booleans(),
                 st.sampled_from([{}, {"role": "web"}]))
REPORT = st.tuples(st.sampled_from(KEYS), DATA, st.integers(0, 600), st.integers(0, 600))


def heartbeat(key: str, info: dict[str, Any], t: int, i: int) -> dict[str, Any]:
    return {"specversion": "1.0", "type": "com.azure.scheduledevents.heartbeat", "id": f"hb/{key}/{i}",
            "time": f"2027-01-15T08:{t // 60 % 60:02d}:{t % 60:02d}Z", "vmid": key, "data": {"Vm": info}}


Report = tuple[str, dict[str, Any], int, int]  # VM key, data.Vm, time, hub time (seconds after T0)


def folded(reports: list[Report], read_again: bool) -> tuple[FleetState, Counter[str]]:
    state, stats = FleetState(), FoldStats()
    for i, (key, info, t, enqueued) in enumerate(reports):
        if read_again:
            for vm in state.vms.values():
                vm.seen = None
        fold_event(state, heartbeat(key, info, t, i), stats, LIMITS, T0 + enqueued, sender=Sender(key))
    return state, stats.capped


@settings(max_examples=150, deadline=None)
@given(reports=st.lists(REPORT, max_size=12), repeat=st.integers(1, 3))
def test_a_data_vm_read_before_folds_as_if_read_again(reports, repeat):
    reports = [r for r in reports for _ in range(repeat)]
    state, capped = folded(reports, read_again=False)
    again, capped_again = folded(reports, read_again=True)
    assert state.vms == again.vms
    assert [(v.placed, v.placed_stamp, v.claims, v.topology_stamp) for v in state.vms.values()] == \
        [(v.placed, v.placed_stamp, v.claims, v.topology_stamp) for v in again.vms.values()]
    assert capped == capped_again
