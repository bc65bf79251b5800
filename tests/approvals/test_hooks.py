"""Prepare and recover hooks, with the agent as a real subprocess and real hook commands."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil

from tests.support.agent import AgentProcess, cloudevents, log_records, read_jsonl
from tests.support.config import write_agent_config
from tests.support.waiting import wait_for

HOOK = r'''
import json, os, subprocess, sys, time
record_path, sleep_s, code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
child = None
if len(sys.argv) > 4:  # leave a grandchild behind, to see that a timeout kills it too
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]).pid
record = {"stdin": json.load(sys.stdin), "pid": os.getpid(), "child": child, "at": time.time(),
          "env": {k: v for k, v in os.environ.items() if k.startswith("SE_")}}
with open(record_path, "a") as fh:
    fh.write(json.dumps(record) + "\n")
print("hook output line for", os.environ["SE_EVENT_ID"], flush=True)
time.sleep(sleep_s)
sys.exit(code)
'''


def hook(tmp_path: Path, name: str, sleep: float = 0.0, code: int = 0, child: bool = False):
    script = tmp_path / "hook.py"
    script.write_text(HOOK)
    command = [sys.executable, str(script), str(tmp_path / f"{name}.jsonl"), str(sleep), str(code)]
    return command + (["child"] if child else [])


def runs(tmp_path: Path, name: str) -> list[dict]:
    return read_jsonl(tmp_path / f"{name}.jsonl")


class Env:
    """One agent's files: config, state, sink, log."""

    def __init__(self, tmp_path: Path, simulator, **approvals) -> None:
        self.tmp = tmp_path
        self.sink = tmp_path / "out.jsonl"
        self.log = tmp_path / "agent.log"
        self.config = write_agent_config(tmp_path / "agent.toml", imds_url=simulator.url,
                                   state_dir=tmp_path / "state", sink_path=self.sink, **approvals)

    def start(self, agents: list[AgentProcess]) -> AgentProcess:
        agent = AgentProcess(["--config", str(self.config)], log_path=self.log).start()
        agents.append(agent)
        return agent


REBOOTS_AFTER_PREPARE = [{"name": "drain-first", "action": "prepare-then-approve",
                          "when": {"type": "Reboot"}}]


def test_successful_prepare_leads_to_an_approval_by_hook(simulator, control, agents, tmp_path):
    env = Env(tmp_path, simulator, rules=REBOOTS_AFTER_PREPARE,
              hooks={"prepare": hook(tmp_path, "prepare", sleep=0.3)})
    env.start(agents)
    event_id = control.add(EventType="Reboot")["EventId"]
    wait_for(lambda: control.approvals(), timeout=15, what="the approval after prepare")
    (run,) = runs(tmp_path, "prepare")
    post = control.approvals()[0]
    assert post["EventId"] == event_id
    assert run["at"] + 0.3 <= time.time()  # the hook had finished before we looked
    assert run["stdin"]["EventId"] == event_id and run["stdin"]["EventType"] == "Reboot"
    assert run["stdin"]["Vm"]["name"] == "vm0" and run["stdin"]["AffectsThisVm"] is True
    assert run["env"]["SE_HOOK"] == "prepare"
    assert run["env"]["SE_EVENT_ID"] == event_id
    assert run["env"]["SE_EVENT_TYPE"] == "Reboot"
    assert run["env"]["SE_EVENT_STATUS"] == "Scheduled"
    assert run["env"]["SE_NOT_BEFORE"] == run["stdin"]["NotBeforeUtc"] != ""
    approved = wait_for(lambda: cloudevents(env.sink, "approved"), what="the approved CloudEvent")
    assert approved[0]["data"]["ApprovedBy"] == "hook"
    assert any("hook output line for " + event_id in r["message"] for r in log_records(env.log))


