"""The coordinator through storage, queue and hub outages (issue 27's fault acceptance).

The fleet of test_rolling.py and test_ha.py: the simulator, one agent subprocess per VM (Event
Hubs sink with heartbeats, approvals from its Azurite queue), the Event Hubs broker, Azurite blob
and queue, and two instances ``a`` and ``b`` of coordinator ``out`` as ``coordinator run``
subprocesses. Each instance reaches the blob service through a TCP relay of its own
(tests/support/tcp_relay.py), so that one of them alone can be cut off. The budget is one VM of
the ``api`` scale set at a time (``max_unavailable = 1`` per group and zone).

One scenario runs once for the module (``outages``). In each phase two Reboots of the ``api`` set
roll; the fault begins as soon as the first has Started, so the second must wait through it:

- ``blob``: Azurite's blob process is stopped (SIGSTOP) for 20 s, longer than the 15 s lease, then
  continued (SIGCONT): neither instance can renew or take the lease.
- ``queue``: Azurite's queue process is stopped for at least 12 s: the second approval cannot be
  put in its queue (and the agents cannot read theirs).
- ``hub``: the broker refuses connections for at least 12 s (it stops listening): nothing is read
  or published, and the agents cannot send.
- ``lease``: the leader's own path to the blob service hangs (its relay stops passing bytes)
  until the standby has taken over.

During each outage, once the leader's metrics count the part down (and, with storage down, it no
longer acts), its API is asked for ``/v1/status``, a ``pause`` (and, when it was accepted, a
``resume``), ``/healthz`` and ``/metrics``, each request with its own client timeout of 2 s: a
request that completes answered in time. The outage lasts until then, and at least its length.
Each test then checks one behaviour against the simulator's record, the agents' logs, the hub, or
the coordinators' logs.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.azurite import needs_blob_and_queue
from tests.support.tcp_relay import TcpRelay
from tests.support.waiting import wait_for

from .fleet import DECISION, Coordinator, Fleet, Timeline, utc

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(480),  # the scenario runs in the first test's setup: about 3.5 min
    needs_blob_and_queue,
]

ROLLS = {"blob": ("api_0", "api_1"), "queue": ("api_2", "api_3"), "hub": ("api_0", "api_1"),
         "lease": ("api_2", "api_3")}
OUTAGE = {"blob": 20.0, "queue": 12.0, "hub": 12.0}  # s at least (blob: the lease expires during it)
SEEN_WITHIN = 45.0  # s into the outage the leader has to see it (under /healthz's 60 s to "unhealthy")
ECHO_TIMEOUT = 60.0  # longer than an outage: the agents' own queue reads may be held up by it
CLIENT_TIMEOUT = 2.0
WHAT = {"blob": "storage account", "queue": "approval queues", "hub": "Event Hub"}
PART = {"blob": "storage", "queue": "queues", "hub": "hub-read"}


def role(c: Coordinator) -> str:
    try:
        return str(c.get("/v1/state")["role"])
    except Exception:  # noqa: BLE001 - not answering (yet)
        return ""


def ask(c: Coordinator, phase: str) -> dict[str, Any]:
    """The leader's API during an outage, each request with a 2 s client timeout (an exception
    instead of an answer when it did not answer in time)."""
    http = requests.Session()
    http.trust_env = False
    auth = {"Authorization": f"Bearer {c.token}"}
    out: dict[str, Any] = {}

    def call(key: str, method: str, path: str, **kwargs: Any) -> Any:
        try:
            out[key] = http.request(method, c.url + path, timeout=CLIENT_TIMEOUT, **kwargs)
        except requests.RequestException as exc:
            out[key] = exc
        return out[key]

    call("status", "GET", "/v1/status", headers=auth)
    body = {"scope": "fleet", "reason": f"{phase} outage drill", "actor": "person:test"}
    paused = call("pause", "POST", "/v1/pause", headers=auth, json=body)
    if isinstance(paused, requests.Response) and paused.status_code in (200, 202):
        call("resume", "POST", "/v1/resume", headers=auth, json=body)
    call("healthz", "GET", "/healthz")
    call("metrics", "GET", "/metrics")
    return out


def sees_it(c: Coordinator, phase: str) -> bool:
    """The leader counts the phase's part down (and, without storage, has stopped acting): what
    the requests of ``ask`` are about."""
    down = f'se_forwarder_coordinator_reachable{{part="{PART[phase]}"}} 0.0'
    if down not in requests.get(c.url + "/metrics", timeout=CLIENT_TIMEOUT, proxies={"http": ""}).text:
        return False
    return phase != "blob" or c.get("/v1/state")["acting"] is False


def log_lines(c: Coordinator) -> list[tuple[float, str]]:
    """(time, message) of each JSON log line."""
    return [(utc(str(line["time"])), str(line.get("message", ""))) for line in c.logged() if "time" in line]


def run_phase(fleet: Fleet, timeline: Timeline, phase: str, coordinators: tuple[Coordinator, ...],
              relays: dict[str, TcpRelay]) -> dict[str, Any]:
    vms = ROLLS[phase]
    ids = [fleet.add(vm, NotBeforeInSeconds=18000 + 10 * i) for i, vm in enumerate(vms)]
    record: dict[str, Any] = {"ids": ids}
    wait_for(lambda: ids[0] in timeline.started, 90, f"{phase}: the first event to start")
    leader = wait_for(lambda: next((c for c in coordinators if role(c) == "leader"), None), 60,
                      f"{phase}: a leader")
    standby = next(c for c in coordinators if c is not leader)
    record["leader"], record["standby"] = leader.instance, standby.instance
    record["began"] = time.time()
    if phase == "lease":
        relays[leader.instance].hang()
        wait_for(lambda: role(standby) == "leader", 60, "the standby to take over", interval=0.5)
        record["leader_role_then"] = role(leader)
        relays[leader.instance].resume()
    else:
        fault_on, fault_off = {
            "blob": (lambda: os.kill(fleet.blob.proc.pid, signal.SIGSTOP),
                     lambda: os.kill(fleet.blob.proc.pid, signal.SIGCONT)),
            "queue": (lambda: os.kill(fleet.queue.proc.pid, signal.SIGSTOP),
                      lambda: os.kill(fleet.queue.proc.pid, signal.SIGCONT)),
            "hub": (fleet.broker.stop, fleet.broker.start),
        }[phase]
        fault_on()
        try:
            wait_for(lambda: sees_it(leader, phase), SEEN_WITHIN, f"{phase}: the leader to see the outage")
            record["asked"] = ask(leader, phase)
            time.sleep(max(0.0, OUTAGE[phase] - (time.time() - record["began"])))
        finally:
            fault_off()
    record["ended"] = time.time()
    wait_for(lambda: ids[1] in timeline.completed, 150, f"{phase}: the second event to roll")
    return record


@pytest.fixture(scope="module")
def outages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base: Path = tmp_path_factory.mktemp("outages")
    fleet = Fleet(base)
    timeline = Timeline()
    fleet.server.sim.subscribe(timeline)
    record: dict[str, Any] = {"timeline": timeline, "phases": {}}
    coordinators: tuple[Coordinator, ...] = ()
    relays: dict[str, TcpRelay] = {}
    try:
        fleet.start()
        relays = {name: TcpRelay(fleet.blob.port or 0).start() for name in ("a", "b")}
        coordinators = tuple(fleet.coordinator("out", name, blob_port=relays[name].port,
                                               echo_timeout=ECHO_TIMEOUT) for name in ("a", "b"))
        for c in coordinators:
            c.start()
        wait_for(lambda: {role(c) for c in coordinators} == {"leader", "standby"}, 60,
                 "one leader and one standby")
        for phase in ROLLS:
            record["phases"][phase] = run_phase(fleet, timeline, phase, coordinators, relays)
        settled = time.monotonic() + 30  # the last sent records reach the hub; one missing fails its test
        while not every_approval_recorded_sent(fleet.decisions("out")) and time.monotonic() < settled:
            time.sleep(0.5)
        record["requests"] = fleet.server.sim.approvals()
        record["decisions"] = fleet.decisions("out")
        record["rejections"] = fleet.hub("com.azure.scheduledevents.approvalrejected")
        record["acted_on"] = [json.loads(line)["message"].split()[2]
                              for agent in fleet.agents.values() if agent.log_path is not None
                              for line in agent.log_path.read_text(errors="replace").splitlines()
                              if line.startswith("{") and " acted on" in line]
        record["logs"] = {c.instance: log_lines(c) for c in coordinators}
        yield record
    finally:
        for c in coordinators:
            if c.alive():
                c.stop()
        for relay in relays.values():
            relay.stop()
        fleet.stop()
        for c in coordinators:
            if c.log.exists():
                print(f"--- {c.name}-{c.instance} log (end) ---\n" + c.log.read_text()[-6000:])


def phases(outages: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return outages["phases"]


def approvals(outages: dict[str, Any]) -> list[dict[str, Any]]:
    return live_approvals(outages["decisions"])


def live_approvals(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in decisions if d["type"] == DECISION + "approve" and not d["data"]["Shadow"]]


def every_approval_recorded_sent(decisions: list[dict[str, Any]]) -> bool:
    sent = {d["id"] for d in decisions if d["type"] == DECISION + "sent"}
    return all(d["id"].replace("/approve/", "/sent/") in sent for d in live_approvals(decisions))


# -- budgets and StartRequests (the simulator's record) ---------------------------------------------


def test_the_budget_holds_through_every_outage(outages: dict[str, Any]) -> None:
    timeline = outages["timeline"]
    for phase, seen in phases(outages).items():
        first, second = seen["ids"]
        assert timeline.started[second] >= timeline.completed[first], f"{phase}: two api VMs down at once"


def test_every_event_got_exactly_one_start_request(outages: dict[str, Any]) -> None:
    ids = [i for seen in phases(outages).values() for i in seen["ids"]]
    per_event = {i: sum(1 for r in outages["requests"] if r["EventId"] == i) for i in ids}
    assert set(per_event.values()) == {1}, per_event


# -- one approval message per decision (the agents' queues) -----------------------------------------


def test_every_approval_decision_reached_its_agent_exactly_once(outages: dict[str, Any]) -> None:
    refused = [e["data"]["Message"]["Id"] for e in outages["rejections"]]
    received = outages["acted_on"] + refused
    counts = {d["id"]: received.count(d["id"]) for d in approvals(outages)}
    assert counts and set(counts.values()) == {1}, counts


def test_every_approval_has_one_sent_record_and_none_was_retried(outages: dict[str, Any]) -> None:
    sent = [d for d in outages["decisions"] if d["type"] == DECISION + "sent"]
    for d in approvals(outages):
        assert d["data"]["Attempt"] == 1, f"{d['id']}: retried although its message went out once"
        mine = {s["id"] for s in sent if s["data"]["EventId"] == d["data"]["EventId"]}
        assert mine == {d["id"].replace("/approve/", "/sent/")}


# -- during each outage: the API answers, /healthz says what is down ---------------------------------


@pytest.mark.parametrize("phase", ["blob", "queue", "hub"])
def test_during_the_outage_the_leader_answers_status_and_a_pause_within_two_seconds(
        outages: dict[str, Any], phase: str) -> None:
    asked = phases(outages)[phase]["asked"]
    for key in ("status", "pause", "healthz", "metrics"):
        assert isinstance(asked[key], requests.Response), f"{key}: no answer within 2 s ({asked[key]})"
    assert asked["status"].status_code == 200 and asked["metrics"].status_code == 200
    expected = {"blob": 503, "queue": 200, "hub": 202}[phase]
    assert asked["pause"].status_code == expected, asked["pause"].text


def test_a_leader_that_cannot_renew_refuses_a_pause_saying_why(outages: dict[str, Any]) -> None:
    error = phases(outages)["blob"]["asked"]["pause"].json()["error"]
    assert "cannot act now" in error and "leader lease" in error


def test_a_pause_the_hub_cannot_take_is_in_force_and_published_later(outages: dict[str, Any]) -> None:
    asked = phases(outages)["hub"]["asked"]
    assert asked["pause"].json()["published"] is False and asked["resume"].status_code == 202
    published = {d["id"] for d in outages["decisions"]}
    assert asked["pause"].json()["decision"]["id"] in published
    assert asked["resume"].json()["decision"]["id"] in published


@pytest.mark.parametrize("phase", ["blob", "queue", "hub"])
def test_healthz_says_what_is_unreachable(outages: dict[str, Any], phase: str) -> None:
    text = phases(outages)[phase]["asked"]["healthz"].text
    assert text.startswith("degraded: ") and f"{WHAT[phase]}" in text and "unreachable" in text, text


@pytest.mark.parametrize("phase", ["blob", "queue", "hub"])
def test_metrics_say_which_part_does_not_answer(outages: dict[str, Any], phase: str) -> None:
    text = phases(outages)[phase]["asked"]["metrics"].text
    assert f'se_forwarder_coordinator_reachable{{part="{PART[phase]}"}} 0.0' in text
    assert 'se_forwarder_coordinator_reachable{part="queues"} 1.0' in text or phase == "queue"


@pytest.mark.parametrize("phase", ["blob", "queue", "hub"])
def test_status_reports_the_part_unreachable_with_its_last_success(outages: dict[str, Any],
                                                                   phase: str) -> None:
    reach = phases(outages)[phase]["asked"]["status"].json()["service"]["reachability"]
    part = reach[PART[phase]]
    assert part["reachable"] is False and part["lastSuccess"] and part["lastError"]
    assert all(r["reachable"] for name, r in reach.items() if name not in (PART[phase], "hub-publish"))


# -- leadership --------------------------------------------------------------------------------------


def changes(outages: dict[str, Any], name: str, since: float) -> list[tuple[float, str]]:
    """An instance's lines saying it stopped acting or acts again, from ``since``."""
    return [(at, m) for at, m in outages["logs"][name] if at >= since
            and m.startswith(("this instance stopped acting", "this instance acts as the leader"))]


