"""Two coordinator instances over a real fleet: an agent that stops heartbeating, the leader killed
mid-rollout, and both restarted (issue 16's fault acceptance).

The same fleet as test_rolling.py (simulator topology, one agent subprocess per VM, the Event Hubs
broker, Azurite blob and queue). Two instances ``a`` and ``b`` of coordinator ``ha`` share one
lease blob. One scenario runs once for the module (``faults``):

1. A Freeze (not managed) is scheduled for web-5, so the coordinator learns the web set from the
   VMs that report it; then the agent of web-5 is killed with SIGKILL: its heartbeats stop.
2. Reboots are scheduled for web-0, web-1 (the group of web-5) and api_0, api_1, api_2.
3. As soon as api_0 has Started, the leader is killed with SIGKILL; the standby takes over.
4. When the api group has rolled, every agent is stopped so the hub goes quiet, and the leader
   is stopped: the fold its snapshot holds at that stop is the reference (its digest, made here).
   The instances are then restarted one at a time: once from the snapshot blob and the hub after
   it, once with the snapshot deleted (the whole hub); each must hold the same fold.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from se_forwarder.fleet.coordinator.fold.snapshot import restore_lines
from se_forwarder.fleet.coordinator.service import PASS_AT_LEAST
from se_forwarder.fleet.coordinator.view.digest import Digest
from tests.azurite import needs_blob_and_queue
from tests.support.waiting import wait_for

from .fleet import HEARTBEAT_TIMEOUT, Coordinator, Fleet, Timeline

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420),  # the scenario runs in the first test's setup: over 3 min on a loaded machine
    needs_blob_and_queue,
]

SILENT = "web-5"
WEB = ["web-0", "web-1"]
API = ["api_0", "api_1", "api_2"]
TAKEOVER_LIMIT = 30.0


def role(c: Coordinator) -> str:
    try:
        return str(c.get("/v1/state")["role"])
    except Exception:  # noqa: BLE001 - not up yet
        return ""


def quiet_digest(c: Coordinator) -> str:
    """The fold's digest once it stops changing (the hub is quiet)."""
    last = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = c.get("/v1/state")
        if state["acting"] and state["digest"] == last:
            return last
        last = state["digest"] if state["acting"] else ""
        time.sleep(1.5)
    raise AssertionError(f"{c.instance}'s fold did not settle")


def snapshot_lines(blobs: Any) -> list[bytes]:
    """The lines of the fold's snapshot blob, written at each clean stop (ha/snapshot_blob.py)."""
    return gzip.decompress(blobs.download_blob("ha/snapshot.json.gz").readall()).splitlines()


def saved_digest(lines: list[bytes]) -> str:
    """The digest of the fold a snapshot's lines hold (between its header and its seal)."""
    return Digest().of(restore_lines(lines[1:-1]))


def fold_difference(faults: dict[str, Any], after: str) -> str:
    """The fold's lines only in the snapshot saved at the stop, and only in ``after`` (five of each)."""
    before, then = set(faults["snapshot_before"][1:-1]), set(faults[after][1:-1])
    return f"only at the stop: {sorted(before - then)[:5]}\nonly after: {sorted(then - before)[:5]}"


def refusal_naming(leader: Coordinator, standby: Coordinator) -> Any:
    """A control command sent to the standby, once its refusal names the leader (None before)."""
    done = standby.cli("pause", "--reason", "sent to the wrong instance")
    return done if leader.url in done.stderr else None