def test_hooks_never_see_a_sink_secret_of_the_agent(simulator, control, agents, tmp_path):
    env = Env(tmp_path, simulator, rules=REBOOTS_AFTER_PREPARE,
              hooks={"prepare": hook(tmp_path, "prepare")})
    with open(env.config, "a") as fh:  # a second sink whose signing secret lives in the env
        fh.write('[[sinks]]\ntype = "webhook"\nurl = "http://127.0.0.1:9/hook"\n'
                 'secret_env = "SE_TEST_HOOK_SECRET"\n')
    agent = AgentProcess(["--config", str(env.config)], log_path=env.log,
                         env={"SE_TEST_HOOK_SECRET": "whsec_" + "A" * 43 + "="}).start()
    agents.append(agent)
    control.add(EventType="Reboot")
    wait_for(lambda: runs(tmp_path, "prepare"), timeout=15, what="the prepare hook")
    (run,) = runs(tmp_path, "prepare")
    assert "SE_EVENT_ID" in run["env"]
    assert "SE_TEST_HOOK_SECRET" not in run["env"]


def test_approve_after_prepare_applies_to_events_no_rule_matched(simulator, control, agents,
                                                                 tmp_path):
    env = Env(tmp_path, simulator, hooks={"prepare": hook(tmp_path, "prepare")})
    env.start(agents)
    event_id = control.add(EventType="Redeploy")["EventId"]  # the sample rules would wait
    wait_for(lambda: control.approvals(), timeout=15, what="the approval after prepare")
    assert [a["EventId"] for a in control.approvals()] == [event_id]
    approved = wait_for(lambda: cloudevents(env.sink, "approved"), what="the approved CloudEvent")
    assert approved[0]["data"]["ApprovedBy"] == "hook"


def test_failed_prepare_never_approves_and_emits_an_audit_event(simulator, control, agents,
                                                                tmp_path):
    env = Env(tmp_path, simulator, rules=REBOOTS_AFTER_PREPARE,
              hooks={"prepare": hook(tmp_path, "prepare", code=3)})
    env.start(agents)
    event_id = control.add(EventType="Reboot")["EventId"]
    (audit,) = wait_for(lambda: cloudevents(env.sink, "preparefailed"), timeout=15,
                        what="the preparefailed audit event")
    assert audit["id"] == f"{event_id}/preparefailed" and audit["subject"] == event_id
    assert audit["data"]["Reason"] == "failed: exit code 3" and audit["data"]["ExitCode"] == 3
    assert audit["data"]["Hook"] == "prepare" and audit["data"]["EventId"] == event_id
    time.sleep(0.5)  # several approver passes after the failure
    assert control.approvals() == []
    assert cloudevents(env.sink, "approved") == []


def test_timed_out_prepare_is_killed_with_its_children_and_never_approves(simulator, control,
                                                                         agents, tmp_path):
    env = Env(tmp_path, simulator, rules=REBOOTS_AFTER_PREPARE,
              hooks={"prepare": hook(tmp_path, "prepare", sleep=60, child=True),
                     "prepare_timeout": 1})
    env.start(agents)
    control.add(EventType="Reboot")
    (audit,) = wait_for(lambda: cloudevents(env.sink, "preparefailed"), timeout=15,
                        what="the timed-out audit event")
    assert audit["data"]["Reason"].startswith("timed-out: timed out after 1 s")
    assert audit["data"]["ExitCode"] is None
    (run,) = runs(tmp_path, "prepare")
    for pid in (run["pid"], run["child"]):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert control.approvals() == []


def test_prepare_runs_for_an_event_first_seen_started(simulator, control, agents, tmp_path):
    env = Env(tmp_path, simulator, hooks={"prepare": hook(tmp_path, "prepare")})
    env.start(agents)
    event_id = control.add(EventType="Reboot", EventStatus="Started")["EventId"]  # hardware failure
    (run,) = wait_for(lambda: runs(tmp_path, "prepare"), timeout=15, what="prepare")
    assert run["env"]["SE_EVENT_ID"] == event_id
    assert run["env"]["SE_EVENT_STATUS"] == "Started" and run["env"]["SE_NOT_BEFORE"] == ""
    assert control.approvals() == []  # nothing to approve once Started


