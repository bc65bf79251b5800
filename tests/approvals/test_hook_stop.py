"""A stopping agent gives running hooks their grace: SIGTERM to the group, wait, then SIGKILL."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil

from tests.support.agent import AgentProcess, cloudevents, log_records
from tests.support.config import write_agent_config
from tests.support.waiting import wait_for

HOOK = r'''
import os, signal, subprocess, sys, time
trace, cleanup, obey = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "obey"

def note(text):
    with open(trace, "a") as fh:
        fh.write(f"{text} {time.time()}\n")

def on_term(*_):
    note("TERM")
    time.sleep(cleanup)  # e.g. uncordon what was half drained
    note("cleaned")
    sys.exit(0)

signal.signal(signal.SIGTERM, on_term if obey else signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
                          "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "time.sleep(120)"])
note(f"started {os.getpid()} {child.pid}")
while True:
    time.sleep(0.05)
'''


def trace(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def start(tmp_path: Path, simulator, agents, *, cleanup: float, obey: bool, grace: float):
    script = tmp_path / "hook.py"
    script.write_text(HOOK)
    hooks = {"prepare": [sys.executable, str(script), str(tmp_path / "trace"), str(cleanup),
                         "obey" if obey else "ignore"],
             "stop_grace": grace, "prepare_timeout": 600}
    cfg = write_agent_config(tmp_path / "agent.toml", imds_url=simulator.url, state_dir=tmp_path / "state",
                       sink_path=tmp_path / "out.jsonl", hooks=hooks)
    agent = AgentProcess(["--config", str(cfg)], log_path=tmp_path / "agent.log").start()
    agents.append(agent)
    return agent, cfg


def test_stop_sends_term_and_waits_for_the_hook_to_clean_up(simulator, control, agents, tmp_path):
    agent, cfg = start(tmp_path, simulator, agents, cleanup=1.5, obey=True, grace=10)
    event_id = control.add(EventType="Reboot")["EventId"]
    ((_, pid, child, _),) = wait_for(lambda: trace(tmp_path / "trace"), timeout=15,
                                     what="the hook to start")
    stopped_at = time.time()
    assert agent.terminate(timeout=15) == 0
    exited_at = time.time()
    steps = {line[0]: float(line[-1]) for line in trace(tmp_path / "trace")}
    assert steps["TERM"] - stopped_at < 1.0  # SIGTERM at once
    assert steps["cleaned"] >= steps["TERM"] + 1.5 - 0.05  # its cleanup was waited for ...
    assert steps["cleaned"] <= exited_at < stopped_at + 1.5 + 5.0  # ... and no longer than needed
    assert gone(int(pid)) and gone(int(child))  # its group is gone with it (the child ignored TERM)
    # The run was cut short: reported at the next start, never run again, never approves.
    agents.append(AgentProcess(["--config", str(cfg)], log_path=tmp_path / "agent.log").start())
    (audit,) = wait_for(lambda: cloudevents(tmp_path / "out.jsonl", "preparefailed"), timeout=15,
                        what="the interrupted run's audit event")
    assert audit["subject"] == event_id and audit["data"]["Reason"].startswith("interrupted:")
    time.sleep(1.0)
    assert len([s for s in trace(tmp_path / "trace") if s[0] == "started"]) == 1
    assert control.approvals() == []


def test_a_hook_ignoring_term_is_killed_when_its_grace_ends(simulator, control, agents, tmp_path):
    agent, _ = start(tmp_path, simulator, agents, cleanup=0, obey=False, grace=2)
    control.add(EventType="Reboot")
    ((_, pid, child, _),) = wait_for(lambda: trace(tmp_path / "trace"), timeout=15,
                                     what="the hook to start")
    stopped_at = time.monotonic()
    assert agent.terminate(timeout=15) == 0
    took = time.monotonic() - stopped_at
    assert 2.0 - 0.1 <= took < 2.0 + 4.0
    assert gone(int(pid)) and gone(int(child))
    assert any(r["message"].startswith(f"hook processes {pid} did not exit within the 2 s stop "
                                       "grace; killed") for r in log_records(tmp_path / "agent.log"))


def test_stop_without_running_hooks_stays_quick(simulator, control, agents, tmp_path):
    agent, _ = start(tmp_path, simulator, agents, cleanup=0, obey=True, grace=10)
    wait_for(lambda: any(r["message"].startswith("this VM is")
                         for r in log_records(tmp_path / "agent.log")), what="the agent to start")
    stopped_at = time.monotonic()
    assert agent.terminate(timeout=10) == 0
    assert time.monotonic() - stopped_at < 5.0
