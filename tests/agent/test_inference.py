"""An event that vanished while last seen Scheduled: ran (inferred) or canceled, as the rules say.

The agent as a real subprocess against the simulator. The Started phase is made invisible the
way it happens for real: too short for the polls (the event is removed between two of them) or
hidden behind IMDS answering garbage, or while the agent is stopped.
"""

from __future__ import annotations

import subprocess
import sys
import time

from se_forwarder.simulator import SimulatorServer
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.paths import ROOT
from tests.support.waiting import wait_for


def start(url: str, tmp_path, agents, name: str = "a") -> AgentProcess:
    agent = AgentProcess(["--imds-url", url, "--state-dir", str(tmp_path / f"state-{name}"),
                          "--sink", f"file:{tmp_path / 'out.jsonl'}", "--poll-interval", "0.2"],
                         log_path=tmp_path / f"{name}.log").start()
    agents.append(agent)
    return agent


def events(tmp_path) -> dict[tuple[str, str], dict]:
    return {(e["subject"], e["type"].rsplit(".", 1)[1]): e for e in read_jsonl(tmp_path / "out.jsonl")}


def ended(tmp_path, event_id):
    seen = events(tmp_path)
    return (event_id, "completed") in seen or (event_id, "canceled") in seen


def assert_inferred_run(tmp_path, event_id, reason):
    seen = events(tmp_path)
    assert (event_id, "canceled") not in seen
    started, completed = seen[(event_id, "started")], seen[(event_id, "completed")]
    for event in (started, completed):
        assert event["data"]["Inferred"] is True
        assert event["data"]["InferredFrom"] == reason
        assert event["data"]["EventStatus"] == "Scheduled"  # the last status IMDS showed
    assert started["id"] == f"{event_id}/started" and completed["id"] == f"{event_id}/completed"
    assert (started["eventstatus"], completed["eventstatus"]) == ("Started", "Completed")
    order = [e["id"] for e in read_jsonl(tmp_path / "out.jsonl")]
    assert order.index(started["id"]) < order.index(completed["id"])


def test_approved_by_this_agent_then_vanished_is_started_and_completed(agents, tmp_path):
    # On a shared host the event waits for every tenant: this agent's approval is accepted
    # (200, recorded as approved) and the event stays Scheduled until it suddenly is gone.
    with SimulatorServer(vm_names=("vm0", "vm1"), multi_tenant=True) as sim:
        start(sim.vm_url("vm0"), tmp_path, agents)
        event_id = sim.sim.add_event({"EventType": "Freeze", "DurationInSeconds": 5,
                                      "Resources": ["vm0", "vm1"]})["EventId"]
        wait_for(lambda: (event_id, "approved") in events(tmp_path), what="the approval")
        assert sim.sim.event(event_id)["EventStatus"] == "Scheduled"
        sim.sim.delete_event(event_id)
        wait_for(lambda: ended(tmp_path, event_id), what="the end of the event")
    assert_inferred_run(tmp_path, event_id, "approved")


def test_not_before_passed_then_vanished_is_started_and_completed(simulator, agents, tmp_path):
    start(simulator.url, tmp_path, agents)
    # Its notice must not pass before the agent (slow to start on a loaded machine) has seen it.
    wait_for(lambda: simulator.sim.requests(), what="the agent polling")
    event_id = simulator.sim.add_event({"EventType": "Reboot", "NotBeforeInSeconds": 5,
                                        "StartedSeconds": 1})["EventId"]
    wait_for(lambda: (event_id, "scheduled") in events(tmp_path), what="scheduled")
    # IMDS answers garbage from before NotBefore until the event is gone.
    simulator.sim.add_fault({"body": "not json", "seconds": 60})
    wait_for(lambda: event_id not in {e["EventId"] for e in simulator.sim.events()}, timeout=20,
             what="the event to start and end")
    simulator.sim.clear_faults()
    wait_for(lambda: ended(tmp_path, event_id), timeout=20, what="the end of the event")
    assert simulator.sim.approvals() == []  # nobody approved it: NotBefore passed
    assert_inferred_run(tmp_path, event_id, "not-before-passed")


def test_neither_approved_nor_past_not_before_is_canceled(simulator, agents, tmp_path):
    start(simulator.url, tmp_path, agents)
    event_id = simulator.sim.add_event({"EventType": "Reboot", "NotBeforeInSeconds": 900})["EventId"]
    wait_for(lambda: (event_id, "scheduled") in events(tmp_path), what="scheduled")
    simulator.sim.delete_event(event_id)
    wait_for(lambda: ended(tmp_path, event_id), what="the end of the event")
    seen = events(tmp_path)
    canceled = seen[(event_id, "canceled")]
    assert (event_id, "started") not in seen and (event_id, "completed") not in seen
    assert canceled["eventstatus"] == "Canceled"
    assert canceled["data"]["EventStatus"] == "Scheduled"
    assert "Inferred" not in canceled["data"]


def test_vanished_while_the_agent_was_stopped(simulator, agents, tmp_path):
    agent = start(simulator.url, tmp_path, agents)
    # polling already: the Reboot is due in 2 s, and must be seen Scheduled before it starts
    wait_for(lambda: simulator.sim.requests(), 60, "the agent's first poll")
    ran = simulator.sim.add_event({"EventType": "Reboot", "NotBeforeInSeconds": 2,
                                   "StartedSeconds": 1})["EventId"]
    dropped = simulator.sim.add_event({"EventType": "Redeploy", "NotBeforeInSeconds": 900})["EventId"]
    wait_for(lambda: {(ran, "scheduled"), (dropped, "scheduled")} <= set(events(tmp_path)),
             what="both scheduled")
    assert agent.terminate() == 0
    simulator.sim.delete_event(dropped)
    wait_for(lambda: ran not in {e["EventId"] for e in simulator.sim.events()}, timeout=10,
             what="the Reboot to run and end while the agent is down")
    time.sleep(0.2)
    start(simulator.url, tmp_path, agents, name="a")
    wait_for(lambda: ended(tmp_path, ran) and ended(tmp_path, dropped), what="both ends after restart")
    assert_inferred_run(tmp_path, ran, "not-before-passed")
    assert (dropped, "canceled") in events(tmp_path)


def test_approved_with_the_cli_on_this_vm_counts_too_even_without_instance_metadata(agents,
                                                                                    tmp_path):
    with SimulatorServer(vm_names=("vm0", "vm1"), multi_tenant=True,
                         instance_endpoint="missing") as sim:
        start(sim.vm_url("vm0"), tmp_path, agents)
        event_id = sim.sim.add_event({"EventType": "Reboot", "Resources": ["vm0", "vm1"]})["EventId"]
        wait_for(lambda: (event_id, "scheduled") in events(tmp_path), what="scheduled")
        result = subprocess.run(
            [sys.executable, "-m", "se_forwarder", "approve", event_id, "--imds-url",
             sim.vm_url("vm0"), "--state-dir", str(tmp_path / "state-a")],
            cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0 and "recorded in" in result.stdout, result.stdout + result.stderr
        wait_for(lambda: (event_id, "approved") in events(tmp_path), what="the CLI's approval")
        sim.sim.delete_event(event_id)
        wait_for(lambda: ended(tmp_path, event_id), what="the end of the event")
    assert_inferred_run(tmp_path, event_id, "approved")
    assert events(tmp_path)[(event_id, "approved")]["data"]["ApprovedBy"] == "cli"
