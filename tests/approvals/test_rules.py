"""Policy rules, table-driven: each event shape against each configuration, checked against the
StartRequests the simulator actually received (real HTTP), and the ``approved`` CloudEvent kept.

Plus the agent as a subprocess: leader-only between two VMs, and dry-run.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from se_forwarder import config
from se_forwarder.approvals.approver import Approver
from se_forwarder.errors import ConfigError
from se_forwarder.imds import ImdsClient
from se_forwarder.model import VmIdentity
from se_forwarder.outbox import Outbox
from se_forwarder.simulator import SimulatorServer
from tests.support.agent import AgentProcess, cloudevents, log_records
from tests.support.config import write_agent_config
from tests.support.waiting import wait_for


@dataclass
class Case:
    name: str
    event: dict[str, Any]
    approved_by: str | None  # None: must not be approved (no POST at all)
    approvals: dict[str, Any] = field(default_factory=dict)


def rule(action: str, name: str | None = None, **when: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"action": action, "when": when}
    if name:
        out["name"] = name
    return out


REDEPLOY_NOTICE = {"rules": [rule("approve", "long-notice", type="Redeploy", min_notice=500)]}
MAX_NOTICE = {"rules": [rule("approve", "short-notice", max_notice=120)]}
MINE = {"rules": [rule("approve", "mine", affects_this_vm=True)]}
WEB = {"rules": [rule("approve", "web", resources=["web-*", "api-?"])]}
IGNORE_REBOOTS = {"rules": [rule("ignore", "no-reboots", type="Reboot"), rule("approve", "rest")]}
WAIT_FIRST = {"rules": [rule("wait", "hold-users", source="User"), rule("approve", "all")]}
TYPES = {"rules": [rule("approve", "moves", type=["Redeploy", "Preempt"], source="Platform")]}
LIVE_MIGRATION = {"rules": [rule("approve", "live-migration", description="*live migration*")]}

CASES = [
    # The documented sample's policy (no rules configured).
    Case("sample approves a user reboot", {"EventType": "Reboot", "EventSource": "User"},
         "policy:sample-user"),
    Case("sample approves a user redeploy", {"EventType": "Redeploy", "EventSource": "User"},
         "policy:sample-user"),
    Case("sample approves a 5 s freeze", {"EventType": "Freeze", "DurationInSeconds": 5},
         "policy:sample-freeze"),
    Case("sample approves a 0 s freeze", {"EventType": "Freeze", "DurationInSeconds": 0},
         "policy:sample-freeze"),
    Case("sample waits on a 9 s freeze", {"EventType": "Freeze", "DurationInSeconds": 9}, None),
    Case("sample waits on a freeze of unknown duration",
         {"EventType": "Freeze", "DurationInSeconds": -1}, None),
    Case("sample waits on a platform reboot", {"EventType": "Reboot"}, None),
    Case("sample waits on a platform terminate", {"EventType": "Terminate"}, None),
    Case("a Started user event is never POSTed",
         {"EventType": "Reboot", "EventSource": "User", "EventStatus": "Started"}, None),
    Case("no rules at all approves nothing", {"EventType": "Reboot", "EventSource": "User"},
         None, {"rules": []}),
    # Custom rules: each matcher.
    Case("min_notice met", {"EventType": "Redeploy", "NotBeforeInSeconds": 900},
         "policy:long-notice", REDEPLOY_NOTICE),
    Case("min_notice not met", {"EventType": "Redeploy", "NotBeforeInSeconds": 300}, None,
         REDEPLOY_NOTICE),
    Case("max_notice met", {"EventType": "Reboot", "NotBeforeInSeconds": 60},
         "policy:short-notice", MAX_NOTICE),
    Case("max_notice not met", {"EventType": "Reboot", "NotBeforeInSeconds": 900}, None,
         MAX_NOTICE),
    Case("affects_this_vm matches this VM", {"EventType": "Reboot", "Resources": ["vm9", "vm0"]},
         "policy:mine", MINE),
    Case("affects_this_vm skips another VM's event", {"EventType": "Reboot", "Resources": ["vm9"]},
         None, MINE),
    Case("resource pattern matches", {"EventType": "Reboot", "Resources": ["vm0", "api-1"]},
         "policy:web", WEB),
    Case("resource pattern does not match", {"EventType": "Reboot", "Resources": ["vm0", "db-1"]},
         None, WEB),
    Case("a list of types matches any", {"EventType": "Preempt"}, "policy:moves", TYPES),
    Case("source must match too", {"EventType": "Redeploy", "EventSource": "User"}, None, TYPES),
    Case("description pattern matches, case-insensitively",
         {"EventType": "Freeze", "Description": "Virtual machine is being paused because of a "
                                                "memory-preserving Live Migration operation."},
         "policy:live-migration", LIVE_MIGRATION),
    Case("description pattern tells host maintenance apart",
         {"EventType": "Freeze", "Description": "Host server is undergoing maintenance."}, None,
         LIVE_MIGRATION),
    Case("first match wins: ignore before approve", {"EventType": "Reboot"}, None, IGNORE_REBOOTS),
    Case("first match wins: the next rule applies", {"EventType": "Freeze"}, "policy:rest",
         IGNORE_REBOOTS),
    Case("first match wins: wait before approve", {"EventType": "Reboot", "EventSource": "User"},
         None, WAIT_FIRST),
    # dry_run and leader_only.
    Case("dry_run never POSTs", {"EventType": "Reboot", "EventSource": "User"}, None,
         {"dry_run": True}),
    Case("leader_only approves as first in Resources",
         {"EventType": "Reboot", "EventSource": "User", "Resources": ["vm0", "vm1"]},
         "policy:sample-user", {"leader_only": True}),
    Case("leader_only waits when another VM is first",
         {"EventType": "Reboot", "EventSource": "User", "Resources": ["vm1", "vm0"]},
         None, {"leader_only": True}),
    Case("leader_only and dry_run never POST",
         {"EventType": "Reboot", "EventSource": "User", "Resources": ["vm0"]},
         None, {"leader_only": True, "dry_run": True}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_table(case: Case, simulator, tmp_path):
    settings = config.from_dict({"approvals": case.approvals}).approvals
    event_id = simulator.sim.add_event(case.event)["EventId"]
    imds = ImdsClient(simulator.url)
    vm = VmIdentity.from_compute(imds.get_compute())
    approver = Approver(imds, tmp_path, vm, settings)
    approver.offer(imds.get_document())
    with Outbox(tmp_path) as box:
        approver.consider(box)
        approver.consider(box)  # a second pass never POSTs again
        posts = [a for a in simulator.sim.approvals() if a["EventId"] == event_id]
        approved = [json.loads(e.payload) for e in box.events_for(event_id)
                    if e.state == "approved"]
    imds.close()
    if case.approved_by is None:
        assert posts == [] and approved == []
    else:
        assert len(posts) == 1 and posts[0]["accepted"] and posts[0]["started"]
        assert [a["data"]["ApprovedBy"] for a in approved] == [case.approved_by]
        assert approved[0]["id"] == f"{event_id}/approved"


QUEUE = {"queue": "se-approvals-{vm_name}", "connection_string_env": "APPROVALS_CONN",
         "verify_keys_env": "APPROVALS_PUBLIC_KEYS"}


@pytest.mark.parametrize(("approvals", "message"), [
    ({"coordinator_only": True}, "approvals.coordinator_only: needs [approvals.queue]"),
    ({"coordinator_only": True, "queue": QUEUE, "rules": [rule("approve", "users", source="User")]},
     "approvals.rules[0].action: approve contradicts coordinator_only = true"),
    ({"coordinator_only": "yes", "queue": QUEUE}, "approvals.coordinator_only"),
    ({"coordinator_only": True, "queue": QUEUE,
      "hooks": {"prepare": ["true"], "approve_after_prepare": True}},
     "approvals.hooks.approve_after_prepare: contradicts coordinator_only = true"),
])
def test_coordinator_only_refuses_what_would_contradict_it(approvals, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.from_dict({"approvals": approvals})


def test_coordinator_only_leaves_no_rule_nor_hook_that_approves():
    settings = config.from_dict({"approvals": {"coordinator_only": True, "queue": QUEUE,
                                               "hooks": {"prepare": ["true"]}}}).approvals
    assert settings.rules == ()  # not the sample's, which approves user events and short freezes
    assert settings.hooks.prepare == ("true",) and settings.hooks.approve_after_prepare is False


def test_coordinator_only_allows_rules_that_only_wait_or_ignore():
    settings = config.from_dict({"approvals": {
        "coordinator_only": True, "queue": QUEUE,
        "rules": [rule("ignore", "no-freezes", type="Freeze"), rule("wait", "rest")]}}).approvals
    assert settings.coordinator_only and [r.action for r in settings.rules] == ["ignore", "wait"]


def test_prepare_then_approve_without_a_prepare_hook_is_a_config_error():
    with pytest.raises(ConfigError, match=r"approvals.rules\[0\].action: prepare-then-approve needs"):
        config.from_dict({"approvals": {"rules": [rule("prepare-then-approve")]}})


def test_rule_names_must_be_unique():
    with pytest.raises(ConfigError, match=r"approvals.rules\[1\].name"):
        config.from_dict({"approvals": {"rules": [rule("approve", "a"), rule("wait", "a")]}})


# -- the agent as a subprocess ------------------------------------------------------------------


def _agent(server: SimulatorServer, vm: str, tmp_path, approvals: dict[str, Any]) -> AgentProcess:
    base = tmp_path / vm
    base.mkdir()
    cfg = write_agent_config(base / "agent.toml", imds_url=server.vm_url(vm), state_dir=base / "state",
                       sink_path=base / "out.jsonl", approvals=approvals)
    return AgentProcess(["--config", str(cfg)], log_path=base / "agent.log").start()


def test_leader_only_agents_approve_once_and_both_forward(agents, tmp_path):
    with SimulatorServer(vm_names=("vm0", "vm1")) as server:
        for vm in ("vm0", "vm1"):
            agents.append(_agent(server, vm, tmp_path, {"leader_only": True}))
        event_id = server.sim.add_event(
            {"EventType": "Reboot", "EventSource": "User", "Resources": ["vm1", "vm0"]})["EventId"]
        wait_for(lambda: server.sim.approvals(), timeout=15, what="the leader's approval")
        for vm in ("vm0", "vm1"):
            wait_for(lambda vm=vm: cloudevents(tmp_path / vm / "out.jsonl", "started"), timeout=15,
                     what=f"{vm} forwarding the event")
        time.sleep(0.5)  # both agents have seen the event Started: nothing more will be POSTed
        posts = server.sim.approvals()
    assert [(a["EventId"], a["vm"]) for a in posts] == [(event_id, "vm1")]
    assert cloudevents(tmp_path / "vm0" / "out.jsonl", "approved") == []
    assert [e["data"]["ApprovedBy"] for e in cloudevents(tmp_path / "vm1" / "out.jsonl", "approved")] \
        == ["policy:sample-user"]


def test_dry_run_agent_logs_what_it_would_approve_and_never_posts(agents, tmp_path):
    with SimulatorServer() as server:
        agents.append(_agent(server, "vm0", tmp_path, {"dry_run": True}))
        event_id = server.sim.add_event({"EventType": "Reboot", "EventSource": "User"})["EventId"]
        log = tmp_path / "vm0" / "agent.log"
        wait_for(lambda: any("dry run: would approve" in r["message"] and r.get("event_id") == event_id
                             for r in log_records(log)), timeout=15, what="the dry-run log line")
        posts = server.sim.approvals()
    assert posts == []
    assert cloudevents(tmp_path / "vm0" / "out.jsonl", "approved") == []


# -- when the approver thread looks again -------------------------------------------------------


class CountingApprover(Approver):
    """Counts the approver thread's passes over the document."""

    steps = 0

    def _step(self, outbox: Outbox) -> None:
        self.steps += 1
        super()._step(outbox)


