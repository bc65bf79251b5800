"""`se-forwarder status`: read from the state directory next to a running agent."""

from __future__ import annotations

import json
import time

import pytest

from se_forwarder.simulator import SimulatorServer
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.cli import cli
from tests.support.config import write_config
from tests.support.endpoint import HttpEndpoint
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """An agent with a file sink and a webhook answering 410 Gone, a Reboot due in 15 minutes and a
    short Freeze the default policy approves."""
    tmp = tmp_path_factory.mktemp("status")
    with SimulatorServer() as sim, HttpEndpoint(410) as gone:
        cfg = write_config(tmp / "agent.toml",
                           sinks=[{"type": "file", "path": str(tmp / "out.jsonl")},
                                  {"type": "webhook", "url": f"{gone.url}/hook"}],
                           imds={"url": sim.url, "poll_interval": 0.1, "max_backoff": 0.5},
                           state={"dir": str(tmp / "state")})
        agent = AgentProcess(["--config", str(cfg)], log_path=tmp / "agent.log").start()
        try:
            reboot = sim.sim.add_event({"EventType": "Reboot", "NotBeforeInSeconds": 900})["EventId"]
            freeze = sim.sim.add_event({"EventType": "Freeze", "DurationInSeconds": 5})["EventId"]
            wait_for(lambda: {e["type"] for e in read_jsonl(tmp / "out.jsonl")} >= {
                "com.azure.scheduledevents.approved"}, what="the Freeze approved")
            wait_for(lambda: "SINK PARKED" in (tmp / "agent.log").read_text(), what="webhook parked")
            yield {"cfg": str(cfg), "reboot": reboot, "freeze": freeze, "sim": sim, "tmp": tmp,
                   "webhook": f"webhook:{gone.url}/hook", "agent": agent}
        finally:
            agent.kill()


def status(scene, *extra):
    result = cli("status", "--config", scene["cfg"], *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if "--json" in extra else result.stdout


def test_shows_each_pending_event_with_the_time_left_to_not_before(scene):
    info = status(scene, "--json")
    pending = {e["EventId"]: e for e in info["pending_events"]}
    assert 850 < pending[scene["reboot"]]["NotBeforeInSeconds"] <= 900
    assert pending[scene["reboot"]]["approved"] is False
    row = next(line for line in status(scene).splitlines() if scene["reboot"] in line)
    assert "Reboot" in row and "Scheduled" in row and "in 14 min" in row


def test_shows_a_parked_sink_with_its_backlog_reason_and_how_to_resume(scene):
    sink = next(s for s in status(scene, "--json")["sinks"] if s["name"] == scene["webhook"])
    assert sink["parked"].startswith("HTTP 410 Gone") and sink["backlog"] >= 2 and sink["delivered"] == 0
    row = next(line for line in status(scene).splitlines() if line.startswith(scene["webhook"]))
    assert "PARKED" in row and f"se-forwarder sink resume {scene['webhook']}" in row


def test_lists_the_last_approvals_with_who_approved(scene):
    (approval,) = status(scene, "--json")["last_approvals"]
    assert (approval["EventId"], approval["outcome"], approval["ApprovedBy"]) == (
        scene["freeze"], "approved", "policy:sample-freeze")
    assert f"{scene['freeze']}  by policy:sample-freeze" in status(scene)


def test_shows_the_last_poll_and_when_it_last_succeeded_when_imds_fails(scene):
    scene["sim"].sim.add_fault({"status": 500, "count": 1000})
    try:
        info = wait_for(lambda: (i := status(scene, "--json"))["last_poll"]["ok"] is False and i,
                        timeout=20, what="a failed poll recorded")
        line = next(ln for ln in status(scene).splitlines() if ln.startswith("last poll"))
    finally:
        scene["sim"].sim.clear_faults()
    assert info["last_poll"]["result"].startswith("server: IMDS answered 500")
    assert info["last_poll"]["last_ok_age_seconds"] is not None
    assert "FAILED (last success" in line and "IMDS answered 500" in line


def test_running_it_repeatedly_does_not_disturb_the_agent(scene):
    sim, out = scene["sim"], scene["tmp"] / "out.jsonl"
    before = len(read_jsonl(out))
    ids = [sim.sim.add_event({"EventType": "Redeploy"})["EventId"] for _ in range(3)]
    began = time.monotonic()
    while time.monotonic() - began < 3:
        status(scene, "--json")
    wait_for(lambda: {e["subject"] for e in read_jsonl(out)[before:]} >= set(ids), what="deliveries")
    log = (scene["tmp"] / "agent.log").read_text()
    assert "locked" not in log and '"level": "error"' not in log
