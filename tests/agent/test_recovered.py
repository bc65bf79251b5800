"""``recovered``: after an event that took this VM down ended, the agent says when it is back.

The agent is a real subprocess polling the simulator over HTTP; its application is an HTTP server
(and a TCP port) on 127.0.0.1 whose answers the test sets; hooks are real commands.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from se_forwarder.timestamps import seconds
from tests.support.agent import AgentProcess, cloudevents, log_records
from tests.support.app_server import AppServer, TcpPort
from tests.support.cli import cli
from tests.support.config import write_config
from tests.support.waiting import wait_for


class Vm:
    """One agent's files and its configuration: the simulator as IMDS, a file sink with a
    heartbeat every second, [health] probes every second."""

    def __init__(self, tmp_path: Path, simulator: Any, probes: list[dict] | None = None,
                 hooks: dict | None = None, **health: Any) -> None:
        self.sink, self.log, self.state = tmp_path / "out.jsonl", tmp_path / "agent.log", tmp_path / "state"
        sections: dict[str, Any] = {
            "imds": {"url": simulator.url, "poll_interval": 0.1}, "state": {"dir": str(self.state)},
            "telemetry": {"log_format": "json", "log_level": "debug"},
        }
        if probes:
            sections["health"] = {"interval": 1, "timeout": 0.5, **health}
            sections["health.probes"] = probes
        if hooks:
            sections["approvals.hooks"] = hooks
        self.config = write_config(tmp_path / "agent.toml",
                                   [{"type": "file", "path": str(self.sink), "heartbeat_interval": 1}],
                                   **sections)

    def start(self, agents: list[AgentProcess]) -> AgentProcess:
        agent = AgentProcess(["--config", str(self.config)], log_path=self.log).start()
        agents.append(agent)
        return agent

    def events(self, kind: str) -> list[dict]:
        return cloudevents(self.sink, kind)

    def health(self) -> list[dict | None]:
        return [e["data"]["Health"] for e in self.events("heartbeat")]


def reboot(control: Any, vm: Vm, **fields: Any) -> str:
    """A Reboot of this VM that starts without notice and ends: its ``completed`` recorded."""
    event_id = control.add(EventType="Reboot", EventStatus="Started", NotBefore="", **fields)["EventId"]
    wait_for(lambda: vm.events("started"), what="the started transition")
    control.delete(event_id)
    wait_for(lambda: vm.events("completed"), what="the completed transition")
    return event_id


def test_recovered_comes_only_once_the_probe_passes_after_the_event_ended(simulator, control, agents,
                                                                          tmp_path):
    with AppServer() as app:
        app.status = 503
        vm = Vm(tmp_path, simulator, [{"type": "http", "name": "web", "url": app.url}],
                unhealthy_threshold=2)
        vm.start(agents)
        wait_for(lambda: any(h and h["Verdict"] == "unhealthy" for h in vm.health()), timeout=20,
                 what="a heartbeat saying the application is unhealthy")
        event_id = reboot(control, vm)
        time.sleep(3)  # three rounds of probes after the end, all failing
        assert vm.events("recovered") == []
        back = time.time()
        app.status = 200
        (recovered,) = wait_for(lambda: vm.events("recovered"), timeout=15, what="recovered")
    (completed,) = vm.events("completed")
    assert recovered["id"] == f"{event_id}/recovered" and recovered["subject"] == event_id
    assert recovered["type"] == "com.azure.scheduledevents.recovered"
    assert recovered["eventstatus"] == "Completed" and recovered["eventtype"] == "Reboot"
    assert seconds(recovered["time"]) >= back
    data = recovered["data"]
    assert data["EventId"] == event_id and data["AffectsThisVm"] is True
    assert data["CompletedUtc"][:19] == completed["time"][:19]
    assert data["RecoveredAfterSeconds"] >= 3
    assert data["Health"]["Verdict"] == "healthy" and data["Health"]["Probes"] == 1
    assert data["RecoverHook"] == "not-run"
    assert any(r["message"].startswith("recovered not yet: the application is unhealthy (probe web: "
                                       "HTTP 503") for r in log_records(vm.log))


def test_every_heartbeat_carries_the_verdict_and_a_change_is_sent_at_once(simulator, agents, tmp_path):
    with AppServer() as app, TcpPort() as db:
        check = [sys.executable, "-c", "import sys; sys.exit(0)"]
        vm = Vm(tmp_path, simulator, [{"type": "http", "name": "web", "url": app.url},
                                      {"type": "tcp", "name": "db", "address": db.address},
                                      {"type": "command", "name": "disk", "command": check}],
                unhealthy_threshold=1)
        vm.start(agents)
        wait_for(lambda: any(h and h["Verdict"] == "healthy" for h in vm.health()), timeout=20,
                 what="a heartbeat saying healthy")
        db.stop()
        down = time.time()
        sick = wait_for(lambda: [h for h in vm.health() if h and h["Verdict"] == "unhealthy"], timeout=10,
                        what="a heartbeat saying unhealthy")[0]
    assert sick["Probe"] == "db" and sick["Reason"].startswith(f"cannot connect to {db.address}")
    assert sick["Probes"] == 3 and seconds(sick["SinceUtc"]) >= down - 1
    beats = vm.events("heartbeat")
    assert all("Health" in b["data"] and b["data"]["Backlog"] is not None for b in beats)
    assert all(h is not None for h in vm.health())


def test_without_health_recovered_follows_completed_and_heartbeats_say_no_probes(simulator, control,
                                                                                 agents, tmp_path):
    vm = Vm(tmp_path, simulator)
    vm.start(agents)
    event_id = reboot(control, vm)
    (recovered,) = wait_for(lambda: vm.events("recovered"), timeout=10, what="recovered")
    assert recovered["id"] == f"{event_id}/recovered"
    assert recovered["data"]["Health"] is None and recovered["data"]["RecoverHook"] == "not-run"
    assert all(h is None for h in vm.health())


def write_hook(tmp_path: Path, code: int, record: Path) -> list[str]:
    script = tmp_path / "recover.py"
    script.write_text(f"import time\nopen({str(record)!r}, 'a').write(str(time.time()) + '\\n')\n"
                      f"time.sleep(1)\nraise SystemExit({code})\n")
    return [sys.executable, str(script)]


def test_recovered_waits_for_the_recover_hook_to_succeed(simulator, control, agents, tmp_path):
    record = tmp_path / "recover.log"
    vm = Vm(tmp_path, simulator, hooks={"recover": write_hook(tmp_path, 0, record)})
    vm.start(agents)
    reboot(control, vm)
    (recovered,) = wait_for(lambda: vm.events("recovered"), timeout=15, what="recovered")
    assert recovered["data"]["RecoverHook"] == "succeeded"
    assert seconds(recovered["time"]) >= float(record.read_text().split()[0]) + 1  # after it ended


def test_a_failed_recover_hook_means_no_recovered(simulator, control, agents, tmp_path):
    record = tmp_path / "recover.log"
    vm = Vm(tmp_path, simulator, hooks={"recover": write_hook(tmp_path, 4, record)})
    vm.start(agents)
    reboot(control, vm)
    wait_for(lambda: vm.events("recoverfailed"), timeout=15, what="recoverfailed")
    time.sleep(1.5)
    assert vm.events("recovered") == []
    assert any(r["message"] == "not reporting recovered: its recover hook failed; no recovered is "
               "reported for it" for r in log_records(vm.log))


def test_a_canceled_event_and_a_peers_event_bring_no_recovered(simulator, control, agents, tmp_path):
    vm = Vm(tmp_path, simulator)
    vm.start(agents)
    scheduled = control.add(EventType="Reboot", NotBeforeInSeconds=600)["EventId"]
    wait_for(lambda: vm.events("scheduled"), what="scheduled")
    control.delete(scheduled)
    wait_for(lambda: vm.events("canceled"), what="canceled")
    peer = control.add(EventType="Reboot", EventStatus="Started", NotBefore="", Resources=["vm7"])["EventId"]
    wait_for(lambda: vm.events("started"), what="the peer's event started")
    control.delete(peer)
    wait_for(lambda: vm.events("completed"), what="the peer's event completed")
    time.sleep(1.5)
    assert vm.events("recovered") == []


def test_a_pending_recovery_survives_sigkill_and_is_sent_once(simulator, control, agents, tmp_path):
    with AppServer() as app:
        app.status = 503
        vm = Vm(tmp_path, simulator, [{"type": "http", "name": "web", "url": app.url}])
        agent = vm.start(agents)
        event_id = reboot(control, vm)
        wait_for(lambda: any("recovered not yet" in r["message"] for r in log_records(vm.log)),
                 what="the recovery waiting for the probe")
        agent.kill()
        status = json.loads(cli("status", "--state-dir", str(vm.state), "--json").stdout)
        assert [p["EventId"] for p in status["pending_recoveries"]] == [event_id]
        assert status["health"]["Verdict"] in ("unknown", "unhealthy")
        shown = cli("status", "--state-dir", str(vm.state)).stdout.splitlines()
        assert any(line.startswith(f"recovered     not yet for {event_id} (completed ") for line in shown)
        assert any(line.startswith("health        ") and "(probe web: " in line for line in shown)
        app.status = 200
        agent = vm.start(agents)
        wait_for(lambda: vm.events("recovered"), timeout=15, what="recovered after the restart")
        assert agent.terminate() == 0
        vm.start(agents)
        wait_for(lambda: len(vm.events("heartbeat")) > 5 and seconds(vm.events("heartbeat")[-1]["time"])
                 > time.time() - 2, what="the third run's heartbeats")
    assert [e["id"] for e in vm.events("recovered")] == [f"{event_id}/recovered"]
    status = json.loads(cli("status", "--state-dir", str(vm.state), "--json").stdout)
    assert status["pending_recoveries"] == []
