"""What a hook may see (an allow-listed environment) and how much of what it says is kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from se_forwarder import config
from se_forwarder.approvals import hook_process
from se_forwarder.errors import ConfigError
from tests.support.agent import AgentProcess, cloudevents, log_records
from tests.support.config import write_agent_config
from tests.support.paths import ROOT
from tests.support.waiting import wait_for

DUMP_ENV = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
CHATTY = ("import sys\nfor i in range(40000): print('line', i, 'x' * 40)\n"
          "print('the last word'); sys.exit(1)")


def start(tmp_path: Path, simulator, agents, hooks: dict, env: dict[str, str]) -> Path:
    sink = tmp_path / "out.jsonl"
    cfg = write_agent_config(tmp_path / "agent.toml", imds_url=simulator.url, state_dir=tmp_path / "state",
                       sink_path=sink, hooks=hooks)
    agent = AgentProcess(["--config", str(cfg)], env=env, log_path=tmp_path / "agent.log").start()
    agents.append(agent)
    return sink


def test_hooks_get_an_allow_listed_environment_without_the_agents_secrets(simulator, control,
                                                                         agents, tmp_path):
    seen = tmp_path / "env.json"
    start(tmp_path, simulator, agents,
          hooks={"prepare": [sys.executable, "-c", DUMP_ENV, str(seen)],
                 "env": ["KUBECONFIG"], "approve_after_prepare": False},
          env={"AZURE_CLIENT_SECRET": "s3cr3t-client-secret-value",
               "DATABASE_PASSWORD": "hunter2-but-longer", "KUBECONFIG": "/etc/se-forwarder/kube",
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "SE_SITE": "west"})
    event_id = control.add(EventType="Reboot")["EventId"]
    env = json.loads(wait_for(lambda: seen.exists() and seen.read_text(), timeout=15,
                              what="the prepare hook"))
    assert "AZURE_CLIENT_SECRET" not in env and "DATABASE_PASSWORD" not in env
    assert "s3cr3t-client-secret-value" not in json.dumps(env)
    assert env["KUBECONFIG"] == "/etc/se-forwarder/kube"  # listed in hooks.env
    assert env["LANG"] == env["LC_ALL"] == "C.UTF-8" and env["TZ"] == "UTC" and env["PATH"]
    assert env["SE_SITE"] == "west" and env["SE_EVENT_ID"] == event_id
    assert set(env) <= {"PATH", "LANG", "TZ", "KUBECONFIG"} | {
        k for k in env if k.startswith(("LC_", "SE_"))}


def test_hook_output_is_capped_and_the_drop_is_said(simulator, control, agents, tmp_path):
    sink = start(tmp_path, simulator, agents,
                 hooks={"prepare": [sys.executable, "-c", CHATTY]}, env={})
    control.add(EventType="Reboot")
    (audit,) = wait_for(lambda: cloudevents(sink, "preparefailed"), timeout=20,
                        what="the preparefailed event")
    total = sum(len(f"line {i} {'x' * 40}\n") for i in range(40000)) + len("the last word\n")
    dropped = total - hook_process.SPOOL_BYTES
    assert audit["data"]["Reason"] == (
        f"failed: exit code 1; {dropped} bytes of output dropped (only the last "
        f"{hook_process.SPOOL_BYTES} bytes are kept)")
    messages = [r["message"] for r in log_records(tmp_path / "agent.log")]
    assert f"prepare hook: output over {hook_process.SPOOL_BYTES} bytes; the first {dropped} bytes " \
           "were dropped" in messages
    assert messages.count("prepare hook: the last word") == 1  # the end of the output is kept
    assert sum(m.startswith("prepare hook: line ") for m in messages) <= 50


@pytest.mark.parametrize(("hooks", "message"), [
    ({"env": "HOME"}, 'approvals.hooks.env: must be a list of environment variable names, '
                      'e.g. ["HOME", "KUBECONFIG"]'),
    ({"env": ["HOME=/root"]}, "approvals.hooks.env: 'HOME=/root' is not an environment variable "
                              "name (letters, digits and _, not starting with a digit; no =VALUE)"),
    ({"env": ["9LIVES"]}, "approvals.hooks.env: '9LIVES' is not an environment variable name "
                          "(letters, digits and _, not starting with a digit; no =VALUE)"),
    ({"stop_grace": -1}, "approvals.hooks.stop_grace: must be a number of seconds from 0 to 3600 "
                         "(keep it below the unit's TimeoutStopSec)"),
])
def test_bad_hook_settings_are_refused_with_one_line(hooks, message):
    with pytest.raises(ConfigError) as info:
        config.from_dict({"approvals": {"hooks": {"prepare": ["true"], **hooks}}})
    assert str(info.value) == message


def test_agent_with_a_bad_hooks_env_exits_2_with_that_line(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text('[approvals.hooks]\nprepare = ["true"]\nenv = ["A-B"]\n')
    result = subprocess.run([sys.executable, "-m", "se_forwarder", "run", "--config", str(cfg)],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "se-forwarder: error: approvals.hooks.env: 'A-B' is not an environment variable name "
        "(letters, digits and _, not starting with a digit; no =VALUE)"]
