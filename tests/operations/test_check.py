"""`se-forwarder check`: one line per part, ok or what is wrong and how to fix it."""

from __future__ import annotations

import socket

from tests.support.agent import AgentProcess
from tests.support.cli import cli
from tests.support.config import write_config
from tests.support.endpoint import HttpEndpoint
from tests.support.ports import free_port
from tests.support.waiting import wait_for

from .helpers import healthz


def test_everything_reachable_is_one_ok_line_each_and_exit_zero(simulator, tmp_path):
    port = free_port()
    with HttpEndpoint(200) as hook, HttpEndpoint(200) as collector:
        cfg = write_config(tmp_path / "c.toml",
                           sinks=[{"type": "file", "path": str(tmp_path / "o.jsonl")},
                                  {"type": "webhook", "url": f"{hook.url}/events"}],
                           imds={"url": simulator.url}, state={"dir": str(tmp_path / "state")},
                           telemetry={"prometheus_port": port, "otlp_endpoint": collector.url})
        result = cli("check", "--config", str(cfg))
        otlp_posts = collector.posts("/v1/metrics")
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == [
        "ok    config", "ok    state", "ok    imds", "ok    instance metadata", "ok    sink file",
        "ok    sink webhook", "ok    approval queue", "ok    prometheus", "ok    otlp"]
    assert f"127.0.0.1:{port} is free" in lines[7] and len(otlp_posts) == 1


def test_each_failure_is_named_with_a_fix_and_the_exit_is_non_zero(tmp_path):
    with socket.socket() as squatter, HttpEndpoint(410) as gone:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        cfg = write_config(tmp_path / "c.toml",
                           sinks=[{"type": "webhook", "url": f"{gone.url}/hook"}],
                           imds={"url": f"http://127.0.0.1:{free_port()}"},
                           state={"dir": str(tmp_path / "state")},
                           telemetry={"prometheus_port": taken,
                                      "otlp_endpoint": f"http://127.0.0.1:{free_port()}"})
        result = cli("check", "--config", str(cfg))
    assert result.returncode == 1
    failed = {ln.split(":")[0][6:]: ln for ln in result.stdout.splitlines() if ln.startswith("FAIL")}
    assert set(failed) == {"imds", "sink webhook", "prometheus", "otlp"}
    assert "is [imds] url / --imds-url right?" in failed["imds"]
    assert "410" in failed["sink webhook"]
    assert "choose another telemetry.prometheus_port" in failed["prometheus"]
    assert "Connection refused" in failed["otlp"] and "collector running" in failed["otlp"]


def test_a_running_agents_endpoint_is_reported_with_its_health(simulator, agents, tmp_path):
    port = free_port()
    cfg = write_config(tmp_path / "c.toml", sinks=[{"type": "file", "path": str(tmp_path / "o")}],
                       imds={"url": simulator.url, "poll_interval": 0.1},
                       state={"dir": str(tmp_path / "state")}, telemetry={"prometheus_port": port})
    agents.append(AgentProcess(["--config", str(cfg)]).start())
    wait_for(lambda: "incarnation" in healthz(port)[1], what="agent healthy")
    result = cli("check", "--config", str(cfg))
    assert result.returncode == 0, result.stdout
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("ok    prometheus")]
    assert f"a running agent serves http://127.0.0.1:{port}/metrics; /healthz: ok: last poll" in line


def test_an_unwritable_state_directory_fails_with_the_fix(simulator, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    cfg = write_config(tmp_path / "c.toml", sinks=[{"type": "stdout"}], imds={"url": simulator.url},
                       state={"dir": str(blocker)})
    result = cli("check", "--config", str(cfg))
    assert result.returncode == 1
    assert f"FAIL  state: {blocker} exists but is not a directory; set [state] dir to a directory" \
        in result.stdout.splitlines()