def test_recover_runs_once_the_event_is_gone(simulator, control, agents, tmp_path):
    env = Env(tmp_path, simulator,
              hooks={"prepare": hook(tmp_path, "prepare"), "recover": hook(tmp_path, "recover"),
                     "approve_after_prepare": False})
    env.start(agents)
    event_id = control.add(EventType="Reboot")["EventId"]
    wait_for(lambda: runs(tmp_path, "prepare"), timeout=15, what="prepare")
    control.patch(event_id, EventStatus="Started")
    wait_for(lambda: cloudevents(env.sink, "started"), what="the started transition")
    time.sleep(0.3)
    assert runs(tmp_path, "recover") == []  # not while the event is still there
    control.delete(event_id)
    (run,) = wait_for(lambda: runs(tmp_path, "recover"), timeout=15, what="recover")
    assert run["env"]["SE_HOOK"] == "recover"
    assert run["env"]["SE_EVENT_ID"] == event_id
    assert run["env"]["SE_EVENT_STATUS"] == "Started"  # the last status seen
    assert run["env"]["SE_EVENT_OUTCOME"] == "completed"
    assert run["stdin"]["EventStatus"] == "Started"
    time.sleep(0.5)
    assert len(runs(tmp_path, "prepare")) == 1 and len(runs(tmp_path, "recover")) == 1
    assert control.approvals() == []  # approve_after_prepare = false


def test_recover_runs_for_an_event_canceled_while_the_agent_was_down(simulator, control, agents,
                                                                    tmp_path):
    env = Env(tmp_path, simulator,
              hooks={"prepare": hook(tmp_path, "prepare"), "recover": hook(tmp_path, "recover"),
                     "approve_after_prepare": False})
    agent = env.start(agents)
    event_id = control.add(EventType="Reboot")["EventId"]
    wait_for(lambda: runs(tmp_path, "prepare"), timeout=15, what="prepare")
    agent.kill()
    control.delete(event_id)
    env.start(agents)
    (run,) = wait_for(lambda: runs(tmp_path, "recover"), timeout=15, what="recover after restart")
    assert run["env"]["SE_EVENT_OUTCOME"] == "canceled"


def test_recover_gets_completed_when_a_vanished_scheduled_event_must_have_run(simulator, control,
                                                                             agents, tmp_path):
    env = Env(tmp_path, simulator,
              hooks={"prepare": hook(tmp_path, "prepare"), "recover": hook(tmp_path, "recover"),
                     "approve_after_prepare": False})
    env.start(agents)
    # Its notice must not pass before the agent (slow to start on a loaded machine) sees it.
    wait_for(lambda: simulator.sim.requests(), what="the agent polling")
    event_id = control.add(EventType="Reboot", NotBeforeInSeconds=5, StartedSeconds=1)["EventId"]
    wait_for(lambda: cloudevents(env.sink, "scheduled"), timeout=15, what="the agent seeing it Scheduled")
    # IMDS answers garbage from before NotBefore until the event is gone: its Started phase is never seen.
    control.faults(body="not json", seconds=60)
    wait_for(lambda: runs(tmp_path, "prepare"), timeout=15, what="prepare")
    wait_for(lambda: event_id not in {e["EventId"] for e in simulator.sim.events()}, timeout=20,
             what="the event to start and end")
    control.clear_faults()
    (run,) = wait_for(lambda: runs(tmp_path, "recover"), timeout=20, what="recover")
    assert run["env"]["SE_EVENT_ID"] == event_id
    assert run["env"]["SE_EVENT_STATUS"] == "Scheduled"  # the last status seen
    assert run["env"]["SE_EVENT_OUTCOME"] == "completed"  # NotBefore had passed: it ran
    (completed,) = wait_for(lambda: cloudevents(env.sink, "completed"), what="completed")
    assert completed["data"]["InferredFrom"] == "not-before-passed"


def test_successful_prepare_is_reported_by_a_prepared_event(simulator, control, agents, tmp_path):
    env = Env(tmp_path, simulator, rules=[{"action": "wait"}],
              hooks={"prepare": hook(tmp_path, "prepare", sleep=0.2)})
    env.start(agents)
    event_id = control.add(EventType="Reboot")["EventId"]
    (prepared,) = wait_for(lambda: cloudevents(env.sink, "prepared"), timeout=15, what="prepared")
    assert prepared["id"] == f"{event_id}/prepared" and prepared["subject"] == event_id
    assert prepared["eventstatus"] == "Scheduled" and prepared["eventtype"] == "Reboot"
    assert prepared["data"]["Hook"] == "prepare" and prepared["data"]["DurationSeconds"] >= 0.2
    assert prepared["data"]["EventId"] == event_id and prepared["data"]["Vm"]["name"] == "vm0"
    assert control.approvals() == []  # reported, not approved: the rule says wait


