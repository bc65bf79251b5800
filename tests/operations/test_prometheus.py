"""The Prometheus endpoint: /metrics counts what really happened, /healthz says when to worry."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
from collections import Counter

import psutil
import pytest

from se_forwarder import config, metrics
from se_forwarder.agent import Agent
from se_forwarder.health.settings import HealthSettings, ProbeSettings
from se_forwarder.outbox import Outbox
from tests.support.agent import AgentProcess, read_jsonl
from tests.support.app_server import AppServer
from tests.support.cli import cli
from tests.support.config import write_config
from tests.support.endpoint import HttpEndpoint
from tests.support.ports import free_port
from tests.support.waiting import wait_for

from .helpers import healthz, sample, scrape


def agent_config(tmp_path, simulator, port, sinks, **imds):
    return write_config(
        tmp_path / "agent.toml", sinks=sinks,
        imds={"url": simulator.url, "poll_interval": 0.1, **imds},
        state={"dir": str(tmp_path / "state")},
        telemetry={"prometheus_port": port},
    )


def backlog(tmp_path, sink):
    with Outbox(tmp_path / "state", readonly=True) as box:
        return box.sink_status(sink).backlog


@pytest.fixture
def in_process_agent():
    """Run an Agent on a thread of the test process (settings changed after loading them)."""
    started = []

    def run(settings):
        agent = Agent(settings)
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        started.append((agent, thread))
        return agent

    yield run
    for agent, thread in started:
        agent.stop.set()
        thread.join(6)


def test_counters_match_what_the_sinks_received(simulator, control, agents, tmp_path):
    port = free_port()
    out = tmp_path / "out.jsonl"
    with HttpEndpoint(200) as hook:
        file_sink, hook_sink = f"file:{out}", f"webhook:{hook.url}/events"
        cfg = agent_config(tmp_path, simulator, port,
                           [{"type": "file", "path": str(out)},
                            {"type": "webhook", "url": f"{hook.url}/events"}])
        agents.append(AgentProcess(["--config", str(cfg)], log_path=tmp_path / "agent.log").start())
        a = control.add(EventType="Reboot")["EventId"]
        wait_for(lambda: len(read_jsonl(out)) == 1, what="scheduled")
        control.patch(a, EventStatus="Started")
        wait_for(lambda: len(read_jsonl(out)) == 2, what="started")
        control.delete(a)
        b = control.add(EventType="Redeploy")["EventId"]
        wait_for(lambda: len(read_jsonl(out)) == 5, what="completed, recovered, scheduled")
        control.delete(b)
        wait_for(lambda: len(read_jsonl(out)) == 6 and len(hook.posts("/events")) == 6,
                 what="all six at both sinks")
        wait_for(lambda: backlog(tmp_path, file_sink) == 0 and backlog(tmp_path, hook_sink) == 0,
                 what="both cursors at the end")
        m = scrape(port)
        delivered = read_jsonl(out)
        by_type = Counter(e["type"].rsplit(".", 1)[1] for e in delivered)
        assert by_type == {"scheduled": 2, "started": 1, "completed": 1, "recovered": 1, "canceled": 1}
        for kind in ("scheduled", "started", "completed", "recovered", "canceled"):
            assert sample(m, "se_forwarder_transitions_total", type=kind) == by_type[kind]
        assert sample(m, "se_forwarder_deliveries_total", sink=file_sink, outcome="delivered") == 6
        assert sample(m, "se_forwarder_deliveries_total", sink=hook_sink,
                      outcome="delivered") == len(hook.posts("/events"))
        assert sample(m, "se_forwarder_delivery_latency_seconds_count", sink=file_sink) == 6
        assert sample(m, "se_forwarder_dead_letters_total", sink=hook_sink) == 0
        assert sample(m, "se_forwarder_outbox_backlog", sink=file_sink) == 0
        assert sample(m, "se_forwarder_outbox_oldest_age_seconds", sink=hook_sink) == 0
        assert sample(m, "se_forwarder_sink_parked", sink=hook_sink) == 0
        assert sample(m, "se_forwarder_imds_incarnation") == control.document()["DocumentIncarnation"]
        polls = sample(m, "se_forwarder_imds_polls_total")
        assert polls >= 4  # at least one poll per document seen
        assert sample(m, "se_forwarder_imds_request_duration_seconds_count", outcome="ok") == polls


def test_poll_errors_are_counted_by_reason(simulator, tmp_path, in_process_agent):
    port = free_port()
    settings = config.load(agent_config(tmp_path, simulator, port,
                                        [{"type": "file", "path": str(tmp_path / "o.jsonl")}],
                                        max_backoff=0.2, timeout=0.3))
    in_process_agent(settings)
    wait_for(lambda: healthz(port)[0] == 200 and "incarnation" in healthz(port)[1], what="first poll")
    for fault in ({"status": 429, "count": 2}, {"status": 503, "count": 3},
                  {"body": "not json", "count": 2}, {"delay_seconds": 1.0, "count": 1}):
        simulator.sim.add_fault(fault)
    expected = {"429": 2, "5xx": 3, "malformed": 2, "timeout": 1}

    def counted():
        m = scrape(port)
        return {r: sample(m, "se_forwarder_imds_poll_errors_total", reason=r) for r in expected}

    wait_for(lambda: counted() == expected, timeout=15, what=f"poll errors {expected}")
    assert sample(scrape(port), "se_forwarder_imds_poll_errors_total", reason="connection") == 0


def test_healthz_is_503_while_imds_fails_longer_than_the_threshold(simulator, tmp_path,
                                                                  in_process_agent):
    port = free_port()
    settings = config.load(agent_config(tmp_path, simulator, port,
                                        [{"type": "file", "path": str(tmp_path / "o.jsonl")}],
                                        max_backoff=0.2))
    settings.telemetry.unhealthy_after = 1.0  # telemetry.unhealthy_after (seconds)
    in_process_agent(settings)
    wait_for(lambda: healthz(port)[0] == 200 and "incarnation" in healthz(port)[1],
             what="healthy after the first poll")
    simulator.sim.add_fault({"status": 500, "count": 20})
    status, line = wait_for(lambda: (h := healthz(port))[0] == 503 and h, timeout=10,
                            what="/healthz 503")
    assert "IMDS" in line and "last error: 5xx" in line
    wait_for(lambda: healthz(port)[0] == 200, timeout=15, what="healthy again once IMDS answers")


def test_healthz_is_503_while_a_sink_is_parked(simulator, control, agents, tmp_path):
    port = free_port()
    with HttpEndpoint(410) as gone:
        cfg = agent_config(tmp_path, simulator, port,
                           [{"type": "webhook", "url": f"{gone.url}/hook"}])
        agents.append(AgentProcess(["--config", str(cfg)], log_path=tmp_path / "agent.log").start())
        wait_for(lambda: healthz(port)[0] == 200, what="healthy at start")
        control.add(EventType="Reboot")
        status, line = wait_for(lambda: (h := healthz(port))[0] == 503 and h, what="/healthz 503")
        sink = f"webhook:{gone.url}/hook"
        assert f"sink {sink} is parked" in line and f"se-forwarder sink resume {sink}" in line
        m = scrape(port)
        assert sample(m, "se_forwarder_sink_parked", sink=sink) == 1
        assert sample(m, "se_forwarder_deliveries_total", sink=sink, outcome="parked") == 1
        assert sample(m, "se_forwarder_outbox_backlog", sink=sink) == 1


def test_endpoint_listens_on_loopback_only_by_default(simulator, agents, tmp_path):
    port = free_port()
    cfg = agent_config(tmp_path, simulator, port, [{"type": "file", "path": str(tmp_path / "o")}])
    agent = AgentProcess(["--config", str(cfg)]).start()
    agents.append(agent)
    wait_for(lambda: healthz(port)[0] == 200, what="endpoint up")
    listening = [c.laddr for c in psutil.Process(agent.proc.pid).net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN]
    assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", port)]


def test_port_in_use_stops_the_agent_with_one_line(simulator, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = agent_config(tmp_path, simulator, port, [{"type": "file", "path": str(tmp_path / "o")}])
        result = cli("run", "--config", str(cfg))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"se-forwarder: error: telemetry.prometheus_port: cannot listen on 127.0.0.1:{port}: "
        "Address already in use (is another agent or exporter using it? choose another port)"]


def test_no_exporter_means_the_sdk_is_never_imported(simulator, control, tmp_path):
    control.add(EventType="Reboot")
    script = textwrap.dedent(f"""
        import os, sys, threading, time
        from se_forwarder import config
        from se_forwarder.agent import Agent
        settings = config.from_dict({{
            "imds": {{"url": {simulator.url!r}, "poll_interval": 0.1}},
            "state": {{"dir": {str(tmp_path / "state")!r}}},
            "sinks": [{{"type": "file", "path": {str(tmp_path / "o.jsonl")!r}}}]}})
        agent = Agent(settings)
        thread = threading.Thread(target=agent.run)
        thread.start()
        deadline = time.monotonic() + 15
        out = {str(tmp_path / "o.jsonl")!r}
        while time.monotonic() < deadline and not (os.path.exists(out) and os.path.getsize(out)):
            time.sleep(0.1)
        agent.stop.set()
        thread.join(6)
        print(sorted(m for m in sys.modules if m.startswith(("opentelemetry", "prometheus_client"))))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert read_jsonl(tmp_path / "o.jsonl"), "the agent delivered nothing"
    assert result.stdout.strip() == "[]"