def sent_approvals(c: Coordinator) -> list[str]:
    return [line["message"].split()[2] for line in c.logged()
            if line.get("message", "").startswith("sent approval ")]


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("ha")
    fleet = Fleet(base)
    timeline = Timeline()
    fleet.server.sim.subscribe(timeline)
    record: dict[str, Any] = {"timeline": timeline}
    a = b = None
    try:
        fleet.start()
        a = fleet.coordinator("ha", "a")
        b = fleet.coordinator("ha", "b")
        a.start()
        b.start()
        wait_for(lambda: {role(a), role(b)} == {"leader", "standby"}, 60, "one leader and one standby")
        leader, standby = (a, b) if role(a) == "leader" else (b, a)
        record["first_leader"] = leader.instance
        record["leader_url"] = leader.url
        # The leader records itself on the lease blob just after taking it: the standby may need a
        # moment to read who leads.
        record["standby_refusal"] = wait_for(lambda: refusal_naming(leader, standby), 10,
                                             "the standby to know the leader", interval=0.5)

        # groups are learned from co-reception: an unmanaged Freeze of web-5 shows the web set
        record["freeze"] = fleet.add(SILENT, "Freeze")
        wait_for(lambda: leader.get("/v1/status")["fleet"]["groups"] == 2, 60, "the two groups to be learned")
        fleet.agents[SILENT].kill()
        record["silenced_at"] = time.time()
        wait_for(lambda: SILENT in {u["name"] for u in leader.get("/v1/status")["unwatched"]},
             HEARTBEAT_TIMEOUT + 20, f"{SILENT} to count as not watched")
        ids = {vm: fleet.add(vm, NotBeforeInSeconds=18000 + 10 * i) for i, vm in enumerate(WEB + API)}
        record["ids"] = ids

        wait_for(lambda: ids["api_0"] in timeline.started, 60, "api_0 to start")
        leader.kill()
        killed_at = time.monotonic()
        wait_for(lambda: role(standby) == "leader", 60, "the standby to take over", interval=0.2)
        record["takeover_seconds"] = time.monotonic() - killed_at
        wait_for(lambda: all(ids[vm] in timeline.completed for vm in API), 120, "api to roll")
        record["web_status"] = standby.get("/v1/status")
        record["requests"] = fleet.server.sim.approvals()
        record["sent"] = sent_approvals(leader) + sent_approvals(standby)
        record["decisions"] = fleet.decisions("ha")

        for name, agent in fleet.agents.items():
            if name != SILENT:
                agent.kill()
        # every VM goes stale; the leader records that once (not-watched defers), then all is quiet.
        # Heartbeats read late (a loaded machine) make a VM stale later: wait for every one of them,
        # then for the decision pass after that, so no decision is made after the digest is read.
        stopped = {name for name in fleet.agents}
        wait_for(lambda: stopped <= {u["name"] for u in standby.get("/v1/status")["unwatched"]},
                 60, "every VM to be not watched")
        time.sleep(2 * PASS_AT_LEAST)
        quiet_digest(standby)
        assert standby.stop() == 0
        from azure.storage.blob import ContainerClient

        blobs = ContainerClient.from_connection_string(fleet.blob.connection_string, "coordinator")
        record["snapshot_before"] = snapshot_lines(blobs)  # the fold as it was at the stop
        record["digest_before"] = saved_digest(record["snapshot_before"])

        leader.start()  # from the snapshot the standby wrote at its clean stop, and the hub after it
        wait_for(lambda: role(leader) == "leader", 60, "the restarted instance to lead")
        record["digest_from_snapshot"] = quiet_digest(leader)
        record["restored_from_snapshot"] = any("fold restored from the snapshot" in line.get("message", "")
                                               for line in leader.logged())
        assert leader.stop() == 0
        record["snapshot_from_snapshot"] = snapshot_lines(blobs)
        blobs.delete_blob("ha/snapshot.json.gz")
        standby.start()  # no snapshot: the whole hub
        wait_for(lambda: role(standby) == "leader", 60, "the other restarted instance to lead")
        record["digest_from_hub"] = quiet_digest(standby)
        assert standby.stop() == 0
        record["snapshot_from_hub"] = snapshot_lines(blobs)
        record["sent_after_restarts"] = sent_approvals(leader) + sent_approvals(standby)
        record["requests_after_restarts"] = fleet.server.sim.approvals()
        yield record
    finally:
        for c in (a, b):
            if c is not None and c.alive():
                c.stop()
        fleet.stop()
        for c in (a, b):
            if c is not None and c.log.exists():
                print(f"--- {c.name}-{c.instance} log (end) ---\n" + c.log.read_text()[-4000:])


def test_a_vm_without_heartbeat_counts_unavailable_and_its_group_gets_nothing(faults: dict[str, Any]) -> None:
    ids = faults["ids"]
    asked = {r["EventId"] for r in faults["requests"]}
    assert not asked & {ids[vm] for vm in WEB}, "an event of the silent VM's group was approved early"
    pending = {p["eventId"]: p for p in faults["web_status"]["pending"]}
    assert pending[ids["web-0"]]["reasonCode"] == "budget"  # web-5 already counts: 1 of 1 used
    assert pending[ids["web-1"]]["reasonCode"] in ("budget", "queued")
    assert SILENT in {u["name"] for u in faults["web_status"]["unwatched"]}


def test_the_standby_takes_over_within_30_seconds(faults: dict[str, Any]) -> None:
    assert faults["takeover_seconds"] <= TAKEOVER_LIMIT


def test_the_rollout_completes_across_the_leader_change(faults: dict[str, Any]) -> None:
    ids, timeline = faults["ids"], faults["timeline"]
    spans = sorted((timeline.started[ids[vm]], timeline.completed[ids[vm]], vm) for vm in API)
    for (_s1, end1, vm1), (start2, _e2, vm2) in zip(spans, spans[1:], strict=False):
        assert start2 >= end1, f"{vm2} started while {vm1} was still Started: budget exceeded"


def test_no_approval_is_sent_twice_for_one_decision(faults: dict[str, Any]) -> None:
    sent = faults["sent_after_restarts"]
    assert sent and len(sent) == len(set(sent)), f"sent twice: {sent}"
    approves = [d["id"] for d in faults["decisions"] if d["data"]["Decision"] == "approve"]
    assert len(approves) == len(set(approves))
    per_event: dict[str, int] = {}
    for r in faults["requests_after_restarts"]:
        per_event[r["EventId"]] = per_event.get(r["EventId"], 0) + 1
    assert max(per_event.values()) == 1, f"an event was asked to start more than once: {per_event}"


def test_a_restart_from_the_snapshot_rebuilds_the_same_fold(faults: dict[str, Any]) -> None:
    assert faults["restored_from_snapshot"]
    assert faults["digest_from_snapshot"] == faults["digest_before"], \
        fold_difference(faults, "snapshot_from_snapshot")


def test_a_restart_without_a_snapshot_rebuilds_the_same_fold_from_the_hub(faults: dict[str, Any]) -> None:
    assert faults["digest_from_hub"] == faults["digest_before"], fold_difference(faults, "snapshot_from_hub")


def test_a_standby_refuses_control_requests_and_names_the_leader(faults: dict[str, Any]) -> None:
    refusal = faults["standby_refusal"]
    assert refusal.returncode != 0
    line = refusal.stderr.strip()
    assert len(line.splitlines()) == 1 and "is a standby" in line and faults["leader_url"] in line