def _run_approver(simulator, tmp_path, approvals: dict[str, Any], event: dict[str, Any],
                  seconds: float) -> tuple[CountingApprover, list[dict[str, Any]]]:
    """The approver thread for ``seconds`` after one document with ``event``, offered once."""
    settings = config.from_dict({"approvals": approvals}).approvals
    simulator.sim.add_event(event)
    imds = ImdsClient(simulator.url)
    approver = CountingApprover(imds, tmp_path, VmIdentity.from_compute(imds.get_compute()), settings)
    approver.offer(imds.get_document())
    stop = threading.Event()
    approver.start(stop)
    try:
        time.sleep(seconds)
    finally:
        stop.set()
        approver.join(5)
        imds.close()
    return approver, simulator.sim.approvals()


def test_an_approver_with_nothing_time_can_change_looks_once_per_document(simulator, tmp_path):
    approver, posts = _run_approver(simulator, tmp_path, {"dry_run": True},
                                    {"EventType": "Reboot", "EventSource": "User"}, 2.5)
    assert approver.steps == 1, "no timer: only the new document woke it"
    assert posts == []


def test_a_notice_rule_approves_once_its_notice_is_reached_without_a_new_document(
        simulator, tmp_path):
    approver, posts = _run_approver(
        simulator, tmp_path, {"rules": [rule("approve", "short-notice", max_notice=3)]},
        {"EventType": "Reboot", "NotBeforeInSeconds": 6}, 5.0)
    assert [p["accepted"] for p in posts] == [True], "approved when NotBefore came within 3 s"
    assert approver.steps >= 2, "it looked again while time could change the decision"