def test_through_a_storage_outage_the_leader_says_once_that_it_stopped_and_once_that_it_acts_again(
        outages: dict[str, Any]) -> None:
    seen = phases(outages)["blob"]
    lines = {name: changes(outages, name, seen["began"]) for name in outages["logs"]}
    during = [(name, m) for name, said in lines.items() for at, m in said if at <= seen["ended"]]
    assert len(during) == 1, lines
    name, stopped = during[0]
    assert name == seen["leader"] and "could not be renewed since: renewing the leader lease" in stopped
    for said in lines.values():  # one line per change: never twice the same in a row
        kinds = [m.split()[2] for _, m in said]
        assert all(a != b for a, b in zip(kinds, kinds[1:], strict=False)), said
    assert any(m.startswith("this instance acts") for said in lines.values() for at, m in said
               if at > seen["ended"]), lines


def test_the_standby_takes_over_when_the_leader_cannot_renew(outages: dict[str, Any]) -> None:
    seen = phases(outages)["lease"]
    assert seen["leader_role_then"] != "leader"
    old = changes(outages, seen["leader"], seen["began"])
    new = changes(outages, seen["standby"], seen["began"])
    assert [m.split()[2] for _, m in old] == ["stopped"], old
    assert new and new[0][1].startswith("this instance acts") and old[0][0] < new[0][0], (old, new)


# -- the hub reader -----------------------------------------------------------------------------------


def test_the_hub_reader_says_when_it_lost_and_regained_the_hub_and_how_far_behind(
        outages: dict[str, Any]) -> None:
    seen = phases(outages)["hub"]
    lines = [m for at, m in outages["logs"][seen["leader"]] if seen["began"] <= at <= seen["ended"] + 30]
    assert sum(m.startswith("cannot reach the Event Hub (reading)") for m in lines) == 1
    assert sum(m.startswith("reached the Event Hub (reading) again after") for m in lines) == 1
    assert any(m.startswith("reading the Event Hub again from where the fold was: ") for m in lines)