def test_failed_prepare_is_not_reported_as_prepared(simulator, control, agents, tmp_path):
    env = Env(tmp_path, simulator, hooks={"prepare": hook(tmp_path, "prepare", code=1)})
    env.start(agents)
    control.add(EventType="Reboot")
    wait_for(lambda: cloudevents(env.sink, "preparefailed"), timeout=15, what="preparefailed")
    time.sleep(0.5)
    assert cloudevents(env.sink, "prepared") == []


def test_prepare_lead_runs_prepare_only_once_not_before_is_that_close(simulator, control, agents,
                                                                      tmp_path):
    env = Env(tmp_path, simulator, hooks={"prepare": hook(tmp_path, "prepare"),
                                          "prepare_lead": 600})
    env.start(agents)
    routine = control.add(EventType="Reboot", NotBeforeInSeconds=900)["EventId"]
    urgent = control.add(EventType="Redeploy", NotBeforeInSeconds=300)["EventId"]
    (run,) = wait_for(lambda: runs(tmp_path, "prepare"), timeout=15, what="the urgent prepare")
    assert run["env"]["SE_EVENT_ID"] == urgent  # within the lead: at once
    time.sleep(1.5)
    assert [r["env"]["SE_EVENT_ID"] for r in runs(tmp_path, "prepare")] == [urgent]
    assert routine not in {a["EventId"] for a in control.approvals()}  # nor approved after it
    assert any("due when NotBefore is 600 s away" in r["message"] for r in log_records(env.log)
               if r.get("event_id") == routine)
    control.patch(routine, NotBeforeInSeconds=590)
    wait_for(lambda: len(runs(tmp_path, "prepare")) == 2, timeout=15, what="the routine prepare")
    assert runs(tmp_path, "prepare")[1]["env"]["SE_EVENT_ID"] == routine


def _started_count(log: Path) -> int:
    return sum(1 for r in log_records(log) if r["message"].startswith("this VM is"))


def test_completed_hook_is_not_rerun_after_sigkill_and_restart(simulator, control, agents, tmp_path):
    env = Env(tmp_path, simulator, rules=[{"action": "wait"}],
              hooks={"prepare": hook(tmp_path, "prepare")})
    agent = env.start(agents)
    control.add(EventType="Reboot")
    wait_for(lambda: any(r["message"].startswith("prepare hook succeeded")
                         for r in log_records(env.log)), timeout=15, what="prepare to finish")
    agent.kill()
    env.start(agents)
    wait_for(lambda: _started_count(env.log) == 2, timeout=15, what="the restarted agent")
    time.sleep(1.0)  # ten polls and approver passes by the restarted agent
    assert len(runs(tmp_path, "prepare")) == 1
    assert cloudevents(env.sink, "preparefailed") == []
    assert control.approvals() == []


def test_hook_interrupted_by_sigkill_is_not_rerun_and_never_approves(simulator, control, agents,
                                                                    tmp_path):
    env = Env(tmp_path, simulator, rules=REBOOTS_AFTER_PREPARE,
              hooks={"prepare": hook(tmp_path, "prepare", sleep=2.0)})
    agent = env.start(agents)
    event_id = control.add(EventType="Reboot")["EventId"]
    wait_for(lambda: runs(tmp_path, "prepare"), timeout=15, what="prepare to start")
    agent.kill()
    env.start(agents)
    (audit,) = wait_for(lambda: cloudevents(env.sink, "preparefailed"), timeout=15,
                        what="the interrupted audit event")
    assert audit["subject"] == event_id
    assert audit["data"]["Reason"].startswith("interrupted:")
    time.sleep(2.5)  # the orphaned first run has finished by now; nothing acts on it
    assert len(runs(tmp_path, "prepare")) == 1
    assert control.approvals() == []
    assert json.dumps(cloudevents(env.sink, "approved")) == "[]"