def test_every_documented_metric_is_served_with_its_documented_labels(simulator, control, tmp_path,
                                                                      in_process_agent):
    port = free_port()
    out = tmp_path / "o.jsonl"
    settings = config.load(agent_config(tmp_path, simulator, port, [{"type": "file", "path": str(out)}]))
    app = AppServer().start()
    settings.health = HealthSettings((ProbeSettings("http", "web", 0.5, url=app.url),), interval=1,
                                     timeout=0.5)
    in_process_agent(settings)
    control.add(EventType="Reboot")
    wait_for(lambda: read_jsonl(out), what="a delivery")
    wait_for(lambda: sample(scrape(port), "se_forwarder_health_probes_total", probe="web",
                            outcome="pass"), what="a [health] probe counted")
    app.stop()
    # what the approver and the hooks report (wired there): origins and outcomes outside the
    # documented sets collapse into "other", so no caller can grow the series count
    metrics.approval("coordinator:fleet-7f3a", "approved")
    metrics.approval("policy:sample-freeze", "something-new")
    metrics.hook_run("prepare", "ok")
    served = {}
    for (name, labels) in scrape(port):
        served.setdefault(name, set()).update(k for k, _ in labels)
    for m in metrics.METRICS:
        family = m.prometheus_name + ("_count" if m.kind == "histogram" else "")
        assert served.get(family, set()) - {"le"} == set(m.labels), m.name
    m = scrape(port)
    assert sample(m, "se_forwarder_health_verdict", verdict="healthy") == 1
    assert sample(m, "se_forwarder_health_verdict", verdict="unhealthy") == 0
    assert sample(m, "se_forwarder_approvals_total", origin="coordinator", outcome="approved") == 1
    assert sample(m, "se_forwarder_approvals_total", origin="policy", outcome="other") == 1
