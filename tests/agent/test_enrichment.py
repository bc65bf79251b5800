"""Forwarding never waits for the instance metadata: missing (404) or hanging, events go out at once
with the host name; enriched events follow once it answers; status, check, /healthz and a metric
say what is missing. The agent is a real subprocess, the simulator serves the instance modes."""

from __future__ import annotations

import json
import socket

import pytest

from se_forwarder.outbox import Outbox
from se_forwarder.simulator.wire import vm_id_for
from tests.operations.helpers import healthz, sample, scrape
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.cli import cli
from tests.support.config import write_config
from tests.support.ports import free_port
from tests.support.waiting import wait_for

HOST = socket.gethostname()


def start(simulator, tmp_path, agents, port=None, **imds):
    sections = {"imds": {"url": simulator.url, "poll_interval": 0.2, **imds},
                "state": {"dir": str(tmp_path / "state")}, "vm": {"tags": ["environment"]}}
    if port:
        sections["telemetry"] = {"prometheus_port": port}
    cfg = write_config(tmp_path / "agent.toml", [{"type": "file", "path": str(tmp_path / "o.jsonl")}],
                       **sections)
    agent = AgentProcess(["--config", str(cfg)], log_path=tmp_path / "agent.log").start()
    agents.append(agent)
    return cfg


def delivered(tmp_path, event_id, state="scheduled"):
    return [e for e in read_jsonl(tmp_path / "o.jsonl")
            if e["subject"] == event_id and e["type"].endswith("." + state)]


def add_and_deliver(simulator, tmp_path, **fields):
    event_id = simulator.sim.add_event({"EventType": "Reboot", **fields})["EventId"]
    (event,) = wait_for(lambda: delivered(tmp_path, event_id), timeout=10, what="delivery")
    return event


def instance_requests_answered(simulator):
    """Instance requests that have returned (the simulator logs a request when it ends)."""
    return [r for r in simulator.sim.requests() if r["route"] == "compute"]


def assert_host_name_only(event):
    vm = event["data"]["Vm"]
    assert event["source"] == f"/virtualMachines/{HOST}"
    assert event["vmid"] == ""
    assert vm["name"] == HOST and vm["complete"] is False
    assert all(vm[k] == "" for k in vm if k not in ("name", "complete", "tags")) and vm["tags"] == {}


def assert_enriched(event):
    vm = event["data"]["Vm"]
    assert event["source"].endswith("/providers/Microsoft.Compute/virtualMachines/vm0")
    assert event["vmid"] == vm["vmId"] == vm_id_for("vm0")
    assert vm["complete"] is True and vm["name"] == "vm0"
    assert (vm["platformFaultDomain"], vm["platformUpdateDomain"], vm["placementGroupId"]) == (
        "0", "0", "")
    assert vm["tags"] == {"environment": "simulator"}  # only the tag named in [vm] tags


@pytest.mark.parametrize("mode", ["missing", "hang"])
def test_events_go_out_at_once_without_instance_metadata_and_enriched_ones_follow(
        simulator, agents, tmp_path, mode):
    simulator.instance_endpoint = mode
    # Hanging, the agent's instance request stays open (its timeout is long) until the endpoint
    # is set back to ok, which answers it.
    start(simulator, tmp_path, agents, timeout=1 if mode == "missing" else 60)
    wait_for(lambda: any(r["route"] == "scheduledevents" for r in simulator.sim.requests()),
             what="the agent polling")
    if mode == "hang":
        wait_for(lambda: simulator.holding() == 1, what="an instance request held by the hang")
    answered = len(instance_requests_answered(simulator))
    first = add_and_deliver(simulator, tmp_path, Resources=[HOST, "vm9"])
    if mode == "hang":  # the event is out before the hanging instance request has returned
        assert simulator.holding() == 1
        assert len(instance_requests_answered(simulator)) == answered
    assert_host_name_only(first)
    assert first["data"]["AffectsThisVm"] is True  # compared with the host name meanwhile
    other = add_and_deliver(simulator, tmp_path, Resources=["vm0"])
    assert other["data"]["AffectsThisVm"] is False
    simulator.instance_endpoint = "ok"
    wait_for(lambda: "events recorded from now on carry its identity"
             in (tmp_path / "agent.log").read_text(), timeout=25, what="enrichment")
    later = add_and_deliver(simulator, tmp_path, Resources=["vm0"])
    assert_enriched(later)
    assert later["data"]["AffectsThisVm"] is True
    log = (tmp_path / "agent.log").read_text()
    assert f"with the host name {HOST!r} as the VM name" in log and "Traceback" not in log


def test_status_check_healthz_and_a_metric_say_enrichment_is_missing(simulator, agents, tmp_path):
    simulator.instance_endpoint = "missing"
    port = free_port()
    cfg = start(simulator, tmp_path, agents, port=port)
    wait_for(lambda: "incarnation" in healthz(port)[1], what="the agent polling")
    code, line = healthz(port)
    assert code == 200 and "warning: instance metadata not read yet" in line
    assert sample(scrape(port), "se_forwarder_enrichment_complete") == 0
    status = cli("status", "--state-dir", str(tmp_path / "state"))
    assert status.returncode == 0
    assert "WARNING the instance metadata has not answered yet" in status.stdout
    as_json = json.loads(cli("status", "--state-dir", str(tmp_path / "state"), "--json").stdout)
    assert as_json["enrichment_complete"] is False
    check = cli("check", "--config", str(cfg))
    assert check.returncode == 0, check.stdout  # a warning, never a failure
    (warn,) = [ln for ln in check.stdout.splitlines() if ln.startswith("warn  instance metadata")]
    assert "404" in warn and f"host name {HOST!r}" in warn
    simulator.instance_endpoint = "ok"
    wait_for(lambda: sample(scrape(port), "se_forwarder_enrichment_complete") == 1, timeout=25,
             what="the metric to say complete")
    assert "warning" not in healthz(port)[1]
    wait_for(lambda: "(vmId " in cli("status", "--state-dir", str(tmp_path / "state")).stdout,
             what="status to show the identity")


def test_a_restart_uses_the_identity_this_machine_stored_not_one_copied_from_elsewhere(
        simulator, agents, tmp_path):
    start(simulator, tmp_path, agents)
    agent = agents[-1]
    wait_for(lambda: "carry its identity" in (tmp_path / "agent.log").read_text(), what="enrichment")
    assert agent.terminate() == 0
    simulator.instance_endpoint = "missing"
    agents.append(AgentProcess(["--config", str(tmp_path / "agent.toml")],
                               log_path=tmp_path / "agent.log").start())
    restored = add_and_deliver(simulator, tmp_path, Resources=["vm0"])
    assert_enriched(restored)
    assert agents[-1].terminate() == 0
    # The same state directory found on another machine (an image, a copied disk): not trusted.
    with Outbox(tmp_path / "state") as box:
        stored = json.loads(box.get_meta("vm_compute"))
        box.set_meta({"vm_compute": {**stored, "host": "some-other-vm"}})
    agents.append(AgentProcess(["--config", str(tmp_path / "agent.toml")],
                               log_path=tmp_path / "agent.log").start())
    elsewhere = add_and_deliver(simulator, tmp_path, Resources=["vm0"])
    assert_host_name_only(elsewhere)
